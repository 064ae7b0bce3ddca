"""The benchmark's results as JSON and as the Markdown table the README shows.

    .venv/bin/python -m bench.report --merge /tmp/api.json

merges a partial run written elsewhere (``python -m bench --only api --out /tmp/api.json``)
into bench/results.json as if it had been written there: its figures replace the same figures,
the others are kept, and the README's table follows.
"""

from __future__ import annotations

import argparse
import json
from datetime import datetime
from pathlib import Path
from typing import Any

from bench.api_latency import QUIET_FOR_S, QUIET_TIMEOUT_S
from bench.phases import phases_line

README = Path(__file__).resolve().parent.parent / "README.md"
RESULTS = Path(__file__).resolve().parent / "results.json"
README_START, README_END = "<!-- bench-results:start -->", "<!-- bench-results:end -->"


def write_results(doc: dict[str, Any], json_path: Path) -> None:
    """Write ``doc`` to ``json_path`` and its table to the same name with ``.md``."""
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps(doc, indent=2) + "\n")
    json_path.with_suffix(".md").write_text(markdown(doc) + "\n")


def merged(partial: dict[str, Any], kept: dict[str, Any]) -> dict[str, Any]:
    """``partial``'s run (its date, machine, setup, notes, figures) with the figures of ``kept``
    it did not measure: what a partial run writes when it writes into ``kept``'s file."""
    return {**partial, "figures": {**kept.get("figures", {}), **partial["figures"]}}


def update_readme(table: str, readme: Path = README) -> bool:
    """Put ``table`` between the README's bench-results markers; False when the markers are missing."""
    text = readme.read_text()
    start, end = text.find(README_START), text.find(README_END)
    if start < 0 or end < start:
        return False
    readme.write_text(text[: start + len(README_START)] + "\n" + table + "\n" + text[end:])
    return True


def _rate(value: float | None) -> str:
    return "n/a" if value is None else f"{value:,.0f}/s"


def _goal(met: bool | None, text: str) -> str:
    if met is None:
        return text
    return f"{text}: {'met' if met else 'missed'}"


def _engine(label: str, runs: dict[str, Any], setup: str) -> tuple[str, str, str, str]:
    """A throughput row: the median rate, the spread of the runs behind it and, where the run
    nearest the median was split into phases, where its time went."""
    rates = [r["rows_per_s"] for r in runs["runs"]]
    nearest = min(runs["runs"], key=lambda run: abs(run["rows_per_s"] - runs["median_rows_per_s"]))
    phases = phases_line(nearest.get("phases_ms", {}))
    return (label, f"{_rate(runs['median_rows_per_s'])} (runs {min(rates):,}-{max(rates):,})", "",
            setup + (f"; the median run: {phases}" if phases else ""))


def _ratio(label: str, ratio: float, goal: float | None, by_round: list[float] | None = None,
           every_round: bool = False) -> tuple[str, str, str, str]:
    """A ratio of two medians; with ``by_round`` (older results have none) also the ratio within each
    round. ``every_round``: the goal holds for each round's ratio, not only for the medians'."""
    rounds = "" if not by_round else "round by round (the engines in turns): " + ", ".join(f"{r:.2f}x" for r in by_round)
    if goal is None:
        return (label, f"{ratio:.2f}x", "", rounds)
    if every_round and by_round:
        return (label, f"{ratio:.2f}x", _goal(min(by_round) >= goal, f">= {goal:g}x in every round"), rounds)
    return (label, f"{ratio:.2f}x", _goal(ratio >= goal, f">= {goal:g}x"), rounds)


# Issue 54's goals for the latency: p50 within this factor of Spark's own Python stateful query
# measured in the same run (the floor "spark" of bench.latency_floor), p99 under P99_GOAL_MS.
FLOOR_FACTOR_GOAL = 1.3
P99_GOAL_MS = 1000


# Figures from before they recorded their run: two measured this close together came from one run.
ONE_RUN_WITHIN_S = 3 * 3600


