"""The results' header says which Java ran and with which JVM options: a run under
JAVA_TOOL_OPTIONS (C1 only, as `make run` starts the jobs) gives other figures than one without."""

from __future__ import annotations

from bench.__main__ import java_version
from bench.report import java_description

PICKED_UP = """Picked up JAVA_TOOL_OPTIONS: -XX:TieredStopAtLevel=1 -XX:+UseSerialGC
openjdk version "17.0.15" 2025-04-15
OpenJDK Runtime Environment (build 17.0.15+6-Debian-1deb12u1)
"""


def test_the_version_line_is_found_after_the_jvms_picked_up_line():
    assert java_version(PICKED_UP) == 'openjdk version "17.0.15" 2025-04-15'
    assert java_version(PICKED_UP.split("\n", 1)[1]) == 'openjdk version "17.0.15" 2025-04-15'
    assert java_version("") == "unknown"


def test_the_header_names_the_jvm_options_or_says_there_were_none():
    machine = {"java": 'openjdk version "17.0.15" 2025-04-15', "jvm_options": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"}
    assert java_description(machine) == 'openjdk version "17.0.15" 2025-04-15, JVM options `-XX:TieredStopAtLevel=1 -XX:+UseSerialGC` (JAVA_TOOL_OPTIONS)'
    assert java_description({**machine, "jvm_options": ""}).endswith(", the JVMs' default options")
    assert java_description({"java": "openjdk"}) == "openjdk, the JVMs' default options"  # results from before the field
