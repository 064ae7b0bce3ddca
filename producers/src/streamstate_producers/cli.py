"""``streamstate-produce``: send generated or recorded records to Kafka (or Kinesis: ``--sink kinesis``).

Sub-commands: ``events``, ``metrics``, ``replay FILE``, ``record FILE`` and ``demo``
(also what runs with no sub-command: events and metrics together until stopped).
Exit codes: 0 all delivered, 1 some deliveries failed (counted in the summary),
2 bad input (one ``error:`` line on stderr, no traceback), 130 interrupted twice.
"""

from __future__ import annotations

import argparse
import itertools
import random
import signal
import sys
import threading
from functools import partial
from typing import Any, Iterable, Iterator, NoReturn, Sequence

from confluent_kafka import KafkaException

from streamstate_producers import kinesis_writer
from streamstate_producers.generators import DEFAULT_START_TS, MetricGenerator, UserEventGenerator, interleave
from streamstate_producers.kafka_writer import ProducerSetupError, ProduceSummary, check_broker, produce_records
from streamstate_producers.produced_record import ProducedRecord
from streamstate_producers.scenario import ScenarioError, read_scenario, write_scenario
from streamstate_pipeline.cli_common import add_kafka_options, add_version, settings_from_args
from streamstate_pipeline.errors import ProducerError
from streamstate_pipeline.settings import Settings, get_settings

EXIT_OK, EXIT_DELIVERY_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
SUB_COMMANDS = ("events", "metrics", "replay", "record", "demo")
GENERATED = {"events": "user events", "metrics": "metric points"}  # sub-command -> what it sends
# How long the demo's producer gathers records into one request. At the demo's 300 records/s
# over eight partitions the generators' 20 ms sent one record a request, and serving them took
# the broker a quarter of a core while the jobs start (docs/profile.md, 2026-12-02).
DEMO_LINGER_MS = 100


class UsageError(ProducerError):
    """Bad command-line input; reported as one ``error:`` line."""


