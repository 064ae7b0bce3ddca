"""Spark's Python daemon for local runs (``spark.python.daemon.module``): PySpark from the installed package.

Spark puts ``$SPARK_HOME/python/lib/pyspark.zip`` first on its Python workers' path. Modules
imported from a zip are compiled from source in every worker (a zip holds no ``.pyc`` cache),
and each task's ``importlib.invalidate_caches()`` makes the zip importer re-read the archive's
directory: together about a third of the Python workers' CPU in the jobs' profile
(docs/profile.md). The pip-installed ``pyspark`` next to it is the same release, byte-compiled.
This module drops the zip from the path, then runs Spark's own daemon, so the daemon and every
worker it forks import the installed package.
"""

from __future__ import annotations

import sys


def drop_pyspark_zip() -> list[str]:
    """Remove ``pyspark.zip`` entries from ``sys.path`` and their importers; returns what was removed."""
    entries = [entry for entry in sys.path if entry.endswith("pyspark.zip")]
    for entry in entries:
        sys.path.remove(entry)
        sys.path_importer_cache.pop(entry, None)
    return entries


if __name__ == "__main__":
    drop_pyspark_zip()
    from pyspark import daemon

    daemon.manager()
