"""The broker's JVM takes every produce request into its young generation.

G1, the JVM's default collector, allocates an object of half a region or more outside the young
generation, and only a concurrent marking cycle frees it; a broker reads each request into one
buffer. The JVM is asked itself (``-Xlog:gc+init``) which region size the broker's heap options
give it under G1, so a heap or an option changed later is measured, not read from the command line.
"""

from __future__ import annotations

import os
import re
import subprocess

from streamstate_pipeline import class_archives
from streamstate_stack.servers import KAFKA_HEAP, KafkaBroker, heap_options

# librdkafka's message.max.bytes, the largest request its producers send: the project sets no other.
LIBRDKAFKA_MAX_REQUEST_BYTES = 1_000_000
UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def g1_region_bytes(options: list[str]) -> int:
    env = {key: value for key, value in os.environ.items() if key != "JAVA_TOOL_OPTIONS"}  # make test's SerialGC
    result = subprocess.run(
        [str(class_archives.java_executable()), *options, "-XX:+UseG1GC", "-Xlog:gc+init", "-version"],
        capture_output=True, text=True, timeout=60, env=env,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    found = re.search(r"Heap Region Size: (\d+)([KMG])", result.stdout)
    assert found is not None, result.stdout[-2000:]
    return int(found.group(1)) * UNITS[found.group(2)]


def test_a_largest_produce_request_fits_in_half_a_region_of_the_brokers_heap():
    assert g1_region_bytes(heap_options(KAFKA_HEAP)) >= 2 * LIBRDKAFKA_MAX_REQUEST_BYTES


def test_a_smaller_heap_keeps_the_region_size():
    assert g1_region_bytes(heap_options("256m")) >= 2 * LIBRDKAFKA_MAX_REQUEST_BYTES


def test_the_broker_starts_with_its_heap_options(tmp_path):
    argv = KafkaBroker(tmp_path, 1, 2, heap="384m", java_options=()).argv()
    options = heap_options("384m")
    assert argv[1 : 1 + len(options)] == options
