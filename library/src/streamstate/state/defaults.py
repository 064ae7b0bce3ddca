"""The state library's defaults, in one light module (no Spark, no pyarrow): the library
reads them, and an application may start its own settings from them.
"""

from __future__ import annotations

# Keys are grouped into this many buckets; Spark's per-group cost is paid per bucket and batch.
# A query's checkpoint does not record the count, so this default can never change.
DEFAULT_BUCKETS = 64
# Keys kept in the buckets' hot sets (all buckets together): a key touched again while hot costs
# no state call; the least recently touched keys beyond it move to the per-key cold map.
DEFAULT_HOT_KEYS = 200_000