class OneLineParser(argparse.ArgumentParser):
    """argparse whose errors are one ``error: ...`` line (no usage dump), exit code 2."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


# --------------------------------------------------------------------------- argument types
def _number(kind: type, test, requirement: str):
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {requirement}, got {text!r}") from None
        if not test(value):
            raise argparse.ArgumentTypeError(f"expected {requirement}, got {text}")
        return value

    return parse


positive_float = _number(float, lambda v: v > 0 and v != float("inf"), "a positive number")
positive_int = _number(int, lambda v: v > 0, "a positive integer")
non_negative_int = _number(int, lambda v: v >= 0, "a non-negative integer")
fraction = _number(float, lambda v: 0.0 <= v <= 1.0, "a fraction between 0 and 1")


# --------------------------------------------------------------------------- options
def _add_connection(parser: argparse.ArgumentParser, settings: Settings) -> None:
    add_kafka_options(parser, default_bootstrap=settings.bootstrap_servers)
    parser.add_argument("--bootstrap", dest="bootstrap_servers", help=argparse.SUPPRESS)  # the flag's former name
    parser.add_argument(
        "--sink", choices=("kafka", "kinesis"), default=settings.source,
        help="send to Kafka topics, or to the Kinesis streams of the same names (default: STREAMSTATE_SOURCE, %(default)s)",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress line on stderr")


def _add_pace(parser: argparse.ArgumentParser, rate_help: str = "records per second (default: as fast as possible)") -> None:
    parser.add_argument("--rate", type=positive_float, help=rate_help)
    parser.add_argument("--duration", type=positive_float, metavar="SECONDS", help="stop after this many seconds")
    parser.add_argument("--count", type=positive_int, metavar="N", help="stop after N records")


def _add_generation(parser: argparse.ArgumentParser, clock: str) -> None:
    parser.add_argument("--seed", type=int, help="random seed; the same seed gives the same records (default: random)")
    parser.add_argument(
        "--clock", choices=("simulated", "wall"), default=clock, help="event times: simulated from --start-ts, or the wall clock (default: %(default)s)"
    )
    parser.add_argument("--start-ts", type=non_negative_int, default=DEFAULT_START_TS, help="first simulated event time, epoch ms (default: %(default)s)")
    parser.add_argument("--malformed", type=fraction, default=0.0, help="fraction of malformed records (default: %(default)s)")


def _add_events(parser: argparse.ArgumentParser, defaults: dict[str, float] | None = None) -> None:
    defaults = defaults or {}
    parser.add_argument("--users", type=positive_int, default=1000, help="distinct users (default: %(default)s)")
    parser.add_argument(
        "--duplicates", type=fraction, default=defaults.get("duplicates", 0.0), help="fraction of re-sent earlier events (default: %(default)s)"
    )
    parser.add_argument("--late", type=fraction, default=defaults.get("late", 0.0), help="fraction of late events (default: %(default)s)")
    parser.add_argument("--max-lateness-ms", type=positive_int, default=120_000, help="how far behind the clock a late event may be (default: %(default)s)")


def _add_metrics(parser: argparse.ArgumentParser, defaults: dict[str, float] | None = None) -> None:
    defaults = defaults or {}
    parser.add_argument("--series", type=positive_int, default=int(defaults.get("series", 50)), help="distinct series (default: %(default)s)")
    parser.add_argument("--interval-ms", type=positive_int, default=1000, help="simulated time between two points of a series (default: %(default)s)")
    parser.add_argument(
        "--anomaly-rate", type=fraction, default=defaults.get("anomaly_rate", 0.0), help="fraction of points that are injected anomalies (default: %(default)s)"
    )


def build_parser(settings: Settings) -> OneLineParser:
    parser = OneLineParser(
        prog="streamstate-produce",
        description="Send generated or recorded user events and metric points to Kafka (no sub-command: demo).",
        epilog="exit codes: 0 all delivered, 1 some deliveries failed, 2 bad input, 130 interrupted twice",
    )
    add_version(parser)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    for name, add_options, topic in (("events", _add_events, settings.topic_user_events), ("metrics", _add_metrics, settings.topic_metrics)):
        generated = commands.add_parser(name, help=f"generated {GENERATED[name]}")
        _add_connection(generated, settings)
        _add_pace(generated)
        _add_generation(generated, "simulated")
        add_options(generated)
        generated.add_argument("--topic", default=topic, help="target topic (default: %(default)s)")

    replay = commands.add_parser("replay", help="send the records of a scenario file")
    replay.add_argument("file", help="JSONL scenario file (see 'record')")
    _add_connection(replay, settings)
    _add_pace(replay)
    replay.add_argument("--topic", help="send every record to this topic instead of its own")

    record = commands.add_parser("record", help="write generated records to a scenario file instead of sending")
    record.add_argument("file", help="JSONL scenario file to write")
    record.add_argument("--events", type=non_negative_int, default=0, metavar="N", help="user events to write")
    record.add_argument("--metrics", type=non_negative_int, default=0, metavar="N", help="metric points to write")
    _add_generation(record, "simulated")
    _add_events(record)
    _add_metrics(record)

    demo = commands.add_parser(
        "demo", help="events and metrics together until stopped (the default)",
        description="Events and metrics together until stopped. Records wait up to "
        f"{DEMO_LINGER_MS} ms to share a request (-X linger.ms=N changes it). The series keep "
        "their means and noise from run to run, whatever the seed, so that a resumed pipeline "
        "flags the anomalies a run injects, not the series.")
    _add_connection(demo, settings)
    demo.add_argument("--events-rate", type=positive_float, default=200.0, help="user events per second (default: %(default)s)")
    demo.add_argument("--metrics-rate", type=positive_float, default=100.0, help="metric points per second (default: %(default)s)")
    demo.add_argument("--duration", type=positive_float, metavar="SECONDS", help="stop after this many seconds (default: run until stopped)")
    _add_generation(demo, "wall")
    demo.set_defaults(malformed=0.005)
    _add_events(demo, {"duplicates": 0.01, "late": 0.01})
    # 20 series at 100 points/s pass the anomaly rule's learning period in seconds.
    _add_metrics(demo, {"series": 20, "anomaly_rate": 0.003})
    return parser


# --------------------------------------------------------------------------- building streams
def _event_generator(args: argparse.Namespace, topic: str) -> UserEventGenerator:
    return UserEventGenerator(
        seed=args.seed,
        users=args.users,
        start_ts=args.start_ts,
        duplicate_rate=args.duplicates,
        late_rate=args.late,
        malformed_rate=args.malformed,
        max_lateness_ms=args.max_lateness_ms,
        clock=args.clock,
        topic=topic,
    )


# The demo's series keep their levels from run to run: `make run` resumes the anomalies job's
# rolling windows, and levels drawn from each run's seed made every series' first points anomalies.
DEMO_LEVELS_SEED = 0


def _metric_generator(args: argparse.Namespace, topic: str) -> MetricGenerator:
    return MetricGenerator(
        seed=args.seed + 1,  # not the events' seed: the two streams should not mirror each other's draws
        series=args.series,
        start_ts=args.start_ts,
        interval_ms=args.interval_ms,
        anomaly_rate=args.anomaly_rate,
        malformed_rate=args.malformed,
        clock=args.clock,
        topic=topic,
        levels_seed=DEMO_LEVELS_SEED if args.command == "demo" else None,
    )


def _limited(records: Iterable[ProducedRecord], count: int | None) -> Iterator[ProducedRecord]:
    return iter(records) if count is None else itertools.islice(records, count)


# --------------------------------------------------------------------------- running
def _install_stop_signals() -> threading.Event:
    """First SIGINT/SIGTERM: stop producing, flush, summarise. A second one: give up at once."""
    stop = threading.Event()

    def request_stop(signum: int, frame: object) -> None:
        if stop.is_set():
            raise KeyboardInterrupt
        stop.set()

    signal.signal(signal.SIGINT, request_stop)
    signal.signal(signal.SIGTERM, request_stop)
    return stop


def _send(
    args: argparse.Namespace,
    settings: Settings,
    records: Iterable[ProducedRecord],
    topics: Iterable[str],
    rate: float | None,
    announce: str,
    total: int | None = None,
    **kafka_tuning: Any,
) -> int:
    """Check the broker (or Kinesis) and topics, then produce; stderr gets ``announce``, progress and the summary.
    ``kafka_tuning``: librdkafka settings for this command's producer (``linger__ms``), under the user's options."""
    if args.sink == "kinesis":
        kinesis_writer.check_streams(settings.kinesis_endpoint_url, settings.kinesis_region, topics)
        target = settings.kinesis_endpoint_url or f"Kinesis {settings.kinesis_region}"
        _say(announce.replace(f"at {settings.bootstrap_servers}", f"at {target}").replace(f"to {settings.bootstrap_servers}", f"to {target}"))
        produce = partial(kinesis_writer.produce_records, settings.kinesis_endpoint_url, settings.kinesis_region)
    else:
        broker = settings.kafka
        check_broker(broker, set(topics))
        _say(announce)
        produce = partial(produce_records, broker, **kafka_tuning)
    stop = _install_stop_signals()
    summary: ProduceSummary = produce(
        records,
        rate=rate,
        progress=not args.no_progress,
        duration_s=args.duration,
        total=total,
        stop=stop,
    )
    print(summary.line(), file=sys.stderr, flush=True)
    return EXIT_OK if summary.ok else EXIT_DELIVERY_FAILED


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def run(args: argparse.Namespace, settings: Settings) -> int:
    if getattr(args, "seed", 0) is None:
        args.seed = random.SystemRandom().randrange(2**31)
    if args.command in GENERATED:
        make = _event_generator if args.command == "events" else _metric_generator
        records = _limited(make(args, args.topic), args.count)
        announce = f"{GENERATED[args.command]} to {args.topic} at {settings.bootstrap_servers} (seed {args.seed})"
        return _send(args, settings, records, [args.topic], args.rate, announce, args.count)
    if args.command == "replay":
        # A first pass checks every line and learns the topics, so a bad file sends nothing.
        topics = {args.topic} if args.topic else set()
        total = 0
        for record in read_scenario(args.file):
            total += 1
            if not args.topic:
                topics.add(record.topic)
        records = read_scenario(args.file)
        if args.topic:
            records = (ProducedRecord(args.topic, r.key, r.value, r.malformed_reason, r.kind) for r in records)
        count = min(total, args.count) if args.count else total
        announce = f"replaying {count:,} records of {args.file} to {settings.bootstrap_servers}"
        return _send(args, settings, _limited(records, args.count), topics, args.rate, announce, count)
    if args.command == "record":
        if not args.events and not args.metrics:
            raise UsageError("record needs --events N and/or --metrics N")
        records = itertools.chain(
            _event_generator(args, settings.topic_user_events).take(args.events),
            _metric_generator(args, settings.topic_metrics).take(args.metrics),
        )
        written = write_scenario(args.file, records)
        _say(f"wrote {written:,} records to {args.file} (seed {args.seed})")
        return EXIT_OK
    # demo
    events = _event_generator(args, settings.topic_user_events)
    metrics = _metric_generator(args, settings.topic_metrics)
    weights = (max(1, round(args.events_rate)), max(1, round(args.metrics_rate)))
    announce = (
        f"demo: {args.events_rate:g} events/s to {events.topic}, {args.metrics_rate:g} points/s to {metrics.topic} "
        f"at {settings.bootstrap_servers}; Ctrl-C to stop"
    )
    records = interleave([(events, weights[0]), (metrics, weights[1])])
    rate = args.events_rate + args.metrics_rate
    return _send(args, settings, records, [events.topic, metrics.topic], rate, announce, linger__ms=DEMO_LINGER_MS)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``streamstate-produce`` and ``python -m streamstate_producers``."""
    arguments = list(sys.argv[1:] if argv is None else argv)
    settings = get_settings()
    try:
        top_level = ("-h", "--help", "--version")
        if not arguments or (arguments[0].startswith("-") and arguments[0] not in top_level):
            arguments.insert(0, "demo")  # no sub-command: the demo mode `make run` uses
        elif arguments[0] not in SUB_COMMANDS and arguments[0] not in top_level:
            raise UsageError(f"unknown command {arguments[0]!r} (choose from {', '.join(SUB_COMMANDS)})")
        args = build_parser(settings).parse_args(arguments)
        return run(args, settings_from_args(args))
    except (UsageError, ProducerSetupError, ScenarioError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KafkaException as exc:
        print(f"error: Kafka client: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("error: interrupted before every delivery was confirmed", file=sys.stderr)
        return EXIT_INTERRUPTED