def one_run(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether figures ``a`` and ``b`` were measured in one run, so a ratio of them is side by side
    (a partial ``--only`` run keeps the other figures of earlier runs)."""
    if "run_started_at" in a or "run_started_at" in b:
        return bool(a.get("run_started_at") == b.get("run_started_at"))
    if "measured_at" not in a or "measured_at" not in b:
        return False
    apart = datetime.fromisoformat(a["measured_at"]) - datetime.fromisoformat(b["measured_at"])
    return abs(apart.total_seconds()) <= ONE_RUN_WITHIN_S


def _measured_on(figure: dict[str, Any]) -> str:
    """When ``figure`` was measured, to the minute (UTC)."""
    return str(figure.get("measured_at", "an unrecorded time"))[:16].replace("T", " ")


def _p50_goal(p50_ms: float, latency: dict[str, Any] | None) -> str:
    """The p50's goal: within FLOOR_FACTOR_GOAL of Spark's floor measured in the same run ("" without one)."""
    floor = (latency or {}).get("floors", {}).get("spark")
    if not floor:
        return ""
    factor = p50_ms / floor["median_p50_ms"]
    return _goal(factor <= FLOOR_FACTOR_GOAL, f"<= {FLOOR_FACTOR_GOAL:g}x Spark's floor ({factor:.2f}x)")


def _p99_goal(p99_ms: float) -> str:
    return _goal(p99_ms < P99_GOAL_MS, f"< {P99_GOAL_MS / 1000:g} s")


PRODUCTION_SETUP = "Apache Kafka (KRaft), Spark's built-in connector, s3a:// checkpoints in MinIO"


FLOOR_LABELS = {
    "machinery": ("Latency floor: the job with a rule that keeps no state",
                  "validation, packing, buckets and routing as in the job; no state read or written, no snapshots"),
    "spark": ("Latency floor: Spark's own Python stateful query",
              "Kafka source, transformWithStateInPandas with a processor that registers no state, Spark's Kafka sink"),
}


# The phases' medians are each over the measured periods' batches: they need not add up to the median batch.
PHASES_SETUP = "medians over the measured periods' {batches} batches; each batch's phases add up to it (notes)"


def _p50_p99(p50_ms: float, p99_ms: float) -> str:
    return f"{p50_ms:,.0f} / {p99_ms:,.0f} ms"


def _median_p50_p99(latency: dict[str, Any]) -> str:
    """A latency measurement's figure: the medians of its periods' p50 and p99."""
    return _p50_p99(latency["median_p50_ms"], latency["median_p99_ms"])


def _median_batch(latency: dict[str, Any]) -> str | None:
    """The median batch (``triggerExecution``) of a latency measurement, None before phases were kept."""
    phases = latency.get("batch_phase_medians_ms", {})
    return f"{phases['triggerExecution']:,.0f} ms" if "triggerExecution" in phases else None


def _phases(latency: dict[str, Any]) -> str:
    """The medians of a latency measurement's batch phases (``bench.phases``), "" when it has none."""
    return phases_line(latency.get("phases", {}).get("medians_ms", {}))


def _batch_with_phases(latency: dict[str, Any]) -> str | None:
    """The median batch and, where measured, its phases, both over the measured periods'
    batches: "520 ms: driver 88 · source 150 ... ms" (else the median of the last batches)."""
    medians = latency.get("phases", {}).get("medians_ms", {})
    if "triggerExecution" in medians:
        return f"{medians['triggerExecution']:,.0f} ms: {phases_line(medians)}"
    return _median_batch(latency)


def _latency_floor_rows(f: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """The latency's floors measured in the same run (``bench.latency_floor``), each
    as p50 / p99 and its median batch with its phases."""
    rows = []
    batch = _batch_with_phases(f)
    if batch is not None:
        setup = PHASES_SETUP.format(batches=f["phases"]["batches"]) if _phases(f) else ""
        rows.append(("Event-to-alert latency: the job's median batch" + (", by phase" if _phases(f) else ""), batch, "", setup))
    for name, floor in f.get("floors", {}).items():
        label, setup = FLOOR_LABELS[name]
        batch = _batch_with_phases(floor)
        result = _median_p50_p99(floor) + ("" if batch is None else f", batch {batch}")
        rows.append((f"{label}, p50 / p99", result, "", setup))
    return rows


def _production_rows(figures: dict[str, Any], kind: str) -> list[tuple[str, str, str, str]]:
    """The production path's row(s) for ``kind`` (sessions, anomalies, latency), next to the embedded ones
    (the same broker and connector; checkpoints on the local disk rather than s3a:// in MinIO)."""
    f = figures.get("production")
    if not f or "error" in f:
        return []
    if kind == "latency":
        lat, embedded_latency = f["latency"], figures.get("latency")
        floor_goal = _p50_goal(lat["median_p50_ms"], embedded_latency if embedded_latency and one_run(f, embedded_latency) else None)
        return [
            ("Event-to-alert latency p50, production path", f"{lat['median_p50_ms']:,.0f} ms",
             floor_goal or "no floor measured in its run", PRODUCTION_SETUP),
            ("Event-to-alert latency p99, production path", f"{lat['median_p99_ms']:,.0f} ms",
             _p99_goal(lat["median_p99_ms"]), ""),
        ] + _phase_rows("Event-to-alert latency, production path: the median batch, by phase", lat) + _file_manager_rows(f)
    job = f[f"{kind}_job"]
    label = {"sessions": "Sessions job (events/s), production path", "anomalies": "Anomalies job (points/s), production path"}[kind]
    rows = [_engine(label, job, PRODUCTION_SETUP)]
    embedded = figures.get(kind, {}).get(f"{kind}_job")
    ratio_label = f"{kind.capitalize()} job: s3a:// checkpoints in MinIO / local-disk checkpoints"
    if embedded and "error" not in figures[kind]:
        if one_run(f, figures[kind]):
            rows.append(_ratio(ratio_label, job["median_rows_per_s"] / embedded["median_rows_per_s"], None))
        else:
            rows.append((ratio_label, "no ratio", "", f"measured in different runs ({_measured_on(figures[kind])} and {_measured_on(f)})"))
    return rows


def _checkpoint_writes_ms(latency: dict[str, Any]) -> float:
    """A batch's median time in its checkpoint writes: the offset log, the commit log, the state stores' commits."""
    phases = latency["batch_phase_medians_ms"]
    return phases["walCommit"] + phases["commitOffsets"] + phases["commitTimeMs"]


def _phase_rows(label: str, latency: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """A latency measurement's median batch with its phases, as a row of its own (none before phases were kept)."""
    if not _phases(latency):
        return []
    return [(label, _batch_with_phases(latency) or "", "", PHASES_SETUP.format(batches=latency["phases"]["batches"]))]


def _file_manager_rows(f: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """The production path's latency with spark-jobs/jvm/'s checkpoint file manager and with Spark's, side by side."""
    theirs = f.get("latency_spark_file_manager")
    if theirs is None:
        return []
    ours = f["latency"]
    return [
        ("Event-to-alert latency, production path, p50 / p99: one PUT per checkpoint file",
         f"{_median_p50_p99(ours)}, checkpoint writes {_checkpoint_writes_ms(ours):,.0f} ms a batch",
         "", "spark-jobs/jvm/'s SinglePutCheckpointFileManager (the production path above)"),
        ("... with Spark's checkpoint file manager",
         f"{_median_p50_p99(theirs)}, checkpoint writes {_checkpoint_writes_ms(theirs):,.0f} ms a batch"
         + (f"; batch {_batch_with_phases(theirs)}" if _phases(theirs) else ""),
         "", "each file written to a temporary object and copied into place; same run, same input"),
    ]


def _rows(figures: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    rows: list[tuple[str, str, str, str]] = []
    if "ceiling" in figures and "error" not in figures["ceiling"]:
        f = figures["ceiling"]
        rate = _rate(f["confluent_kafka_assign"]["median_rows_per_s"])
        rows.append(("Ceiling: confluent-kafka `assign()` consume", rate, "", f"{f['records']:,} user events, 4 partitions"))
    if "sessions" in figures and "error" not in figures["sessions"]:
        f = figures["sessions"]
        setup = f"{f['dataset']['records']:,} events, {f['dataset']['keys']:,} users"
        if "source_and_validation" in f:
            rows.append(_engine("Source + contract validation, no state (`noop` sink)", f["source_and_validation"], setup + ", availableNow"))
        rows += [
            _engine("Sessions job (events/s, first read to last output)", f["sessions_job"], setup + ", availableNow, RocksDB"),
            _engine("Spark native `session_window` (same source)", f["native_session_window"], setup + ", complete mode, RocksDB"),
            _engine("Quix Streams 3.28 stateful apply (same rule)", f["quixstreams"], setup + ", 1 process, RocksDB + changelog"),
            _ratio("Sessions job / native", f["ratio_job_vs_native"], 1.25, f.get("ratio_job_vs_native_by_round"), every_round=True),
            _ratio("Sessions job / Quix Streams", f["ratio_job_vs_quix"], 3.0, f.get("ratio_job_vs_quix_by_round")),
        ]
    rows += _production_rows(figures, "sessions")
    if "anomalies" in figures and "error" not in figures["anomalies"]:
        f = figures["anomalies"]
        setup = f"{f['dataset']['records']:,} points, {f['dataset']['keys']:,} series"
        rows += [
            _engine("Anomalies job (points/s)", f["anomalies_job"], setup + ", availableNow, RocksDB"),
            _engine("Quix Streams 3.28 stateful apply (same rule)", f["quixstreams"], setup + ", 1 process, RocksDB + changelog"),
            _ratio("Anomalies job / Quix Streams", f["ratio_job_vs_quix"], 4.0, f.get("ratio_job_vs_quix_by_round")),
        ]
    rows += _production_rows(figures, "anomalies")
    if "latency" in figures and "error" not in figures["latency"]:
        f = figures["latency"]
        load = ("without a pause, {:.0f}s per measured period" if f.get("load") == "continuous"
                else "for {:.0f}s per run, idle between runs").format(f["seconds_per_run"])
        setup = f"{f['rate_per_s']:,} points/s {load}, trigger {f['trigger']}"
        if "lead_in_s" in f:
            setup += f", after a {f['lead_in_s']:.0f}s lead-in under the same load"
        rows.append(("Event-to-alert latency p50", f"{f['median_p50_ms']:,.0f} ms", _p50_goal(f["median_p50_ms"], f), setup))
        rows.append(("Event-to-alert latency p99", f"{f['median_p99_ms']:,.0f} ms",
                     _p99_goal(f["median_p99_ms"]), ""))
        lead_in = f.get("lead_in", {})
        if "p50_ms" in lead_in:
            rows.append((f"Event-to-alert latency in the lead-in (the job's first {f['lead_in_s']:.0f}s under load), p50 / p99",
                         _p50_p99(lead_in["p50_ms"], lead_in["p99_ms"]), "", ""))
        rows += _latency_floor_rows(f)
    rows += _production_rows(figures, "latency")
    if "transactions" in figures and "error" not in figures["transactions"]:
        rows += _transaction_rows(figures["transactions"])
    if "state" in figures and "error" not in figures["state"]:
        f = figures["state"]
        rows.append((
            f"State scale: batch ms with {f['large']['keys_in_state']:,} vs {f['small']['keys_in_state']:,} keys",
            f"{f['large']['median_ms']:,.0f} vs {f['small']['median_ms']:,.0f} ms = {f['ratio']:.2f}x",
            _goal(f["ratio"] < 1.5, "< 1.5x"),
            f"same {f['touched']:,}-record batch, processingTime trigger",
        ))
        every = f.get("update_state_by_key")
        if every is not None:
            rows.append((
                f"`update_state_by_key` (every key, every batch): batch ms with {every['large']['keys_in_state']:,} vs "
                f"{every['small']['keys_in_state']:,} keys",
                f"{every['large']['median_ms']:,.0f} vs {every['small']['median_ms']:,.0f} ms = {every['ratio']:.2f}x",
                "",
                "the same batches; the whole state is called and written out each batch, as DStream's",
            ))
    if "windows" in figures and "error" not in figures["windows"]:
        f = figures["windows"]
        d = f["dataset"]
        setup = f"{d['records']:,} events, {d['keys']:,} keys, {d['window']} windows every {d['slide']}, append, availableNow"
        rows += [
            _engine("`reduce_by_key_and_window` (sum, inverse `-`)", f["reduce_by_key_and_window"], setup),
            _engine("Spark `groupBy(window(...), key).agg(sum)` (same input)", f["native_group_by_window"], setup + ", RocksDB"),
            _ratio("`reduce_by_key_and_window` / native" + ("" if f["same_windows"] else " (WINDOW COUNTS DIFFER)"), f["ratio_vs_native"], None),
        ]
    if "api" in figures and "error" not in figures["api"] and "sizes" in figures["api"]:
        rows += _api_rows(figures["api"])
    if "validation" in figures and "error" not in figures["validation"]:
        rows += _validation_rows(figures["validation"])
    if "cluster" in figures and "error" not in figures["cluster"] and "skipped" not in figures["cluster"]:
        f = figures["cluster"]
        local, cluster = f.get("local", {}), f.get("cluster", {})
        rows.append((
            "Sessions job: local[2] vs 2-worker standalone cluster (bench/cluster_throughput.py)",
            f"{_rate(local.get('rows_per_s'))} vs {_rate(cluster.get('rows_per_s'))} = {f.get('ratio_cluster_vs_local')}x",
            "",
            f"{f.get('dataset', {}).get('records', 0):,} events, one run each",
        ))
    for name, f in figures.items():
        if "error" in f:
            rows.append((f"{name}: FAILED", f["error"][:200], "", ""))
        elif "skipped" in f:
            rows.append((f"{name}: skipped", f["skipped"], "", ""))
    return rows


def _transaction_rows(f: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """Exactly-once output's cost: throughput and latency with transactions on and off (issue 31)."""
    on, off = f["sessions_job"]["on"], f["sessions_job"]["off"]
    lat_on, lat_off = f["latency"]["on"], f["latency"]["off"]
    return [
        ("Sessions job, exactly-once output (transactions on) / at least once (off)",
         f"{on['median_rows_per_s']:,.0f}/s / {off['median_rows_per_s']:,.0f}/s = {f['ratio_throughput_on_vs_off']:.2f}x", "",
         "same dataset, runs alternating between the modes"),
        ("Event-to-alert p50 / p99, transactions on vs off",
         f"{_median_p50_p99(lat_on)} vs {_median_p50_p99(lat_off)}", "", "a read_committed consumer times the alerts in both"),
    ] + _phase_rows("... transactions on: the median batch, by phase", lat_on) + _phase_rows("... transactions off: the median batch, by phase", lat_off)


def _settled(size: dict[str, Any]) -> str:
    """When the rebuild began: on a quiet machine, once the broker's log cleaner was done with the
    published snapshots (older results: at once)."""
    if "quiet_after_s" not in size:
        return ""
    quiet_s = size["quiet_after_s"]
    if quiet_s is None:
        return f", started on a machine still busy {QUIET_TIMEOUT_S:.0f} s after publishing"
    return (
        f", started once the machine had been quiet for {QUIET_FOR_S:.0f} s, {quiet_s:,.0f} s after publishing "
        "(the broker's log cleaner compacts what was published)"
    )


def _api_rows(f: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """Per view size: RSS, cold rebuild, restart with the store, latency at each rate (goals: issue 21)."""
    rows = []
    for size, s in f["sizes"].items():
        users = f"API, {int(size):,} users"
        rss = s["api_rss_mb"]
        worst = max(v for v in rss.values() if v is not None)
        rows.append((f"{users}: RSS", f"{rss['rebuilt']:,.0f} MB rebuilt, {rss['after_load']:,.0f} MB after load, {rss['restarted']:,.0f} MB restarted",
                     _goal(worst < 1024, "< 1 GB"), f"store {s['store_disk_mb']:,.0f} MB on disk"))
        rows.append((f"{users}: cold rebuild", f"{s['cold_rebuild_s']:,.1f} s = {s['cold_rebuild_per_s']:,}/s",
                     _goal(s["cold_rebuild_per_s"] >= 200_000, ">= 200,000/s"),
                     f"empty store, process start to /readyz 200{_settled(s)}; the follower's catch-up alone {s['cold_rebuild_follower_s']} s = "
                     f"{s['cold_rebuild_follower_per_s']:,}/s; CPU {s['cold_rebuild_cpu_us_per_snapshot']} µs/snapshot (all API processes)"))
        restart = s["restart_to_ready_s"]
        rows.append((f"{users}: restart to ready, store present", f"{restart['sigterm']} s (SIGTERM), {restart['sigkill']} s (SIGKILL)",
                     _goal(max(restart.values()) < 5, "< 5 s"), "process start to /readyz 200"))
        for rate, at in s["at_rate"].items():
            goal = _goal(at["median_p99_ms"] < 10, "p99 < 10 ms") if float(rate) >= 2500 else ""
            rows.append((f"{users}: p50 / p99 at {float(rate):,.0f} req/s", f"{at['median_p50_ms']:,.1f} / {at['median_p99_ms']:,.1f} ms", goal,
                         f"open loop from a second process, {f['seconds_per_run']:.0f}s per run; API CPU {at['median_api_cpu_ms_per_request']} ms/request"))
    return rows


def _validation_rows(f: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """Per dataset: the validation step's µs per record, per-record pydantic vs the fast path (issue 18)."""
    rows = []
    for name, d in f["datasets"].items():
        good = name.endswith("_good")
        kind = name.removesuffix("_good").removesuffix("_with_bad").replace("_", " ")
        label = f"Validation step, {kind}, " + ("good records only" if good else f"{f['bad_share']:.0%} bad")
        before, after = d["per_record"], d["fast_path"]
        rows.append((
            label,
            f"{before['median_us_per_record']:.2f} µs per record (per-record pydantic; best run {before['best_us_per_record']:.2f}) -> "
            f"{after['median_us_per_record']:.2f} µs (fast path; best run {after['best_us_per_record']:.2f}) = {d['speedup']}x",
            _goal(after["median_us_per_record"] < 2, "< 2 µs per good record") if good else "",
            f"{d['records']:,} records in batches of {f['batch_rows']:,}, CPU time, median of {f['runs']} runs; "
            f"{d['fallback_records']:,} through the contract",
        ))
    return rows


def _run_time(setup: dict[str, Any]) -> str:
    if "bench_wall_s" not in setup:
        return ""
    minutes = setup["bench_wall_s"] / 60
    if setup.get("bench_partial"):
        return f"The last run, of {', '.join(setup['bench_partial'])} only, took {minutes:.1f} min."
    return f"The whole `make bench` run took {minutes:.1f} min."


def java_description(machine: dict[str, Any]) -> str:
    """The Java the run used and the options its JVMs got (results from before the field: none were given)."""
    options = machine.get("jvm_options")
    return f"{machine['java']}, " + (f"JVM options `{options}` (JAVA_TOOL_OPTIONS)" if options else "the JVMs' default options")


def markdown(doc: dict[str, Any]) -> str:
    """The results table with the machine and setup it was measured on."""
    m, s = doc["machine"], doc["setup"]
    stamps = sorted(f["measured_at"] for f in doc["figures"].values() if "measured_at" in f)
    when = f"between {stamps[0]} and {stamps[-1]} (a partial `--only` run replaces its figures)" if stamps else doc["date"]
    lines = [
        f"Measured {when} on {m['cores']} cores ({m['platform']}), Python {m['python']}, PySpark {m['pyspark']}, {java_description(m)}.",
        f"Load average (1/5/15 min) at start {m['load_average_at_start']}, at end {m.get('load_average_at_end')}"
        + (": other work shared the machine, so every figure is noisy." if m["load_average_at_start"][0] > m["cores"] else "."),
        _run_time(s),
        f"Broker: {s['broker']}. Spark: {s['spark_master']}, state partitions: {s['shuffle_partitions']}, "
        f"{s['state_store']} state store, {s['kafka_connector']}, checkpoints on {s['checkpoints']}"
        + (f", Python processes {s['python_processes']}" if s.get("python_processes") else "")
        + (f", the Spark JVM's heap {s['driver_heap']}" if s.get("driver_heap") else "") + "; "
        f"throughput runs: {s['throughput_trigger']}. "
        f"Input topics: {s['input_partitions']} partitions. Median of {s['runs_per_figure']} runs per figure; seed {s['seed']}.",
        "",
        "| figure | result | goal | setup |",
        "|---|---|---|---|",
    ]
    lines += [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in _rows(doc["figures"])]
    lines += ["", "Notes:", *(f"- {note}" for note in doc.get("notes", []))]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.report", description=__doc__.split("\n\n")[0])
    parser.add_argument("--merge", type=Path, required=True, help="results JSON of a partial run written with --out")
    parser.add_argument("--into", type=Path, default=RESULTS, help="the results it joins (default: bench/results.json, and then the README)")
    args = parser.parse_args(argv)
    try:
        partial = json.loads(args.merge.read_text())
        kept = json.loads(args.into.read_text()) if args.into.exists() else {}
    except (OSError, ValueError) as exc:
        parser.error(f"cannot read the results: {exc}")
    if not isinstance(partial, dict) or not isinstance(partial.get("figures"), dict):
        parser.error(f"{args.merge} holds no figures: not a results file of python -m bench")
    doc = merged(partial, kept)
    write_results(doc, args.into)
    print(f"{', '.join(sorted(partial['figures']))} from {args.merge} written into {args.into} and {args.into.with_suffix('.md')}")
    if args.into.resolve() == RESULTS and update_readme(markdown(doc)):
        print("README.md: Benchmarks table updated")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
