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
from streamstate_jobs.spark import build_spark, driver_archive
from streamstate_pipeline import binaries
from streamstate_pipeline.settings import Settings

spark = build_spark(Settings(spark_jars=binaries.spark_jars_setting(install=False)), "class-archive-probe")
jvm = spark.sparkContext._jvm
pid = jvm.java.lang.ProcessHandle.current().pid()
options = spark.sparkContext.getConf().get("spark.driver.extraJavaOptions", "")
maps = open(f"/proc/{pid}/maps").read()
kafka = jvm.java.lang.Class.forName("org.apache.kafka.clients.consumer.KafkaConsumer")
print(kafka.getClassLoader() == jvm.java.lang.ClassLoader.getSystemClassLoader())
print(options)
print("mapped" if str(driver_archive(dict(spark.sparkContext.getConf().getAll()))) in maps else "not mapped")
spark.stop()
"""


def ensure_built(module: str, archive: Path) -> None:
    if not archive.is_file():
        subprocess.run([sys.executable, "-m", module], check=True, timeout=900)
    assert archive.is_file(), f"`python -m {module}` built no {archive}"


def test_a_spark_driver_built_by_build_spark_maps_the_driver_archive():
    """With the stack's jars (Spark's Kafka connector, S3A) as a job gets them: on a local
    master they are on the JVM's own classpath, where the archive serves their classes (a
    class of ``spark.jars`` comes through Spark's own loader, which no archive serves)."""
    from streamstate_jobs.class_archive import local_driver_archive
    from streamstate_pipeline import binaries

    binaries.checkpoint_io_jar()  # installed, as make installs them: the classpath the jobs run on
    binaries.spark_jars()
    archive = local_driver_archive()
    ensure_built("streamstate_jobs.class_archive", archive)
    probe = subprocess.run([sys.executable, "-c", DRIVER_PROBE], capture_output=True, text=True, timeout=300)
    assert probe.returncode == 0, probe.stderr[-3000:]
    system_loader, options, mapped = probe.stdout.strip().splitlines()[-3:]
    assert system_loader == "True", "Kafka's client came through spark.jars' class loader, not the JVM's classpath"
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
