"""Driver process for the Kinesis SIGKILL test: two streaming queries over one stream.

``raw``: every record's (shardId, sequenceNumber, offset) per micro-batch; ``counts``: a
stateful count per key (update mode). Each batch's output goes to its own file named by
batch id, written atomically, so a batch replayed after a crash replaces its earlier attempt.
Runs until killed.

    python kinesis_restart_driver.py ENDPOINT_URL STREAM CHECKPOINT_ROOT OUT_DIR MAX_RECORDS_PER_TRIGGER
"""

from __future__ import annotations

import sys
from pathlib import Path

from streamstate_jobs.kinesis import read_kinesis
from streamstate_jobs.spark import build_spark
from streamstate_pipeline.settings import Settings
from tests.integration.kafka_restart_driver import batch_file_writer


def main(endpoint_url: str, stream: str, checkpoint_root: str, out_dir: str, max_records: str) -> None:
    settings = Settings(kinesis_endpoint_url=endpoint_url, shuffle_partitions=2, checkpoint_root=checkpoint_root)
    spark = build_spark(settings, "kinesis-restart-driver", spark__ui__enabled="false")
    out = Path(out_dir)
    source = read_kinesis(spark, settings, streamName=stream, maxRecordsPerTrigger=int(max_records))
    raw = (
        source.select("shardId", "sequenceNumber", "offset")
        .writeStream.foreachBatch(batch_file_writer(out / "raw", ("shardId", "sequenceNumber", "offset")))
        .option("checkpointLocation", settings.checkpoint("raw"))
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    counts = (
        source.groupBy("key").count()
        .writeStream.outputMode("update")
        .foreachBatch(batch_file_writer(out / "counts", ("key", "count")))
        .option("checkpointLocation", settings.checkpoint("counts"))
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    spark.streams.awaitAnyTermination()
    for query in (raw, counts):
        if query.exception() is not None:
            raise SystemExit(f"query failed: {query.exception()}")


if __name__ == "__main__":
    main(*sys.argv[1:])
