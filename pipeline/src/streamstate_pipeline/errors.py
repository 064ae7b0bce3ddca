"""The pipeline's exceptions: one root and one branch per deployable, so a caller catches by layer.

::

    PipelineError
    ├── ConfigurationError   a setting, option, declaration or command line that cannot work;
    │                        a part the configuration needs is not installed
    ├── ContractError        a record breaks its wire contract (streamstate_pipeline.contracts)
    ├── JobError             a running job cannot go on as it is (streamstate_jobs)
    │   ├── CheckpointError  a checkpoint that cannot be resumed as asked
    │   └── SourceError      the input cannot be read as the checkpoint read it
    ├── ApiError             the snapshot API's store or a request's cursor (streamstate_api)
    ├── ProducerError        the producers' setup, scenarios and command line (streamstate_producers)
    ├── StackError           the no-Docker stack launcher and its servers (streamstate_stack)
    └── UnavailableError     a service the configuration names does not answer

The state library is a product of its own, installed without the pipeline, and has its own
root (``streamstate.errors.StreamstateError``, with ``StateError`` under it): the jobs, which
use both, see the library's refusals as ``StateError``. Each layer's own classes live in its
modules and inherit from its branch here. Classes that callers already caught as a builtin
(``ValueError``, ``TypeError``, ``RuntimeError``) keep that builtin as a second base.

Conditions. An error a caller must tell apart from others carries a stable condition code, as
PySpark's error classes do: the class attribute :attr:`PipelineError.condition` (``OUTPUT_FENCED``,
``SOURCE_RESET``, ...), and its message starts with ``[CONDITION]``. Code recognises an error by
its type or its condition, never by its wording. Where only text survives (a Python error raised
in a Spark task or in ``foreachBatch`` reaches the driver as the text of a JVM exception),
:func:`conditions_in` finds the ``[CONDITION]`` codes the pipeline itself put into that text.
"""

from __future__ import annotations

import re
from typing import ClassVar


class PipelineError(Exception):
    """The root of every exception the pipeline's deployables raise on purpose.

    ``condition``: the stable code of an error that callers recognise (None: recognised by type
    only); such a class's messages start with ``[condition]`` (:func:`coded`)."""

    condition: ClassVar[str | None] = None


_CODE = re.compile(r"\[([A-Z][A-Z0-9_]*(?:\.[A-Z0-9_]+)*)\]")


def coded(condition: str, detail: str) -> str:
    """A message that starts with its condition code: ``[CONDITION] detail``."""
    return f"[{condition}] {detail}"


def conditions_in(text: str) -> list[str]:
    """The ``[CONDITION]`` codes a text holds, in order. Only for text that crossed a boundary
    where the exception object is lost (a task's Python error inside a JVM one); an exception
    at hand is recognised by its type or its ``condition`` attribute."""
    return _CODE.findall(text)


class UnavailableError(PipelineError):
    """A service the configuration names (a Kinesis endpoint, say) does not answer."""


class ConfigurationError(PipelineError):
    """A setting, option, job declaration or command line that cannot work as given, or a part
    the configuration needs that is not installed. The message says what to change."""


class JobError(PipelineError):
    """A streaming job cannot go on as it is: its checkpoint, its input or its code."""


class CheckpointError(JobError, ValueError):
    """A checkpoint cannot be resumed as asked (state partitions or buckets changed, damaged
    metadata); the message says what to do. The runner exits 2 with it."""


class SourceError(JobError):
    """The job's input cannot be read as its checkpoint read it."""


class ApiError(PipelineError):
    """The snapshot API's store, or a request the API refuses before it reaches the view."""


class ProducerError(PipelineError):
    """The producers' setup, scenario files or command line."""


class StackError(PipelineError):
    """The no-Docker stack launcher and the servers it runs natively."""

