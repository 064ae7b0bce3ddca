"""Driver process for the SIGKILL test: two streaming queries over one Kafka topic.

``raw``: every record's (partition, offset, key) per micro-batch; ``counts``: a stateful
count per key (update mode). Each batch's output goes to its own file named by batch id,
written atomically, so a batch replayed after a crash replaces its earlier attempt.
Runs until killed.

    python kafka_restart_driver.py BOOTSTRAP TOPIC CHECKPOINT_ROOT OUT_DIR MAX_OFFSETS_PER_TRIGGER
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from pyspark.sql import DataFrame

from streamstate_jobs.kafka import read_kafka
from streamstate_jobs.spark import build_spark
from streamstate_pipeline.settings import Settings


def batch_file_writer(out: Path, columns: tuple[str, ...]):
    out.mkdir(parents=True, exist_ok=True)

    def write(batch_df: DataFrame, batch_id: int) -> None:
        rows = [[r[c].decode() if isinstance(r[c], bytes | bytearray) else r[c] for c in columns] for r in batch_df.collect()]
        scratch = out / f".batch-{batch_id}.tmp"
        scratch.write_text(json.dumps(rows))
        os.replace(scratch, out / f"batch-{batch_id}.json")

    return write


def main(bootstrap: str, topic: str, checkpoint_root: str, out_dir: str, max_offsets: str) -> None:
    settings = Settings(bootstrap_servers=bootstrap, shuffle_partitions=2, checkpoint_root=checkpoint_root)
    spark = build_spark(settings, "kafka-restart-driver", spark__ui__enabled="false")
    out = Path(out_dir)
    source = read_kafka(spark, settings, subscribe=topic, maxOffsetsPerTrigger=int(max_offsets))
    raw = (
        source.select("partition", "offset", "key")
        .writeStream.foreachBatch(batch_file_writer(out / "raw", ("partition", "offset", "key")))
        .option("checkpointLocation", settings.checkpoint("raw"))
        .start()
    )
    counts = (
        source.groupBy("key").count()
        .writeStream.outputMode("update")
        .foreachBatch(batch_file_writer(out / "counts", ("key", "count")))
        .option("checkpointLocation", settings.checkpoint("counts"))
        .start()
    )
    spark.streams.awaitAnyTermination()
    for query in (raw, counts):
        if query.exception() is not None:
            raise SystemExit(f"query failed: {query.exception()}")


if __name__ == "__main__":
    main(*sys.argv[1:])
