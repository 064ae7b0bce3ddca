"""The JVMs this project starts map their class archives (streamstate_pipeline.class_archives).

`make test` builds both archives before the suite; a test here builds one that is missing
(`python -m streamstate_jobs.class_archive` / `streamstate_stack.class_archive`, as make does),
then starts a real Spark driver (build_spark, in a process of its own) and a real broker and
reads the JVM's memory map: an archive the JVM refused (another classpath, a changed jar) is
not mapped, so the assertion fails whenever the archive is not in use.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

from streamstate_stack.launcher import free_port
from streamstate_stack.servers import KafkaBroker, broker_archive

DRIVER_PROBE = """
from streamstate_jobs.class_archive import driver_archive
from streamstate_jobs.spark import build_spark
from streamstate_pipeline.settings import Settings

spark = build_spark(Settings(), "class-archive-probe")
pid = spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()
options = spark.sparkContext.getConf().get("spark.driver.extraJavaOptions", "")
maps = open(f"/proc/{pid}/maps").read()
print(options)
print("mapped" if str(driver_archive(dict(spark.sparkContext.getConf().getAll()))) in maps else "not mapped")
spark.stop()
"""


def ensure_built(module: str, archive: Path) -> None:
    if not archive.is_file():
        subprocess.run([sys.executable, "-m", module], check=True, timeout=900)
    assert archive.is_file(), f"`python -m {module}` built no {archive}"


def test_a_spark_driver_built_by_build_spark_maps_the_driver_archive():
    from streamstate_jobs.class_archive import local_driver_archive
    from streamstate_pipeline import binaries

    binaries.checkpoint_io_jar()  # installed, as make installs it: the classpath the jobs run on
    archive = local_driver_archive()
    ensure_built("streamstate_jobs.class_archive", archive)
    probe = subprocess.run([sys.executable, "-c", DRIVER_PROBE], capture_output=True, text=True, timeout=300)
    assert probe.returncode == 0, probe.stderr[-3000:]
    options, mapped = probe.stdout.strip().splitlines()[-2:]
    assert f"-XX:SharedArchiveFile={archive}" in options.split()
    assert mapped == "mapped", f"the driver JVM did not map {archive} (options: {options})"


def test_a_broker_maps_the_broker_archive():
    archive = broker_archive()
    ensure_built("streamstate_stack.class_archive", archive)
    with tempfile.TemporaryDirectory() as home:
        broker = KafkaBroker(Path(home), free_port(), free_port())
        broker.format_storage()
        process = subprocess.Popen(broker.argv(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            maps, deadline = "", time.monotonic() + 60
            while str(archive) not in maps and time.monotonic() < deadline and process.poll() is None:
                maps = Path(f"/proc/{process.pid}/maps").read_text()
                time.sleep(0.2)
            assert str(archive) in maps, f"the broker JVM did not map {archive} (exit: {process.poll()})"
        finally:
            process.kill()
            process.wait(30)
