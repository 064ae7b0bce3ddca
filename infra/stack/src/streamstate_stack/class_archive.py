"""The Kafka brokers' class archive (:mod:`streamstate_pipeline.class_archives`).

``make`` builds it (``python -m streamstate_stack.class_archive``) from a short run of a
broker in a scratch directory: started, its topics created, a transaction written and read
back by a read_committed consumer, then stopped as the launcher stops it. Every broker
:class:`~streamstate_stack.servers.KafkaBroker` starts afterwards maps it.

The same command first makes sure of the Spark driver's archive
(:mod:`streamstate_jobs.class_archive`): one process for the stack's two archives, since every
``make run`` asks whether both are up to date before anything starts, and a second interpreter
with its imports made that 0.45 s longer.
"""

from __future__ import annotations

import dataclasses
import sys
import tempfile
import time
from pathlib import Path

from streamstate_pipeline import class_archives
from streamstate_stack.servers import KafkaBroker, broker_archive

TOPIC = "class-archive"
STOP_WITHIN_S = 300  # writing the archive at exit takes a while on 2 cores


def _exercise(bootstrap: str) -> None:
    """What a pipeline's broker serves: its topics, a transaction, a read_committed read, a group."""
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept: its futures fail once it is collected
    admin.create_topics([NewTopic(TOPIC, 2, 1)])[TOPIC].result(60)
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "streamstate-class-archive"})
    producer.init_transactions(60)
    producer.begin_transaction()
    for number in range(100):
        producer.produce(TOPIC, key=str(number % 7), value=b"{}")
    producer.commit_transaction(60)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "streamstate-class-archive",
                         "isolation.level": "read_committed", "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe([TOPIC])
        read, deadline = 0, time.monotonic() + 60
        while read < 100 and time.monotonic() < deadline:
            read += len(consumer.consume(100, timeout=1))
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()


def _train(options: list[str]) -> None:
    from streamstate_stack.launcher import EmbeddedStack, free_port

    with tempfile.TemporaryDirectory(prefix="streamstate-class-archive-") as scratch:
        stack = EmbeddedStack(workdir=Path(scratch), quiet=True)
        broker = KafkaBroker(Path(scratch, "kafka"), free_port(), free_port(), java_options=())
        broker.format_storage()
        stack.kafka = dataclasses.replace(broker, java_options=tuple(options))
        try:
            _exercise(stack.start_broker())
            stack.processes["broker"].stop(grace_s=STOP_WITHIN_S)  # the JVM writes the archive as it exits
        finally:
            stack.stop()


def main() -> int:
    from streamstate_jobs import class_archive as driver

    driver.main([])
    class_archives.ensure(broker_archive(), "the Kafka broker", _train)
    return 0


if __name__ == "__main__":
    sys.exit(main())
