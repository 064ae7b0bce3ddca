"""``streamstate``: the operator's command line.

One function per sub-command, registered in :func:`build_parser`; each takes the parsed
arguments and the settings and returns an exit code. Any :class:`CommandError` (or a
broker that does not answer) ends the program with a one-line ``error: ...`` and exit 2.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from importlib.metadata import entry_points

from confluent_kafka import KafkaException
from pydantic import ValidationError

from streamstate_pipeline.cli_common import add_kafka_options, add_version, setting_error, settings_from_args
from streamstate_pipeline.errors import ConfigurationError
from streamstate_pipeline.settings import REPO_ROOT, Settings
from streamstate_pipeline.kafka_clients import masked_json, reason, wait_for_broker
from streamstate_pipeline.topics import TopicSpec, create_topics, existing_topics, load_topics

EXIT_ERROR = 2
# Where installed members register sub-commands: a function that takes the sub-parsers.
COMMANDS_GROUP = "streamstate.commands"


class CommandError(ConfigurationError):
    """A failure the user can act on; its message is printed as ``error: <message>``."""


Command = Callable[[argparse.Namespace, Settings], int]


def _settings_for(args: argparse.Namespace) -> Settings:
    return settings_from_args(args, topics_file=getattr(args, "topics_file", None))


def _reach_broker(settings: Settings, timeout_s: float) -> None:
    try:
        wait_for_broker(settings.kafka, timeout_s=timeout_s)
    except TimeoutError as exc:
        raise CommandError(str(exc)) from None


def _defined_topics_on_reachable_broker(args: argparse.Namespace, settings: Settings) -> list[TopicSpec]:
    """The topic file's topics, once the broker answers (file errors first: they are quicker)."""
    try:
        specs = load_topics(settings.topics_file, settings.partitions)
    except ValueError as exc:
        raise CommandError(str(exc)) from None
    _reach_broker(settings, args.wait)
    return specs


def topics_create(args: argparse.Namespace, settings: Settings) -> int:
    """Create the topics of the topic file that the broker does not have yet."""
    specs = _defined_topics_on_reachable_broker(args, settings)
    created = create_topics(settings.kafka, specs, replication_factor=args.replication_factor)
    for spec in specs:
        state = "created" if spec.name in created else "exists"
        print(f"{spec.name}\t{spec.partitions}\t{state}")
    return 0


def topics_list(args: argparse.Namespace, settings: Settings) -> int:
    """List the topic file's topics with their partition counts on the broker."""
    specs = _defined_topics_on_reachable_broker(args, settings)
    present = existing_topics(settings.kafka)
    missing = 0
    for spec in specs:
        partitions = present.get(spec.name)
        missing += partitions is None
        print(f"{spec.name}\t{partitions if partitions is not None else '-'}\t{'ok' if partitions else 'missing'}")
    if args.all:
        for name in sorted(set(present) - {s.name for s in specs}):
            print(f"{name}\t{present[name]}\tother")
    return 1 if missing else 0


def show_config(args: argparse.Namespace, settings: Settings) -> int:
    """Every setting with its environment variable, current value and meaning."""
    rows = [("Environment variable", "Default", "Meaning")] if args.markdown else []
    for name, field in Settings.model_fields.items():
        default = field.get_default(call_default_factory=True)
        value = getattr(settings, name) if not args.markdown else default
        shown = "" if value is None else str(value).replace(str(REPO_ROOT), "<repo>")
        extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
        if value is not None and extra.get("secret"):
            shown = "<set>"  # a secret is never printed
        elif isinstance(value, dict):  # as the environment variable takes it, secrets masked
            shown = masked_json(value)
        rows.append((f"STREAMSTATE_{name.upper()}", shown, field.description or ""))
    if args.markdown:
        print("\n".join(["| " + " | ".join(rows[0]) + " |", "|---|---|---|"] + [f"| `{a}` | `{b}` | {_cell(c)} |" for a, b, c in rows[1:]]))
    else:
        for env, value, _ in rows:
            print(f"{env}={value}")
    return 0


def _cell(text: str) -> str:
    """Markdown table cell text: a ``|`` (as in ``|z|``) would end the cell."""
    return text.replace("|", "\\|")


def _add_broker_options(parser: argparse.ArgumentParser) -> None:
    add_kafka_options(parser)
    parser.add_argument("--topics-file", help="Topic definition file (default: settings).")
    parser.add_argument(
        "--wait", type=float, default=60.0, metavar="SECONDS", help="How long to wait for the broker (default 60)."
    )


def build_parser() -> argparse.ArgumentParser:
    """The argument parser; a sub-command stores its function as ``command``."""
    parser = argparse.ArgumentParser(prog="streamstate", description="Operate the streamstate pipeline.")
    add_version(parser)
    commands = parser.add_subparsers(dest="group", required=True, metavar="COMMAND")

    topics = commands.add_parser("topics", help="Kafka topics from infra/kafka/topics.toml.")
    topic_commands = topics.add_subparsers(dest="action", required=True, metavar="ACTION")
    create = topic_commands.add_parser("create", help="Create the missing topics (idempotent).")
    _add_broker_options(create)
    create.add_argument(
        "--replication-factor", type=int, default=1, metavar="N",
        help="Brokers that hold each partition (default 1; 3 on the three-broker compose cluster).",
    )
    create.set_defaults(command=topics_create)
    listing = topic_commands.add_parser(
        "list", help="Show each defined topic's partitions on the broker; exit 1 if any is missing."
    )
    _add_broker_options(listing)
    listing.add_argument("--all", action="store_true", help="Also list topics not in the topic file.")
    listing.set_defaults(command=topics_list)

    config = commands.add_parser("config", help="Print the settings (STREAMSTATE_* variables) in effect.")
    config.add_argument("--markdown", action="store_true", help="The defaults as the README's Markdown table.")
    add_kafka_options(config)
    config.set_defaults(command=show_config)

    # Commands of the members installed beside this one (the stack launcher's `up` and `jobs`):
    # each entry point of the group adds its sub-commands, so this module imports none of them.
    for entry in sorted(entry_points(group=COMMANDS_GROUP), key=lambda e: e.name):
        entry.load()(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``streamstate`` command; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        settings = _settings_for(args)
        return args.command(args, settings)
    except ValidationError as exc:
        message = setting_error(exc)
    except (CommandError, KafkaException) as exc:
        message = reason(exc)
    print(f"error: {message}", file=sys.stderr)
    return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
