"""Backoff for Kinesis calls: throttling and transient failures are waited out, not failed on.

A shard serves 5 GetRecords calls and 2 MB per second, ListShards 100 calls per second per
stream; above that Kinesis answers ``ProvisionedThroughputExceededException`` (or
``LimitExceededException``). Those, and server-side or connection failures, are retried with
exponential backoff and jitter until ``timeout_ms`` of consecutive failures; anything else
(a missing stream, a bad argument) fails at once with its own message. botocore's own retries
are off for the source's clients (:func:`streamstate_pipeline.kinesis.kinesis_client`), so this is the
one place that decides.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar
from streamstate_pipeline.errors import SourceError

log = logging.getLogger(__name__)
T = TypeVar("T")

THROTTLING_CODES = frozenset(
    {"ProvisionedThroughputExceededException", "LimitExceededException", "ThrottlingException", "KMSThrottlingException"}
)
TRANSIENT_CODES = frozenset({"InternalFailure", "InternalFailureException", "ServiceUnavailable", "ServiceUnavailableException"})


class KinesisSourceError(SourceError, RuntimeError):
    """Reading the stream failed in a way the source does not retry; the message says what to do."""


def error_code(exc: BaseException) -> str | None:
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        return response.get("Error", {}).get("Code")
    return None


def classify(exc: BaseException) -> str | None:
    """'throttled', 'transient' or None (not retried)."""
    from botocore.exceptions import ConnectionError as BotoConnectionError
    from botocore.exceptions import HTTPClientError

    code = error_code(exc)
    if code in THROTTLING_CODES:
        return "throttled"
    if code in TRANSIENT_CODES:
        return "transient"
    status = getattr(exc, "response", {}).get("ResponseMetadata", {}).get("HTTPStatusCode") if code else None
    if isinstance(status, int) and status >= 500:
        return "transient"
    if isinstance(exc, (BotoConnectionError, HTTPClientError)):
        return "transient"
    return None


@dataclass(frozen=True)
class Backoff:
    initial_ms: int = 100
    max_ms: int = 5_000
    timeout_ms: int = 120_000

    def delay_s(self, attempt: int, rng: random.Random) -> float:
        """Exponential, capped, with jitter over its upper half (so retries of many tasks spread out)."""
        ceiling = min(self.max_ms, self.initial_ms * 2**min(attempt, 30))
        return ceiling * rng.uniform(0.5, 1.0) / 1000


def with_backoff(
    call: Callable[[], T],
    backoff: Backoff,
    what: str,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    rng: random.Random | None = None,
) -> T:
    """``call()``, retried on throttling and transient failures; see the module docstring."""
    rng = rng or random.Random()
    started, attempt = clock(), 0
    while True:
        try:
            return call()
        except Exception as exc:
            kind = classify(exc)
            if kind is None:
                raise
            delay = backoff.delay_s(attempt, rng)
            waited = clock() - started
            if (waited + delay) * 1000 > backoff.timeout_ms:
                raise KinesisSourceError(
                    f"{what}: still {kind} after {attempt + 1} attempts over {waited:.1f}s "
                    f"({error_code(exc) or type(exc).__name__}: {exc}); the stream needs more shards or fewer "
                    "readers, or raise retryTimeoutMs"
                ) from exc
            if attempt == 0 or attempt % 10 == 0:
                log.warning("%s: %s (%s), retrying in %.2fs", what, kind, error_code(exc) or type(exc).__name__, delay)
            sleep(delay)
            attempt += 1
