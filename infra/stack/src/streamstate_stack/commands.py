"""The stack's sub-commands of the ``streamstate`` command line: ``up`` and ``jobs``.

The command line lives with the settings (:mod:`streamstate_pipeline.cli`); this member
registers these two through the ``streamstate.commands`` entry point group, so they exist
wherever the stack launcher is installed (a checkout), and nowhere else (the images).
"""

from __future__ import annotations

import argparse
from typing import Any

from streamstate_pipeline.cli import CommandError
from streamstate_pipeline.settings import Settings
from streamstate_stack.profiles import PROFILES


def run_up(args: argparse.Namespace, settings: Settings) -> int:
    """The whole pipeline, in the chosen profile, until Ctrl-C."""
    from streamstate_pipeline.binaries import DependencyMissing
    from streamstate_stack.up import up

    try:
        return up(settings, producers=not args.no_producers, profile=PROFILES[args.profile])
    except DependencyMissing as exc:
        raise CommandError(str(exc)) from None


def list_jobs(args: argparse.Namespace, settings: Settings) -> int:
    """The declared jobs (spark-jobs/src/streamstate_jobs/registry.py): what each reads, writes and serves."""
    from streamstate_jobs.registry import JOBS  # imports the jobs, so Spark: only this command needs it

    for name, spec in JOBS.items():
        outputs = ", ".join(f"{kind} -> {topic}" for kind, topic in spec.output_topics(settings).items())
        queries = ", ".join([name, *(extra.name for extra in spec.extra_queries)])
        print(f"{name}\t{spec.description}")
        print(f"\treads {', '.join(spec.input_topics(settings))}; writes {outputs}")
        port = f"metrics port {spec.port(settings)} ({spec.metrics_port})" if spec.metrics_port else "no metrics port"
        print(f"\tqueries {queries}; {port}; command {spec.command}")
    return 0


def add_commands(commands: Any) -> None:
    """Register ``up`` and ``jobs`` on the command line's sub-parsers (the entry point)."""
    up = commands.add_parser("up", help="Run the whole pipeline without Docker until Ctrl-C.")
    up.add_argument("--no-producers", action="store_true", help="Do not start the demo producers.")
    up.add_argument(
        "--profile",
        choices=sorted(PROFILES),
        default="embedded",
        help="Where checkpoints go; both run Apache Kafka (KRaft, data in var/kafka) with Spark's built-in Kafka "
        "connector. embedded (default): the local disk; production: s3a:// in MinIO, as docker compose runs.",
    )
    up.set_defaults(command=run_up)
    jobs = commands.add_parser("jobs", help="List the declared jobs: their topics, queries and metrics ports.")
    jobs.set_defaults(command=list_jobs)
