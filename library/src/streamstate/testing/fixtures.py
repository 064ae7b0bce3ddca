"""pytest fixtures for your own tests: ``pytest_plugins = ["streamstate.testing.fixtures"]``.

- ``kafka``: a :class:`~streamstate.testing.kafka.KafkaBroker` in a container, one for the
  whole test session (starting Kafka takes seconds; each test takes its own topics with
  ``kafka.new_topic()``, so tests share no data);
- ``spark``: one SparkSession for the session (:func:`~streamstate.testing.spark.spark_session_for_tests`).

Every container is stopped when the session ends, whatever its outcome.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

from streamstate.testing.kafka import KafkaBroker, KafkaContainer
from streamstate.testing.spark import spark_session_for_tests


@pytest.fixture(scope="session")
def kafka() -> Iterator[KafkaBroker]:
    """A running Apache Kafka broker (KRaft, one node) for the test session."""
    with KafkaContainer() as broker:
        yield broker


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """A local SparkSession configured for the state API and Spark's Kafka connector."""
    session = spark_session_for_tests()
    yield session
    session.stop()
