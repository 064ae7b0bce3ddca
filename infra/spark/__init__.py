"""Spark outside the product: the image's defaults, and a standalone cluster on this machine for the
cluster tests and benchmarks (``standalone.py``)."""
