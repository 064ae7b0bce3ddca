"""The project's exceptions: one root and one branch per layer, so a caller catches by layer.

::

    StreamstateError
    ├── ConfigurationError   a setting, option, declaration or command line that cannot work;
    │                        a part the configuration needs is not installed
    ├── ContractError        a record breaks its wire contract (streamstate.contracts)
    ├── StateError           the state API refuses a state, a call or an output (streamstate.state)
    ├── JobError             a running job cannot go on as it is (streamstate.jobs)
    │   ├── CheckpointError  a checkpoint that cannot be resumed as asked
    │   └── SourceError      the input cannot be read as the checkpoint read it
    ├── ApiError             the snapshot API's store or a request's cursor (streamstate.api)
    ├── ProducerError        the producers' setup, scenarios and command line (streamstate.producers)
    ├── StackError           the no-Docker stack launcher and its servers (streamstate.stack)
    └── UnavailableError     a service the configuration names does not answer

Each layer's own classes live in its modules and inherit from its branch here. Classes that
callers already caught as a builtin (``ValueError``, ``TypeError``, ``RuntimeError``) keep
that builtin as a second base.
"""

from __future__ import annotations


class StreamstateError(Exception):
    """The root of every exception the project raises on purpose."""


class ConfigurationError(StreamstateError):
    """A setting, option, job declaration or command line that cannot work as given, or a part
    the configuration needs that is not installed. The message says what to change."""


class StateError(StreamstateError):
    """The state API refuses a state value, a call on ``State`` or an output."""


class JobError(StreamstateError):
    """A streaming job cannot go on as it is: its checkpoint, its input or its code."""


class CheckpointError(JobError, ValueError):
    """A checkpoint cannot be resumed as asked (state partitions or buckets changed, damaged
    metadata); the message says what to do. The runner exits 2 with it."""


class SourceError(JobError):
    """The job's input cannot be read as its checkpoint read it."""


class ApiError(StreamstateError):
    """The snapshot API's store, or a request the API refuses before it reaches the view."""


class ProducerError(StreamstateError):
    """The producers' setup, scenario files or command line."""


class StackError(StreamstateError):
    """The no-Docker stack launcher and the servers it runs natively."""


class UnavailableError(StreamstateError):
    """A service the configuration names (a Kinesis endpoint, say) does not answer."""
