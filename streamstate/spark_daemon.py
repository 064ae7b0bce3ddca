"""Spark's Python daemon for local runs (``spark.python.daemon.module``): PySpark from the installed package.

Spark starts its Python workers with ``$SPARK_HOME/python/lib/pyspark.zip`` and the py4j zip
first on the path, and the spark-core jar on it too. Modules imported from a zip are compiled
from source in every worker (a zip holds no ``.pyc`` cache), and each task's
``importlib.invalidate_caches()`` makes every zip importer re-read its archive's directory,
the jar's thousands of classes included: together a third of the Python workers' CPU in the
jobs' profile (docs/profile.md). The pip-installed ``pyspark`` and ``py4j`` are the same
releases, byte-compiled, and a jar holds no Python. This module drops those entries from the
path, then runs Spark's own daemon, so the daemon and every worker it forks import the
installed packages.
"""

from __future__ import annotations

import sys


def is_redundant(entry: str) -> bool:
    """Spark's bundled zips (installed as packages too) and jars (no Python in them)."""
    return entry.endswith(".jar") or ("/pyspark/python/lib/" in entry and entry.endswith(".zip"))


def drop_archives() -> list[str]:
    """Remove the redundant archive entries from ``sys.path`` and their importers; returns them."""
    entries = [entry for entry in sys.path if is_redundant(entry)]
    for entry in entries:
        sys.path.remove(entry)
    for cached in [key for key in sys.path_importer_cache if any(key.startswith(entry) for entry in entries)]:
        del sys.path_importer_cache[cached]
    return entries


if __name__ == "__main__":
    drop_archives()
    from pyspark import daemon

    daemon.manager()
