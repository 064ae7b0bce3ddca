"""The entry point the jobs call: :func:`read_kinesis`."""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession

from streamstate_jobs.kafka.partition_writer import records_per_batch
from streamstate_jobs.kinesis.datasource import SHORT_NAME, KinesisDataSource
from streamstate_pipeline.settings import Settings


def read_kinesis(
    spark: SparkSession,
    settings: Settings,
    streamName: str,  # noqa: N803 - the source's option names, on purpose
    startingPosition: str = "TRIM_HORIZON",  # noqa: N803
    maxRecordsPerTrigger: int | None = None,  # noqa: N803
    **extra_options: str,
) -> DataFrame:
    """A streaming DataFrame of the stream's records (:data:`~streamstate_jobs.kinesis.arrow_batches.KINESIS_SCHEMA`).

    ``endpointUrl`` and ``region`` default to ``settings.kinesis_endpoint_url`` and
    ``settings.kinesis_region``; ``maxRecordsPerTrigger`` to ``settings.max_offsets_per_trigger``, else to the bound the
    output transactions' timeout sets (:func:`~streamstate_jobs.kafka.partition_writer.records_per_batch`).
    ``extra_options`` pass through (``startingTimestamp``, ``failOnDataLoss``, ``retryTimeoutMs``, ...).
    """
    spark.dataSource.register(KinesisDataSource)
    options: dict[str, str] = {"streamName": streamName, "startingPosition": startingPosition, "region": settings.kinesis_region}
    if settings.kinesis_endpoint_url:
        options["endpointUrl"] = settings.kinesis_endpoint_url
    limit = maxRecordsPerTrigger if maxRecordsPerTrigger is not None else records_per_batch(settings)
    if limit is not None:
        options["maxRecordsPerTrigger"] = str(limit)
    options.update({k: str(v) for k, v in extra_options.items()})
    return spark.readStream.format(SHORT_NAME).options(**options).load()
