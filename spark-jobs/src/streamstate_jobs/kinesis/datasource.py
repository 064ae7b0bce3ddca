"""``streamstate_kinesis``: the project's Kinesis Data Streams source for Spark (Python Data
Source API), streaming reads only (:mod:`streamstate_jobs.kinesis.source`)."""

from __future__ import annotations

from pyspark.sql.datasource import DataSource, DataSourceStreamReader
from pyspark.sql.types import StructType

from streamstate_jobs.kinesis.options import KinesisOptions
from streamstate_jobs.kinesis.arrow_batches import KINESIS_SCHEMA
from streamstate_jobs.kinesis.source import KinesisStreamReader

SHORT_NAME = "streamstate_kinesis"


class KinesisDataSource(DataSource):
    """A Kinesis data stream as a streaming source: one Spark partition per readable shard."""

    @classmethod
    def name(cls) -> str:
        return SHORT_NAME

    def schema(self) -> StructType:
        return KINESIS_SCHEMA

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return KinesisStreamReader(KinesisOptions.parse(self.options))
