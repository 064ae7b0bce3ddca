"""Admission control (streamstate_jobs.kafka.partition_writer.records_per_batch): with output
transactions a micro-batch reads a bounded number of records by default, sized from the
transactions' timeout, so that a backlog of any size is read in batches whose transactions
end within it; STREAMSTATE_MAX_OFFSETS_PER_TRIGGER overrides it."""

from __future__ import annotations

from streamstate_jobs.kafka.partition_writer import MEASURED_RECORDS_PER_S, TIMEOUT_SHARE, records_per_batch
from streamstate_pipeline.settings import Settings


def test_a_batch_is_bounded_by_default_in_proportion_to_the_transaction_timeout():
    default = records_per_batch(Settings())
    assert default == 180 * MEASURED_RECORDS_PER_S // TIMEOUT_SHARE == 3_154_500
    assert records_per_batch(Settings(output_transaction_timeout_ms=18_000)) == default // 10
    assert records_per_batch(Settings(output_transactions="auto")) == default


def test_the_set_bound_wins_and_at_least_once_reads_unbounded():
    assert records_per_batch(Settings(max_offsets_per_trigger=500)) == 500
    assert records_per_batch(Settings(max_offsets_per_trigger=500, output_transactions="off")) == 500
    assert records_per_batch(Settings(output_transactions="off")) is None

