"""The state library's exceptions: one root, and a branch for the state API's refusals.

::

    StreamstateError
    ├── StateError           the state API refuses a state, a call or an output (streamstate.state)
    └── UnavailableError     a service the configuration names does not answer

The pipeline's deployables keep a family of their own
(``streamstate_pipeline.errors``, rooted at its own ``PipelineError``: the library is installed without
the pipeline).
"""

from __future__ import annotations


class StreamstateError(Exception):
    """The root of every exception the project raises on purpose."""


class StateError(StreamstateError):
    """The state API refuses a state value, a call on ``State`` or an output."""


class UnavailableError(StreamstateError):
    """A service the configuration names (a Kafka broker, a Kinesis endpoint) does not answer."""
