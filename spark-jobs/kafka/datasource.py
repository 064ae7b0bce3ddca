"""``streamstate_kafka``: the project's Kafka data source for Spark (Python Data Source API).

Used where Spark's built-in ``kafka`` connector jars are absent. Reading is streaming
only (:mod:`streamstate.jobs.kafka.source`); writing works for batch
(``df.write.format("streamstate_kafka")``) and streaming (``df.writeStream...``)
DataFrames with a ``value`` column and optional ``key``, ``headers`` and ``topic``
columns, producing through :func:`streamstate.jobs.kafka.producer.produce_batches`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from streamstate.jobs.kafka.options import KafkaOptionError, SourceOptions, client_settings
from streamstate.jobs.kafka.producer import produce_batches
from streamstate.jobs.kafka.records import KAFKA_SCHEMA
from streamstate.jobs.kafka.source import KafkaStreamReader

SHORT_NAME = "streamstate_kafka"


@dataclass
class Written(WriterCommitMessage):
    records: int


class _KafkaWrite:
    """Options shared by the batch and streaming writers: kafka.* settings and the topic."""

    def __init__(self, options: dict[str, str]) -> None:
        self.client_conf = client_settings(options)
        if "bootstrap.servers" not in self.client_conf:
            raise KafkaOptionError("option kafka.bootstrap.servers is required")
        self.topic: str | None = {str(k).lower(): v for k, v in options.items()}.get("topic")

    def write(self, iterator: Iterator[pa.RecordBatch]) -> Written:
        return Written(produce_batches(iterator, self.client_conf, self.topic))


class KafkaBatchWriter(_KafkaWrite, DataSourceArrowWriter):
    """``df.write.format("streamstate_kafka")``; a failed task fails the write."""


class KafkaStreamWriter(_KafkaWrite, DataSourceStreamArrowWriter):
    """``df.writeStream.format("streamstate_kafka")``: a failed task fails the micro-batch."""

    def commit(self, messages, batchId: int) -> None:  # noqa: N803 - Spark's name
        """Records are acknowledged by the broker before a task reports success: nothing left to do."""

    def abort(self, messages, batchId: int) -> None:  # noqa: N803
        """Kafka cannot take records back; the retried batch writes them again (at-least-once)."""


class KafkaDataSource(DataSource):
    """Kafka topics as a streaming source and a batch/streaming sink."""

    @classmethod
    def name(cls) -> str:
        return SHORT_NAME

    def schema(self) -> StructType:
        return KAFKA_SCHEMA

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return KafkaStreamReader(SourceOptions.parse(self.options))

    def writer(self, schema: StructType, overwrite: bool) -> KafkaBatchWriter:
        return KafkaBatchWriter(self.options)

    def streamWriter(self, schema: StructType, overwrite: bool) -> KafkaStreamWriter:
        return KafkaStreamWriter(self.options)
