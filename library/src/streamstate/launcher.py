"""The ``streamstate-spark-python`` console script: what Spark runs as ``<python> -m <module>``
for every Python process it starts, once ``PYSPARK_PYTHON`` names it
(:func:`streamstate.spark_python.worker_python`).

It runs the module as ``python -m`` would, after the steps :mod:`streamstate.spark_python`
describes (Spark's zips off the path; for PySpark's daemon, its workers' imports and the
collector between tasks), or hands the process to a fork server that runs it prepared the
same way (:mod:`streamstate.fork_server`).
"""

from __future__ import annotations

import os
import sys

from streamstate import fork_server
from streamstate.spark_python import DAEMON, LAUNCHER, as_python_m, drop_archives, preload, preloaded_modules, prepare_daemon, run_as_main


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if len(args) < 2 or args[0] != "-m":
        sys.exit(f"usage: {LAUNCHER} -m <module> [arg ...] (how Spark starts its Python workers); got {args}")
    status = _forked_by_a_server(args[1:])
    if status is not None:
        sys.exit(status)
    drop_archives()
    as_python_m(args[1:], os.getcwd())
    if args[1] == DAEMON:
        for failure in preload(preloaded_modules(os.environ)):
            print(failure, file=sys.stderr, flush=True)
        prepare_daemon()
    run_as_main(args[1])


def _forked_by_a_server(arguments: list[str]) -> int | None:
    """The exit status of ``python -m`` ``arguments`` run in a fork server's child: the server
    of the process that started this JVM, else this JVM's own for a one-off process with the
    switch on; None to run it here."""
    where = fork_server.process_server(arguments[0], os.environ)
    if where is not None:
        return fork_server.delegate_to(where, arguments)
    if fork_server.enabled(arguments[0], os.environ):
        return fork_server.delegate(arguments)
    return None
