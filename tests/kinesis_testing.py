"""Test helpers around the local Kinesis server: ordered puts that remember where each record
landed, resharding, a plain boto3 read-back (independent of the source under test), and a
fault-injecting proxy that answers some calls with Kinesis' real throttling error."""

from __future__ import annotations

import http.client
import json
import threading
from collections import defaultdict
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlparse

from streamstate_jobs.kinesis.offsets import shard_index
from streamstate_pipeline.kinesis import kinesis_client, wait_until_active
from streamstate_pipeline.settings import Settings


@dataclass(frozen=True)
class Landed:
    key: str
    value: bytes
    shard_id: str
    sequence_number: str

    @property
    def partition(self) -> int:
        return shard_index(self.shard_id)


def client(settings: Settings):
    return kinesis_client(settings.kinesis_endpoint_url, settings.kinesis_region, max_attempts=5)


def put_in_order(settings: Settings, stream: str, records: list[tuple[str, bytes]], chunk: int = 500) -> list[Landed]:
    """PutRecords in request order; every record must land (a retried record would break key order)."""
    kinesis, landed = client(settings), []
    for start in range(0, len(records), chunk):
        part = records[start : start + chunk]
        answer = kinesis.put_records(StreamName=stream, Records=[{"PartitionKey": k, "Data": v} for k, v in part])
        assert answer["FailedRecordCount"] == 0, [r for r in answer["Records"] if "ErrorCode" in r][:3]
        landed.extend(Landed(k, v, r["ShardId"], r["SequenceNumber"]) for (k, v), r in zip(part, answer["Records"]))
    return landed


def ordinals(landed: list[Landed]) -> dict[tuple[str, str], int]:
    """(shard, sequence number) -> the record's dense ordinal in its shard (fresh stream, read from TRIM_HORIZON)."""
    by_shard: dict[str, list[str]] = defaultdict(list)
    for record in landed:
        by_shard[record.shard_id].append(record.sequence_number)
    return {(s, seq): i for s, seqs in by_shard.items() for i, seq in enumerate(sorted(seqs, key=int))}


def shards(settings: Settings, stream: str) -> list[dict]:
    return client(settings).list_shards(StreamName=stream)["Shards"]


def split(settings: Settings, stream: str, shard_id: str) -> list[str]:
    """Split ``shard_id`` in the middle of its hash range; returns the two children."""
    kinesis = client(settings)
    shard = next(s for s in shards(settings, stream) if s["ShardId"] == shard_id)
    low, high = int(shard["HashKeyRange"]["StartingHashKey"]), int(shard["HashKeyRange"]["EndingHashKey"])
    kinesis.split_shard(StreamName=stream, ShardToSplit=shard_id, NewStartingHashKey=str((low + high) // 2 + 1))
    wait_until_active(kinesis, stream)
    return [s["ShardId"] for s in shards(settings, stream) if s.get("ParentShardId") == shard_id]


def merge(settings: Settings, stream: str, first: str, second: str) -> str:
    kinesis = client(settings)
    kinesis.merge_shards(StreamName=stream, ShardToMerge=first, AdjacentShardToMerge=second)
    wait_until_active(kinesis, stream)
    return next(s["ShardId"] for s in shards(settings, stream) if {s.get("ParentShardId"), s.get("AdjacentParentShardId")} == {first, second})


def read_back(settings: Settings, stream: str) -> dict[tuple[str, str], int]:
    """(shard, sequence number) -> approximate arrival time in ms, for every record of the stream."""
    kinesis, arrival = client(settings), {}
    for shard in shards(settings, stream):
        iterator = kinesis.get_shard_iterator(StreamName=stream, ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON")["ShardIterator"]
        while iterator:
            answer = kinesis.get_records(ShardIterator=iterator, Limit=10_000)
            for r in answer["Records"]:
                arrival[(shard["ShardId"], r["SequenceNumber"])] = int(r["ApproximateArrivalTimestamp"].timestamp() * 1000)
            if not answer["Records"] and not answer.get("MillisBehindLatest"):
                break
            iterator = answer.get("NextShardIterator")
    return arrival


class ThrottlingProxy:
    """An HTTP proxy in front of the Kinesis server that answers every ``every``-th call of the
    given operations with HTTP 400 ``ProvisionedThroughputExceededException``, byte for byte the
    error AWS sends when a shard's read limit is exceeded (the local server never throttles)."""

    def __init__(self, target_url: str, operations: tuple[str, ...] = ("GetRecords", "GetShardIterator", "ListShards"), every: int = 3):
        self.target = urlparse(target_url)
        self.operations, self.every = operations, every
        self.calls, self.throttled = 0, 0
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                operation = self.headers.get("X-Amz-Target", "").rsplit(".", 1)[-1]
                if proxy._throttle(operation):
                    error = json.dumps(
                        {"__type": "ProvisionedThroughputExceededException", "message": "Rate exceeded for shard shardId-000000000000 in stream"}
                    ).encode()
                    self.send_response(400)
                    self.send_header("Content-Type", "application/x-amz-json-1.1")
                    self.send_header("Content-Length", str(len(error)))
                    self.end_headers()
                    self.wfile.write(error)
                    return
                upstream = http.client.HTTPConnection(proxy.target.hostname, proxy.target.port, timeout=60)
                try:
                    headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
                    upstream.request("POST", self.path, body=body, headers=headers)
                    answer = upstream.getresponse()
                    payload = answer.read()
                    self.send_response(answer.status)
                    for k, v in answer.getheaders():
                        if k.lower() not in ("transfer-encoding", "connection", "content-length"):
                            self.send_header(k, v)
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                finally:
                    upstream.close()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def _throttle(self, operation: str) -> bool:
        if operation not in self.operations:
            return False
        with self._lock:
            self.calls += 1
            if self.calls % self.every == 0:
                self.throttled += 1
                return True
        return False

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> "ThrottlingProxy":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


def produce_scenario_to_kinesis(settings: Settings, scenario) -> list:
    """The scenario's records into the Kinesis streams named by ``settings``' input topics (in order,
    through the project's Kinesis producer); returns them as the reference's SourceRecords:
    topic = stream, partition = shard number, offset = ordinal, with arrival time and sequence number."""
    from tests.reference_rules import SourceRecord
    from streamstate_producers.kinesis_writer import produce_records
    from streamstate_producers.produced_record import ProducedRecord
    from tests.scenario import input_topics

    stream_of = input_topics(settings)
    records = [ProducedRecord(stream_of[r.topic], r.key, r.value, r.malformed_reason, r.kind) for r in scenario.records]
    puts: list = []
    summary = produce_records(settings.kinesis_endpoint_url, settings.kinesis_region, records, progress=False, landed=puts)
    assert summary.ok and summary.sent == len(records), summary.line()
    produced = []
    for stream in stream_of.values():
        mine = [p for p in puts if p.record.topic == stream]
        ordinal = ordinals([Landed("", b"", p.shard_id, p.sequence_number) for p in mine])
        arrival = read_back(settings, stream)
        produced += [
            SourceRecord(
                stream, shard_index(p.shard_id), ordinal[(p.shard_id, p.sequence_number)], p.record.key,
                p.record.value or b"", arrival[(p.shard_id, p.sequence_number)], p.sequence_number,
            )
            for p in mine
        ]
    scenario.produced = produced
    return produced
