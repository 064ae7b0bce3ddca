"""The source's Kinesis calls, each behind the backoff of :mod:`streamstate_jobs.kinesis.retry`.

Shard iterators expire five minutes after they are issued (``ExpiredIteratorException``);
:class:`ShardCursor` then asks for a new one at the position it has reached, so a slow batch
or a long pause between triggers costs one extra call, never a record.

:meth:`StreamClient.created_ms` reads the stream's creation time, which tells a recreated
stream from the one a checkpoint read (:mod:`streamstate_jobs.kinesis.identity`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from streamstate_jobs.kinesis.identity import epoch_ms
from streamstate_jobs.kinesis.offsets import ShardPosition
from streamstate_jobs.kinesis.options import KinesisOptions
from streamstate_jobs.kinesis.planning import Shard
from streamstate_jobs.kinesis.retry import KinesisSourceError, error_code, with_backoff
from streamstate_pipeline.kinesis import kinesis_client


class StreamClient:
    """One boto3 client for one stream, with the options' backoff on every call."""

    def __init__(self, options: KinesisOptions) -> None:
        self.options = options
        self.stream = options.stream
        self.client = kinesis_client(options.endpoint_url, options.region, max_attempts=1)

    def call(self, what: str, method: str, **kwargs):
        return with_backoff(lambda: getattr(self.client, method)(**kwargs), self.options.backoff, f"{what} ({self.stream})")

    def list_shards(self) -> list[Shard]:
        """Every shard within the stream's retention, parents included, in one consistent listing."""
        try:
            shards: list[Shard] = []
            token = None
            while True:
                args = {"NextToken": token} if token else {"StreamName": self.stream}
                page = self.call("ListShards", "list_shards", **args)
                shards.extend(Shard.from_api(s) for s in page["Shards"])
                token = page.get("NextToken")
                if not token:
                    return shards
        except Exception as exc:
            self._raise_if_missing(exc)
            raise

    def created_ms(self) -> int:
        """When the stream was created (epoch ms), from DescribeStreamSummary."""
        try:
            summary = self.call("DescribeStreamSummary", "describe_stream_summary", StreamName=self.stream)
        except Exception as exc:
            self._raise_if_missing(exc)
            raise
        return epoch_ms(summary["StreamDescriptionSummary"]["StreamCreationTimestamp"])

    def _raise_if_missing(self, exc: Exception) -> None:
        if error_code(exc) == "ResourceNotFoundException":
            where = self.options.endpoint_url or f"AWS {self.options.region}"
            raise KinesisSourceError(f"Kinesis stream {self.stream!r} does not exist at {where}; create it first") from None

    def iterator(self, shard_id: str, position: ShardPosition) -> str:
        return self.call(
            f"GetShardIterator {shard_id}", "get_shard_iterator", StreamName=self.stream, ShardId=shard_id, **position.iterator_args()
        )["ShardIterator"]


@dataclass
class Fetch:
    """One GetRecords answer: the records, the next iterator (None: the closed shard ends here)."""

    records: list[dict]
    next_iterator: str | None
    behind_ms: int


@dataclass
class ShardCursor:
    """Reads one shard forward from ``position``, keeping ``position`` at the last record returned."""

    client: StreamClient
    shard_id: str
    position: ShardPosition
    _iterator: str | None = field(default=None, repr=False)

    def fetch(self, limit: int) -> Fetch:
        if self.position.done:
            return Fetch([], None, 0)
        if self._iterator is None:
            self._iterator = self.client.iterator(self.shard_id, self.position)
        try:
            answer = self.client.call(f"GetRecords {self.shard_id}", "get_records", ShardIterator=self._iterator, Limit=limit)
        except Exception as exc:
            if error_code(exc) != "ExpiredIteratorException":
                raise
            self._iterator = self.client.iterator(self.shard_id, self.position)
            answer = self.client.call(f"GetRecords {self.shard_id}", "get_records", ShardIterator=self._iterator, Limit=limit)
        records = answer.get("Records", [])
        self._iterator = answer.get("NextShardIterator")
        if records:
            self.position = replace(self.position, n=self.position.n + len(records), after=records[-1]["SequenceNumber"], at_ms=None)
        if self._iterator is None:
            self.position = replace(self.position, done=True)
        return Fetch(records, self._iterator, int(answer.get("MillisBehindLatest") or 0))
