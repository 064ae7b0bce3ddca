"""The state layer's own row kinds: the ``kind`` column of :attr:`StateResult.all`.

``output`` (a function's plain output), ``snapshot`` (a key's changed state) and
``dead_letter`` (a record whose call failed). A function emits records of any other kind with
:class:`~streamstate.state.Emit`; an application names those in its own vocabulary (the
pipeline's ``streamstate_jobs.kinds.Kind`` starts from these three). Members are ``str``, so they
compare equal to the plain strings in Spark columns and on the wire.
"""

from __future__ import annotations

from enum import StrEnum


class RowKind(StrEnum):
    OUTPUT = "output"
    SNAPSHOT = "snapshot"
    DEAD_LETTER = "dead_letter"
