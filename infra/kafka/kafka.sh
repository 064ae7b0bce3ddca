#!/usr/bin/env bash
# Kafka's own command-line tools (kafka-console-consumer.sh and friends), run from the jars
# `make deps` installs in .deps/kafka-<KAFKA_VERSION>/libs (installed first if missing): no
# Kafka tarball needed. Logs WARN and above to stderr, so stdout carries only the output.
# Example, against `make run`'s broker:
#   infra/kafka/kafka.sh console-consumer --bootstrap-server 127.0.0.1:9092 --topic alerts \
#       --from-beginning --isolation-level read_committed --property print.key=true
# Each tool's options: infra/kafka/kafka.sh TOOL --help.
. "$(dirname "${BASH_SOURCE[0]}")/../deps/common.sh"

usage() {
    echo "usage: $0 TOOL [ARGS...]   (TOOL --help for its options)"
    echo "tools: console-consumer, console-producer, topics, consumer-groups"
}

case "${1:-}" in
    console-consumer) main=org.apache.kafka.tools.consumer.ConsoleConsumer ;;
    # Kafka 3.9 still ships the console producer in kafka_2.13 (Scala), not in kafka-tools.
    console-producer) main=kafka.tools.ConsoleProducer ;;
    topics) main=org.apache.kafka.tools.TopicCommand ;;
    consumer-groups) main=org.apache.kafka.tools.consumer.group.ConsumerGroupCommand ;;
    -h | --help) usage; exit 0 ;;
    *) usage >&2; exit 2 ;;
esac
shift

bash "$DEPS_SCRIPTS/install-kafka.sh"
# The log4j (reload4j) configuration of Kafka's config/tools-log4j.properties, read by the
# JVM through fd 3 (no file to write or clean up).
exec 3<<'EOF'
log4j.rootLogger=WARN, stderr
log4j.appender.stderr=org.apache.log4j.ConsoleAppender
log4j.appender.stderr.Target=System.err
log4j.appender.stderr.layout=org.apache.log4j.PatternLayout
log4j.appender.stderr.layout.ConversionPattern=[%d] %p %m (%c)%n
EOF
exec java -Xmx256M -Djava.awt.headless=true -Dlog4j.configuration=file:/dev/fd/3 \
    -cp "$DEPS_DIR/kafka-$KAFKA_VERSION/libs/*" "$main" "$@"
