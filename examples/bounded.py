"""Memory-bounded state with mapWithState (seed 000 "Control state memory usage").

Per key, a count per distinct value; above 1000 entries the map is trimmed to the 800 most
frequent. Emits (key, entries); an idle key (1 hour) emits (key, -1) and is removed.

    python -m examples.bounded --topic items
"""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession

from examples.runner import main_for, read_json_topic
from streamstate.state import State, StateResult, StateSpec, map_with_state

SCHEMA = "key STRING, item STRING"
MAX_ENTRIES = 1000
KEEP_ENTRIES = 800
IDLE = "1 hour"


def count_bounded(key: str, item: str | None, state: State) -> tuple[str, int] | None:
    """Count ``item``; trim the least frequent entries once the map outgrows MAX_ENTRIES."""
    counts: dict[str, int] = state.get_option() or {}
    if item is not None:
        updated = {**counts, item: counts.get(item, 0) + 1}
        if len(updated) > MAX_ENTRIES:
            updated = dict(sorted(updated.items(), key=lambda entry: entry[1])[-KEEP_ENTRIES:])
        state.update(updated)
        return (key, len(updated))
    if state.is_timing_out():
        return (key, -1)
    return None


def bounded_counts(items: DataFrame) -> StateResult:
    return map_with_state(items, key="key", spec=StateSpec.function(count_bounded).timeout(IDLE), value="item")


def build(spark: SparkSession, bootstrap_servers: str, topic: str) -> StateResult:
    return bounded_counts(read_json_topic(spark, bootstrap_servers, topic, SCHEMA))


if __name__ == "__main__":
    main_for("memory-bounded state with mapWithState", build)
