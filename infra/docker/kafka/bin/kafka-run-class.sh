#!/bin/sh
# kafka-run-class.sh CLASS ARGS...: as Kafka's own script, without its options but the JVM's:
# KAFKA_JVM_PERFORMANCE_OPTS as Kafka's script takes it (compose sets it; unset, Kafka's default).
exec java ${KAFKA_HEAP_OPTS:--Xmx256m} \
    ${KAFKA_JVM_PERFORMANCE_OPTS:--server -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:InitiatingHeapOccupancyPercent=35 -XX:+ExplicitGCInvokesConcurrent -XX:MaxInlineLevel=15} \
    -Djava.awt.headless=true \
    -Dlog4j.configuration=file:/opt/kafka/config/log4j.properties ${KAFKA_OPTS:-} \
    -cp "/opt/kafka/libs/*" "$@"
