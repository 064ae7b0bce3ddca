"""One short runnable program per seed example of the state API (``python -m examples.<name>``).

Each module keeps its user function pure Python, so the tests run it both on Spark and
through the in-memory tester (:mod:`streamstate.state.tester`).
"""
