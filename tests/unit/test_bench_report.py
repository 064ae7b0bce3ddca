"""The results' header says which Java ran and with which JVM options: a run under
JAVA_TOOL_OPTIONS (C1 only, as `make run` starts the jobs) gives other figures than one without."""

from __future__ import annotations

import pytest

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


def test_the_header_names_the_spark_jvms_heap_when_the_run_recorded_it():
    """In local mode every engine's state, shuffle and collector share the one Spark JVM's heap,
    and native `session_window` gains more from a larger one than the jobs do."""
    from bench.report import markdown

    machine = {"cores": 2, "platform": "Linux", "python": "3.11", "pyspark": "4.2.0", "java": "openjdk 17",
               "load_average_at_start": [0.1, 0.1, 0.1]}
    setup = {"broker": "Apache Kafka", "spark_master": "local[*]", "shuffle_partitions": 2, "state_store": "RocksDB",
             "kafka_connector": "Spark's built-in connector", "checkpoints": "the local disk",
             "throughput_trigger": "availableNow", "input_partitions": 4, "runs_per_figure": 3, "seed": 1}
    doc = {"date": "2026-12-08", "machine": machine, "setup": setup, "figures": {}}
    assert "heap" not in markdown(doc)  # results from before the field
    header = markdown({**doc, "setup": {**setup, "driver_heap": "1g (Spark default), 1,024 MiB usable"}})
    assert ", the Spark JVM's heap 1g (Spark default), 1,024 MiB usable;" in header


def _throughput(rate: int, **stamps: str) -> dict:
    return {"sessions_job": {"median_rows_per_s": rate, "runs": [{"rows_per_s": rate}]}, **stamps}


def _production_rows(sessions: dict, production: dict) -> dict[str, tuple[str, str, str, str]]:
    from bench.report import _production_rows

    return {row[0]: row for row in _production_rows({"sessions": sessions, "production": production}, "sessions")}


RATIO = "Sessions job: s3a:// checkpoints in MinIO / local-disk checkpoints"


def test_the_checkpoint_stores_ratio_is_given_only_for_figures_of_one_run():
    """A partial `--only` run keeps the other figures of earlier runs: a ratio of a figure from
    each would not be side by side, so the table says so instead of printing one."""
    one = {"run_started_at": "2026-12-04T10:00:00+00:00"}
    rows = _production_rows(_throughput(50_000, measured_at="2026-12-04T10:20:00+00:00", **one),
                            _throughput(60_000, measured_at="2026-12-04T10:40:00+00:00", **one))
    assert rows[RATIO][1] == "1.20x"
    apart = _production_rows(_throughput(50_000, measured_at="2026-11-29T18:00:00+00:00", run_started_at="2026-11-29T17:00:00+00:00"),
                             _throughput(60_000, measured_at="2026-12-04T10:40:00+00:00", **one))
    assert apart[RATIO][1] == "no ratio" and "2026-11-29 18:00 and 2026-12-04 10:40" in apart[RATIO][3]
    # Figures from before the run was recorded: measured hours apart, not in one run.
    legacy = _production_rows(_throughput(50_000, measured_at="2026-11-29T18:00:00+00:00"),
                              _throughput(60_000, measured_at="2026-12-04T10:40:00+00:00"))
    assert legacy[RATIO][1] == "no ratio"
    assert _production_rows(_throughput(50_000, measured_at="2026-11-29T18:00:00+00:00"),
                            _throughput(60_000, measured_at="2026-11-29T18:30:00+00:00"))[RATIO][1] == "1.20x"
    # One recorded run and one from before the field: not the same run, however close in time.
    assert _production_rows(_throughput(50_000, measured_at="2026-12-04T10:20:00+00:00"),
                            _throughput(60_000, measured_at="2026-12-04T10:40:00+00:00", **one))[RATIO][1] == "no ratio"


def test_a_partial_run_written_elsewhere_merges_as_if_written_into_the_results(tmp_path, capsys):
    import json

    from bench.report import RESULTS, main

    results = json.loads(RESULTS.read_text())
    into = tmp_path / "results.json"
    into.write_text(json.dumps(results))
    partial = {**results, "date": "2030-01-01T00:00:00+00:00", "figures": {"api": {**results["figures"]["api"], "measured_at": "2030-01-01T00:05:00+00:00"}}}
    source = tmp_path / "api.json"
    source.write_text(json.dumps(partial))

    assert main(["--merge", str(source), "--into", str(into)]) == 0
    doc = json.loads(into.read_text())
    assert doc["date"] == "2030-01-01T00:00:00+00:00", "the partial run's own date, machine and setup"
    assert doc["figures"]["api"]["measured_at"] == "2030-01-01T00:05:00+00:00"
    assert {k: v for k, v in doc["figures"].items() if k != "api"} == {k: v for k, v in results["figures"].items() if k != "api"}
    assert "2030-01-01T00:05:00+00:00" in into.with_suffix(".md").read_text()
    assert "README.md" not in capsys.readouterr().out, "only bench/results.json updates the README"

    source.write_text(json.dumps({"date": "x"}))
    with pytest.raises(SystemExit):
        main(["--merge", str(source), "--into", str(into)])
    assert "holds no figures" in capsys.readouterr().err
