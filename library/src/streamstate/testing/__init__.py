"""Testing your own streaming jobs against a real Kafka: fixtures and helpers for pytest.

A Kafka broker in a container (Apache Kafka's own image, KRaft, through testcontainers), a
SparkSession configured for the state API, and the two things every test of a Kafka job does:
produce a scenario, and read the job's outputs back the way its consumers will
(``read_committed``). Add to your ``conftest.py``::

    pytest_plugins = ["streamstate.testing.fixtures"]

and take the fixtures ``kafka`` (a :class:`~streamstate.testing.kafka.KafkaBroker`: its
``bootstrap_servers``, ``new_topic()``, ``produce()``, ``read_committed()``) and ``spark``.
Nothing here imports the pipeline: it needs pyspark, confluent-kafka and testcontainers
(``pip install streamstate[testing]``) and a Docker engine.
"""
