"""Running one Quix Streams pipeline over a whole benchmark topic, timed.

Runs in the Quix venv (``.venv/peers/quix``, see ``quix-requirements.txt``), never in the
project's: this module imports nothing from streamstate. Prints one JSON line of figures.
It reads and writes the same Apache Kafka broker as the Spark figures, with Quix's defaults.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
import uuid
from typing import Any, Callable

# StreamingDataFrame -> StreamingDataFrame; quixstreams is imported only when a pipeline runs,
# so the rules of the peers can be checked against the project's reference without it.
Pipeline = Callable[[Any], Any]


def run_pipeline(name: str, pipeline: Pipeline, argv: list[str] | None = None) -> None:
    """Parse the peer's arguments, run ``pipeline`` over ``--records`` input records, print figures."""
    parser = argparse.ArgumentParser(description=f"Quix Streams peer: {name}")
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--input", required=True, help="input topic (already produced)")
    parser.add_argument("--output", required=True, help="output topic")
    parser.add_argument("--records", type=int, required=True, help="records in the input topic: stop after the last")
    args = parser.parse_args(argv)
    from quixstreams import Application

    with tempfile.TemporaryDirectory(prefix="quix-state-") as state_dir:
        app = Application(
            broker_address=args.bootstrap,
            consumer_group=f"bench-{name}-{uuid.uuid4().hex[:8]}",
            auto_offset_reset="earliest",
            state_dir=state_dir,
            loglevel="WARNING",
        )
        source = app.topic(args.input, key_deserializer="str", value_deserializer="json")
        sink = app.topic(args.output, key_serializer="str", value_serializer="json")
        seen = {"records": 0, "outputs": 0, "first": 0.0}

        def count_input(_value) -> None:
            if seen["records"] == 0:
                seen["first"] = time.perf_counter()
            seen["records"] += 1
            if seen["records"] == args.records:
                app.stop()  # the loop finishes this record, then flushes the producer and commits

        def count_output(_value) -> None:
            seen["outputs"] += 1

        sdf = app.dataframe(source)
        sdf = sdf.update(count_input)
        sdf = pipeline(sdf).update(count_output)
        sdf.to_topic(sink)
        app.run()
        finished = time.perf_counter()
    seconds = finished - seen["first"]
    print(json.dumps({
        "engine": "quixstreams 3.28.0",
        "pipeline": name,
        "rows": seen["records"],
        "outputs": seen["outputs"],
        "seconds": round(seconds, 3),
        "rows_per_s": round(seen["records"] / seconds) if seconds > 0 else None,
    }))
