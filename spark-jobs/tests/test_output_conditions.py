"""A transactional producer's fatal errors, classified by cause on real ``KafkaError`` objects
(streamstate_jobs.kafka.partition_writer): only fencing says another copy of the job runs, and
each condition reaches the runner as its ``[CONDITION]`` code in whatever text the JVM wraps
around the task's error, with its own exit code (README, Delivery guarantees)."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException

from streamstate_pipeline.errors import JobError
from streamstate_jobs.kafka.partition_writer import (
    FATAL_CONDITIONS,
    OutputFenced,
    OutputNotAuthorized,
    OutputNotDelivered,
    OutputTransactionsUnsupported,
    OutputTransactionTimedOut,
    _call,
    _TransactionalClient,
    classify,
    fatal_condition,
    is_fenced,
    kafka_error,
)
from streamstate_jobs.runner import ANOTHER_COPY_CONDITIONS, _another_copy

TIMEOUT_MS = 5_000


def fatal(code: int) -> KafkaError:
    return KafkaError(code, "as the broker said it", fatal=True)


@pytest.mark.parametrize(
    ("code", "open_s", "expected"),
    [
        (KafkaError._FENCED, 1.0, OutputFenced),
        (KafkaError.PRODUCER_FENCED, None, OutputFenced),
        (KafkaError.INVALID_PRODUCER_EPOCH, 4.9, OutputFenced),
        # The broker aborts a transaction past its timeout by bumping the epoch: the same codes.
        (KafkaError._FENCED, 5.0, OutputTransactionTimedOut),
        (KafkaError.INVALID_PRODUCER_EPOCH, 60.0, OutputTransactionTimedOut),
        (KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, 0.1, OutputNotAuthorized),
        (KafkaError.GROUP_AUTHORIZATION_FAILED, None, OutputNotAuthorized),
        (KafkaError.TOPIC_AUTHORIZATION_FAILED, None, OutputNotAuthorized),
        (KafkaError.CLUSTER_AUTHORIZATION_FAILED, None, OutputNotAuthorized),
        (KafkaError.UNSUPPORTED_VERSION, None, OutputTransactionsUnsupported),
        (KafkaError.INVALID_TRANSACTION_TIMEOUT, None, OutputTransactionsUnsupported),
        # Fatal, but a new producer (the restart's) does not meet it again: restarted with backoff.
        (KafkaError.OUT_OF_ORDER_SEQUENCE_NUMBER, None, None),
        (KafkaError._FATAL, None, None),
    ],
)
def test_a_fatal_error_is_classified_by_its_cause(code, open_s, expected):
    assert classify(fatal(code), open_s, TIMEOUT_MS) is expected


def test_each_condition_has_its_own_code_exit_code_and_remedy():
    kinds = list(FATAL_CONDITIONS.values())
    assert [kind.exit_code for kind in kinds] == [2, 3, 4, 5]
    for kind in kinds:
        error = kind("commit_transaction of transactional id streamstate.x.0: Broker: refused")
        assert str(error).startswith(f"[{kind.condition}] commit_transaction"), str(error)
        assert isinstance(error, OutputNotDelivered) and isinstance(error, JobError)
        assert ("another copy" in str(error) or "another producer" in str(error)) == (kind is OutputFenced)


def test_the_runner_finds_the_condition_in_the_text_the_jvm_wraps_around_the_task_s_error():
    task_error = OutputNotAuthorized("init_transactions of transactional id streamstate.sessions.main.q.1: Broker: "
                                     "Transactional Id authorization failed")
    across_the_jvm = (
        "[FOREACH_BATCH_USER_FUNCTION_ERROR] An error occurred in the user provided function in foreach batch sink.\n"
        "org.apache.spark.api.python.PythonException: Traceback (most recent call last):\n"
        '  File "/x/partition_writer.py", line 400, in _call\n'
        f"streamstate_jobs.kafka.partition_writer.OutputNotAuthorized: {task_error}\n\tat org.apache.spark..."
    )
    assert fatal_condition(across_the_jvm) is OutputNotAuthorized
    assert not is_fenced(across_the_jvm), "an authorization error is not another copy of the job"
    assert is_fenced(f"PythonException: {OutputFenced('commit_transaction of transactional id x.0: fenced')}")
    assert fatal_condition("OutputNotDelivered: 0 of 3 records acknowledged") is None
    assert fatal_condition("[OUTPUT_SOMETHING_ELSE] not ours") is None


def test_a_fatal_error_behind_confluent_kafka_s_system_error_is_found():
    cause = KafkaException(fatal(KafkaError._FENCED))
    try:
        try:
            raise cause
        except KafkaException:
            raise SystemError("<method 'append' of 'list' objects> returned a result with an exception set")  # noqa: B904
    except SystemError as system_error:
        assert kafka_error(system_error) is cause.args[0]
    assert kafka_error(ValueError("x")) is None


def test_a_transactional_call_refused_by_the_acls_fails_as_not_authorized_not_as_fenced():
    client = _TransactionalClient("streamstate.q.0", None, None, "alerts", TIMEOUT_MS, [])  # type: ignore[arg-type]

    def refused() -> None:
        raise KafkaException(fatal(KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED))

    with pytest.raises(OutputNotAuthorized, match=r"^\[OUTPUT_NOT_AUTHORIZED\] init_transactions of transactional id streamstate.q.0"):
        _call(client, "init_transactions", refused)


def _query_failed(condition: str) -> BaseException:
    """A PySpark StreamingQueryException carrying a Spark error class, its condition its own."""
    from pyspark.errors.exceptions.base import StreamingQueryException

    return StreamingQueryException(f"[{condition}] the query failed", errorClass=condition, messageParameters={})


@pytest.mark.parametrize("condition", sorted(ANOTHER_COPY_CONDITIONS))
def test_another_copy_on_the_checkpoint_is_recognised_by_spark_s_error_class(condition):
    assert _another_copy(_query_failed(condition))


def test_another_copy_is_not_recognised_by_wording():
    assert not _another_copy(_query_failed("STREAM_FAILED"))
    assert not _another_copy(RuntimeError("Concurrent update to the log. Multiple streaming jobs detected for 7"))
    assert not _another_copy("Multiple streaming queries are concurrently using /checkpoints/x")
