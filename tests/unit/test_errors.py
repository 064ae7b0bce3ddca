"""Two exception families, one per product: every exception the state library defines descends
from streamstate.errors.StreamstateError, every one the pipeline's deployables define from
streamstate_pipeline.errors.PipelineError through its layer's branch; lost input is recognised
by type or error class first."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import traceback

import pytest

import streamstate
from streamstate import errors as library_errors
from streamstate_pipeline import errors
from streamstate_pipeline.contracts import ContractError
from streamstate_jobs.kafka.identity import SourceResetError
from streamstate_jobs.lost_input import _jvm_origin, error_conditions, is_source_reset

PIPELINE_PACKAGES = ("streamstate_pipeline", "streamstate_jobs", "streamstate_api", "streamstate_producers", "streamstate_stack")
BRANCHES = (
    errors.ConfigurationError, errors.JobError, errors.ApiError, errors.ProducerError, errors.StackError,
    errors.UnavailableError, ContractError,
)


def _defined_exceptions(package_names) -> list[type[BaseException]]:
    found = []
    for name in package_names:
        package = importlib.import_module(name)
        for module in pkgutil.walk_packages(package.__path__, f"{name}."):
            if module.name.endswith("__main__"):
                continue
            for _, cls in inspect.getmembers(importlib.import_module(module.name), inspect.isclass):
                if issubclass(cls, BaseException) and cls.__module__ == module.name:
                    found.append(cls)
    return found


LIBRARY = _defined_exceptions(["streamstate"])
PIPELINE = _defined_exceptions(PIPELINE_PACKAGES)


def test_the_walk_finds_the_exceptions_of_every_layer():
    assert {"streamstate.errors", "streamstate.state.state", "streamstate.state.operators"} <= {c.__module__ for c in LIBRARY}
    assert {c.__module__.split(".")[0] for c in PIPELINE} == set(PIPELINE_PACKAGES)


@pytest.mark.parametrize("cls", LIBRARY, ids=lambda c: f"{c.__module__}.{c.__qualname__}")
def test_every_library_exception_descends_from_its_root(cls):
    assert issubclass(cls, library_errors.StreamstateError)
    assert streamstate.__name__ == cls.__module__.split(".")[0]


@pytest.mark.parametrize("cls", PIPELINE, ids=lambda c: f"{c.__module__}.{c.__qualname__}")
def test_every_pipeline_exception_descends_from_its_root(cls):
    assert issubclass(cls, errors.PipelineError)


@pytest.mark.parametrize("cls", [c for c in PIPELINE if c.__module__ != "streamstate_pipeline.errors"], ids=lambda c: c.__qualname__)
def test_every_layer_class_sits_on_a_branch_or_is_one(cls):
    assert issubclass(cls, BRANCHES), cls.__mro__


CONDITIONED = [c for c in PIPELINE if c.condition is not None]


def test_the_errors_callers_tell_apart_carry_a_condition_code():
    names = {c.__qualname__ for c in CONDITIONED}
    assert {"SourceResetError", "OutputFenced", "OutputNotAuthorized", "OutputTransactionTimedOut",
            "OutputTransactionsUnsupported", "BatchMarkersMayHaveExpired"} <= names


@pytest.mark.parametrize("cls", CONDITIONED, ids=lambda c: c.__qualname__)
def test_a_condition_code_is_stable_upper_case_and_recognised_in_text(cls):
    assert cls.condition.isupper() and " " not in cls.condition
    assert errors.conditions_in(f"PythonException: ...{cls.__module__}.{cls.__qualname__}: {errors.coded(cls.condition, 'x')}") == [cls.condition]


def test_each_condition_code_names_one_error():
    conditions = [c.condition for c in CONDITIONED if c.condition != "OUTPUT_FATAL"]
    assert len(conditions) == len(set(conditions)), conditions


def test_conditions_in_finds_the_bracketed_codes_only():
    assert errors.conditions_in("[STREAM_FAILED] x: [OUTPUT_FENCED] y; [KAFKA_DATA_LOSS.PARTITIONS_DELETED] z") == [
        "STREAM_FAILED", "OUTPUT_FENCED", "KAFKA_DATA_LOSS.PARTITIONS_DELETED"]
    assert errors.conditions_in("OUTPUT_FENCED without brackets, [not a code], [Mixed_Case]") == []


def test_lost_input_is_recognised_by_type_and_by_the_text_that_crosses_the_jvm():
    error = SourceResetError("topic user-events was recreated")
    assert str(error) == "[SOURCE_RESET] topic user-events was recreated"
    assert is_source_reset(error)
    try:
        raise error
    except SourceResetError as caught:
        crossed = "".join(traceback.format_exception(caught))  # what a PythonException carries
    assert is_source_reset(f"org.apache.spark.api.python.PythonException: {crossed}")


def test_other_failures_are_not_lost_input():
    assert not is_source_reset(RuntimeError("broker unreachable"))
    assert not is_source_reset("a message that mentions SourceResetError only in passing")
    # The class's name without its condition code is wording, not a condition.
    assert not is_source_reset("streamstate_jobs.kafka.identity.SourceResetError: topic t was recreated")
    assert not is_source_reset("a message that mentions SOURCE_RESET without its brackets")


def _query_failed(condition: str) -> BaseException:
    """A real PySpark StreamingQueryException carrying a Spark error class, as Spark Connect hands
    it over: its condition is its own, no JVM behind it."""
    from pyspark.errors.exceptions.base import StreamingQueryException

    return StreamingQueryException(f"[{condition}] the query failed", errorClass=condition, messageParameters={})


@pytest.mark.parametrize("condition", [
    "KAFKA_DATA_LOSS.COULD_NOT_READ_OFFSET_RANGE", "KAFKA_DATA_LOSS.PARTITIONS_DELETED",
    "KAFKA_DATA_LOSS.INITIAL_OFFSET_NOT_FOUND_FOR_PARTITIONS", "KAFKA_DATA_LOSS",
])
def test_lost_input_is_recognised_by_the_spark_error_class(condition):
    error = _query_failed(condition)
    assert error_conditions(error) == [condition]
    assert is_source_reset(error)


@pytest.mark.parametrize("condition", ["STREAM_FAILED", "KAFKA_DATA_LOSS_LIKE", "KAFKA_START_OFFSET_DOES_NOT_MATCH_ASSIGNED"])
def test_other_spark_error_classes_are_not_lost_input(condition):
    error = _query_failed(condition)
    assert not is_source_reset(error)


def test_a_failure_with_no_error_class_has_no_conditions():
    assert error_conditions(RuntimeError("KAFKA_DATA_LOSS in a message is not an error class")) == []
    assert not is_source_reset(RuntimeError("KAFKA_DATA_LOSS in a message is not an error class"))


class _Captured:
    """A PySpark error as ``StreamingQuery.exception()`` builds it: no JVM exception of its own,
    its cause's (``_cause``) holds one."""

    def __init__(self, origin=None, cause=None):
        self._origin, self._cause = origin, cause


def test_the_jvm_exception_behind_a_query_s_failure_is_its_cause_s():
    jvm_error = object()
    assert _jvm_origin(_Captured(cause=_Captured(origin=jvm_error))) is jvm_error
    assert _jvm_origin(_Captured(origin=jvm_error, cause=_Captured(origin=object()))) is jvm_error
    assert _jvm_origin(_Captured()) is None
    looped = _Captured()
    looped._cause = looped
    assert _jvm_origin(looped) is None
