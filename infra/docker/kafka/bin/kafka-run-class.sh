#!/bin/sh
# kafka-run-class.sh CLASS ARGS...: as Kafka's own script, without its options.
exec java ${KAFKA_HEAP_OPTS:--Xmx256m} -Djava.awt.headless=true \
    -Dlog4j.configuration=file:/opt/kafka/config/log4j.properties ${KAFKA_OPTS:-} \
    -cp "/opt/kafka/libs/*" "$@"
