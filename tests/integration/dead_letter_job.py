"""A stateless job for tests of the jobs' wiring (the runner, the writer, the metrics): each record
of its input topic (``topic_metrics``) becomes a dead letter keyed by its offset, its value the payload."""

from __future__ import annotations

from streamstate_jobs.declaration import JobSpec


def input_as_dead_letters(ctx):
    return ctx.read_input().selectExpr("'dead_letter' AS kind", "CAST(offset AS STRING) AS key", "CAST(value AS STRING) AS payload")


def dead_letter_job(name: str) -> JobSpec:
    return JobSpec(name=name, description="each input record as a dead letter", build=input_as_dead_letters,
                   inputs=("topic_metrics",), outputs={"dead_letter": "topic_dead_letters"})
