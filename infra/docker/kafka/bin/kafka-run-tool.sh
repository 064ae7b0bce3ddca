#!/bin/sh
# kafka-run-tool.sh CLASS ARGS...: a command-line tool, logging as Kafka's tools do (WARN and
# above to stderr), with the small heap Kafka's own tool scripts give it.
KAFKA_HEAP_OPTS="${KAFKA_HEAP_OPTS:--Xmx256m}" \
KAFKA_OPTS="-Dlog4j.configuration=file:/opt/kafka/config/tools-log4j.properties ${KAFKA_OPTS:-}" \
    exec /opt/kafka/bin/kafka-run-class.sh "$@"
