"""The one vocabulary of record kinds: the ``kind`` column from the stateful operator to the topics.

A job's stateful operator (:mod:`streamstate.state`) emits rows ``(kind, key, payload)``
and routing (:mod:`streamstate_jobs.routing`) writes each kind to its topic, so both sides
name kinds from this one enum instead of spelling strings. The state layer's own kinds
(:class:`streamstate.state.kinds.RowKind`: ``output``, ``snapshot``, ``dead_letter``) are its
first three members; a function can also emit a record of any other
kind with :class:`~streamstate.state.Emit`, which is how the jobs produce alerts,
closed sessions and the dead letters their rules refuse. Members are ``str``, so they compare
equal to the plain strings on the wire and in Spark columns.
"""

from __future__ import annotations

from enum import StrEnum

from streamstate.state.kinds import RowKind


class Kind(StrEnum):
    # The state layer's rows (StateResult.all): the library's own kinds, under the same names.
    OUTPUT = RowKind.OUTPUT.value
    SNAPSHOT = RowKind.SNAPSHOT.value
    DEAD_LETTER = RowKind.DEAD_LETTER.value  # also what the jobs' rules refuse: routed to the dead-letter topic
    # What the jobs route to their topics.
    ALERT = "alert"
    SESSION = "session"
    SESSION_STATE = "session_state"
    METRIC_STATE = "metric_state"
    EVENT_COUNT = "event_count"
    # Feeds the job's metrics only, never a topic: key = counter name, payload = increment.
    COUNT = "count"
