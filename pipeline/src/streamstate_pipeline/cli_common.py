"""The options every command line of the project shares, defined once.

``--version`` (from the installed package's metadata), ``--bootstrap-servers`` and
``-X key=value`` (repeatable, as kcat's and librdkafka's tools take it: one extra Kafka client
setting such as ``security.protocol=SASL_SSL``), on ``streamstate``, ``streamstate-produce``,
``streamstate-api`` and the jobs' commands alike. Each overrides its setting
(``STREAMSTATE_BOOTSTRAP_SERVERS``, ``STREAMSTATE_KAFKA_CLIENT_OPTIONS``); ``-X`` adds to the
configured client options rather than replacing them, a key given twice takes the last value.
"""

from __future__ import annotations

import argparse
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from streamstate_pipeline.settings import Settings

PACKAGE = "streamstate-pipeline"  # the distribution whose version every command reports


def package_version() -> str:
    try:
        return version(PACKAGE)
    except PackageNotFoundError:
        return "unknown (not installed)"


def client_option(text: str) -> tuple[str, str]:
    """argparse type of ``-X``: ``key=value`` with a non-empty key (the value may be empty)."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE (a Kafka client setting), got {text!r}")
    return key.strip(), value


def add_version(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--version", action="version", version=f"{parser.prog} {package_version()}")


def add_kafka_options(parser: argparse.ArgumentParser, default_bootstrap: str | None = None) -> None:
    """``--bootstrap-servers`` and ``-X``; read them back with :func:`settings_from_args`."""
    shown = f"default: {default_bootstrap}" if default_bootstrap else "default: STREAMSTATE_BOOTSTRAP_SERVERS"
    parser.add_argument(
        "--bootstrap-servers", default=default_bootstrap, metavar="HOST:PORT[,...]", help=f"Kafka bootstrap servers ({shown})"
    )
    parser.add_argument(
        "-X",
        dest="kafka_client_options",
        action="append",
        type=client_option,
        metavar="KEY=VALUE",
        help="extra Kafka client setting for every client, e.g. -X security.protocol=SASL_SSL (repeatable; "
        "added to STREAMSTATE_KAFKA_CLIENT_OPTIONS)",
    )


def add_common_options(parser: argparse.ArgumentParser, default_bootstrap: str | None = None) -> None:
    add_version(parser)
    add_kafka_options(parser, default_bootstrap)


def client_options(args: argparse.Namespace) -> dict[str, str]:
    """The ``-X`` options given, as a dict (the last of a repeated key wins)."""
    return dict(getattr(args, "kafka_client_options", None) or [])


def setting_error(exc: ValueError) -> str:
    """One line for a bad setting: pydantic's first error with the field it is about."""
    errors = getattr(exc, "errors", None)
    if callable(errors) and errors():
        first = errors()[0]
        where = ".".join(str(part) for part in first["loc"])  # empty for a rule across settings
        return f"invalid setting{' ' + where if where else ''}: {first['msg']}"
    return " ".join(str(exc).split())


def settings_from_args(args: argparse.Namespace, **overrides: Any) -> Settings:
    """The settings (environment, ``.env``) with the command line on top.

    ``overrides`` are other fields the command sets from its own flags (None: not given).
    Raises pydantic's ValidationError (a ValueError) for a bad value.
    """
    given = {"bootstrap_servers": getattr(args, "bootstrap_servers", None), **overrides}
    given = {name: value for name, value in given.items() if value is not None}
    settings = Settings(**given)
    extra = client_options(args)
    if not extra:
        return settings
    configured = settings.kafka_client_options
    return Settings(**given, kafka_client_options={**configured, **extra})
