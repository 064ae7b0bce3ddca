"""Throughput of the Python Kafka source (``streamstate_kafka``) on the embedded broker.

    .venv/bin/python bench/kafka_source.py [--records N] [--partitions P] [--value-bytes B] [--out PATH]

1. starts the embedded broker (Tansu) and produces N records of B-byte values, round-robin
   over P partitions;
2. ``range read``: the executor-side reader alone (``read_range`` per partition, one
   consumer each, assign()+seek, Arrow batches), in this process, partitions one after another;
3. ``spark availableNow``: ``read_kafka`` in a ``local[2]`` SparkSession, one availableNow
   query counting rows per batch in ``foreachBatch``; timed from query start to termination
   (the SparkSession start-up is reported separately, not counted);
4. prints rows/s for both and writes them as JSON. Nothing is asserted: numbers depend on
   the machine (2 shared cores here), so they belong here and not in the tests.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

DEFAULT_OUT = Path(__file__).resolve().parent / "runs" / "kafka_source.json"


def produce(bootstrap: str, topic: str, records: int, partitions: int, value_bytes: int) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.num.messages": 10_000})
    padding = "x" * max(0, value_bytes - 30)
    for i in range(records):
        while True:
            try:
                producer.produce(topic, key=f"user-{i % 100_000}".encode(), value=f'{{"n":{i},"p":"{padding}"}}'.encode(), partition=i % partitions)
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(120):
        raise SystemExit("producing the benchmark records timed out")


def bench_range_read(bootstrap: str, topic: str, partitions: int) -> tuple[int, float]:
    from streamstate.jobs.kafka.broker import PartitionView
    from streamstate.jobs.kafka.source import KafkaRange, read_range

    view = PartitionView({"bootstrap.servers": bootstrap})
    earliest, ends = view.ends([(topic, p) for p in range(partitions)])
    view.close()
    started = time.perf_counter()
    rows = sum(
        batch.num_rows
        for (t, p), end in sorted(ends.items())
        for batch in read_range(KafkaRange(t, p, earliest[(t, p)], end, {"bootstrap.servers": bootstrap}, 60_000, True))
    )
    return rows, time.perf_counter() - started


def bench_spark(settings, topic: str, workdir: Path) -> tuple[int, float, float]:
    from streamstate.jobs.kafka import read_kafka
    from streamstate.jobs.spark import build_spark

    started = time.perf_counter()
    spark = build_spark(settings, "bench-kafka-source", spark__ui__enabled="false")
    startup = time.perf_counter() - started
    counted = [0]

    def count(batch_df, _batch_id) -> None:
        counted[0] += batch_df.count()

    started = time.perf_counter()
    query = (
        read_kafka(spark, settings, subscribe=topic, startingOffsets="earliest")
        .writeStream.foreachBatch(count)
        .option("checkpointLocation", str(workdir / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    elapsed = time.perf_counter() - started
    spark.stop()
    return counted[0], elapsed, startup


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

    from streamstate.settings import Settings
    from streamstate.stack import EmbeddedStack
    from streamstate.topics import TopicSpec, create_topics

    workdir = Path(tempfile.mkdtemp(prefix="bench-kafka-source-"))
    settings = Settings(checkpoint_root=str(workdir / "checkpoints"))
    with EmbeddedStack(settings=settings, workdir=workdir, quiet=True) as stack:
        bootstrap = stack.start_broker()
        topic = "bench-kafka-source"
        create_topics(bootstrap, [TopicSpec(topic, args.partitions)])
        started = time.perf_counter()
        produce(bootstrap, topic, args.records, args.partitions, args.value_bytes)
        print(f"produced {args.records:,} records in {time.perf_counter() - started:.1f}s", flush=True)

        rows, seconds = bench_range_read(bootstrap, topic, args.partitions)
        print(f"range read         : {rows:,} rows in {seconds:.1f}s = {rows / seconds:,.0f} rows/s", flush=True)
        spark_rows, spark_seconds, startup = bench_spark(stack.settings, topic, workdir)
        print(
            f"spark availableNow : {spark_rows:,} rows in {spark_seconds:.1f}s = {spark_rows / spark_seconds:,.0f} rows/s "
            f"(SparkSession start {startup:.1f}s not counted)",
            flush=True,
        )
    if rows != args.records or spark_rows != args.records:
        raise SystemExit(f"expected {args.records} rows, range read {rows}, spark {spark_rows}")
    result = {
        "records": args.records,
        "partitions": args.partitions,
        "value_bytes": args.value_bytes,
        "range_read_rows_per_s": round(rows / seconds),
        "spark_available_now_rows_per_s": round(spark_rows / spark_seconds),
        "spark_startup_s": round(startup, 1),
        "cpu_count": os.cpu_count(),
        "load_average_1m": os.getloadavg()[0],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
