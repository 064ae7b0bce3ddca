"""Producing generated records to Kinesis data streams (``streamstate-produce --sink kinesis``).

A Kinesis record has a partition key (1-256 characters, required) and a data blob (required),
so a record's key must be UTF-8 text of that length, and a null value (a Kafka tombstone) is
sent as empty data. Records go out with PutRecords, up to 500 per call and per stream, in their
order; a record Kinesis refuses (``ProvisionedThroughputExceededException`` on a hot shard) is
sent again after a backoff, which is at-least-once and may put that record behind later records
of the same key, as any Kinesis producer that retries.
"""

from __future__ import annotations

import sys
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Iterable, TextIO

from streamstate_pipeline.kinesis import kinesis_client
from streamstate_producers.kafka_writer import ProducerSetupError, ProduceSummary
from streamstate_producers.pacing import ProgressLine, TokenBucket
from streamstate_producers.produced_record import ProducedRecord

PUT_RECORDS_MAX = 500
# A paced run sends what it has at least this often: one PutRecords per record would cap the
# rate at the endpoint's round trips (about 50/s on the local server).
PACED_FLUSH_S = 0.1
PARTITION_KEY_MAX = 256
RETRIES = 8


@dataclass(frozen=True)
class Put:
    """Where Kinesis put a record."""

    record: ProducedRecord
    shard_id: str
    sequence_number: str


def kinesis_entry(record: ProducedRecord) -> dict:
    """The PutRecords entry of a record; ValueError when Kinesis cannot carry its key."""
    try:
        key = (record.key or b"").decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"a Kinesis partition key must be UTF-8 text, got {(record.key or b'')[:40]!r}") from None
    if not 1 <= len(key) <= PARTITION_KEY_MAX:
        raise ValueError(f"a Kinesis partition key has 1 to {PARTITION_KEY_MAX} characters, got {len(key)}")
    return {"PartitionKey": key, "Data": record.value or b""}


def check_streams(endpoint_url: str | None, region: str, streams: Iterable[str]) -> None:
    client = kinesis_client(endpoint_url, region, max_attempts=3, timeout_s=5.0)
    for stream in sorted(set(streams)):
        try:
            client.describe_stream_summary(StreamName=stream)
        except client.exceptions.ResourceNotFoundException:
            raise ProducerSetupError(f"Kinesis stream {stream!r} does not exist; create it first") from None
        except Exception as exc:
            raise ProducerSetupError(f"Kinesis at {endpoint_url or 'AWS ' + region} unreachable: {exc}") from None


def put_in_order(client, stream: str, records: list[ProducedRecord], errors: Counter | None = None) -> list[Put]:
    """PutRecords for one stream's chunk (<= 500), refused records sent again; returns what landed."""
    entries = [kinesis_entry(r) for r in records]
    pending, landed = list(range(len(records))), {}
    for attempt in range(RETRIES + 1):
        answer = client.put_records(StreamName=stream, Records=[entries[i] for i in pending])
        refused = []
        for i, result in zip(pending, answer["Records"]):
            if "ErrorCode" in result:
                refused.append(i)
                if errors is not None and attempt == RETRIES:
                    errors[result["ErrorCode"]] += 1
            else:
                landed[i] = Put(records[i], result["ShardId"], result["SequenceNumber"])
        pending = refused
        if not pending:
            break
        time.sleep(min(2.0, 0.05 * 2**attempt))
    return [landed[i] for i in sorted(landed)]


def produce_records(
    endpoint_url: str | None,
    region: str,
    records: Iterable[ProducedRecord],
    rate: float | None = None,
    progress: bool = True,
    *,
    duration_s: float | None = None,
    total: int | None = None,
    stop: threading.Event | None = None,
    progress_stream: TextIO | None = None,
    landed: list[Put] | None = None,
) -> ProduceSummary:
    """Send ``records`` to the streams named by their topics; the same contract as the Kafka
    writer's ``produce_records`` (rate, duration, stop, progress). ``landed`` collects where each went."""
    client = kinesis_client(endpoint_url, region, max_attempts=5)
    bar = ProgressLine(progress_stream or sys.stderr, total=total, enabled=progress)
    bucket = TokenBucket(rate) if rate else None
    started, sent, failed, interrupted = time.monotonic(), 0, 0, False
    errors: Counter = Counter()
    buffered: dict[str, list[ProducedRecord]] = defaultdict(list)
    last_flush = started

    def flush(stream: str) -> None:
        nonlocal sent, failed
        chunk, buffered[stream] = buffered[stream], []
        try:
            puts = put_in_order(client, stream, chunk, errors)
        except Exception as exc:  # the endpoint failed the whole call: count the chunk as failed
            errors[type(exc).__name__ + ": " + str(exc)[:80]] += len(chunk)
            failed += len(chunk)
            return
        sent += len(puts)
        failed += len(chunk) - len(puts)
        if landed is not None:
            landed.extend(puts)
        bar.update(sent, failed, 0, time.monotonic() - started)

    try:
        for record in records:
            if stop is not None and stop.is_set():
                interrupted = True
                break
            now = time.monotonic()
            if duration_s is not None and now - started >= duration_s:
                break
            if bucket is not None:
                time.sleep(bucket.delay())
            kinesis_entry(record)  # a record Kinesis cannot carry stops the run before it is sent
            buffered[record.topic].append(record)
            if len(buffered[record.topic]) >= PUT_RECORDS_MAX:
                flush(record.topic)
            elif bucket is not None and time.monotonic() - last_flush >= PACED_FLUSH_S:
                for stream in list(buffered):
                    if buffered[stream]:
                        flush(stream)
                last_flush = time.monotonic()
    except KeyboardInterrupt:
        interrupted = True
    finally:
        for stream in list(buffered):
            if buffered[stream]:
                flush(stream)
    elapsed = time.monotonic() - started
    bar.update(sent, failed, 0, elapsed, force=True)
    bar.close()
    return ProduceSummary(sent, failed, elapsed, sent / elapsed if elapsed > 0 else 0.0, dict(errors.most_common(5)), interrupted)
