#!/usr/bin/env bash
# Apache Kafka KAFKA_VERSION (the release of compose's apache/kafka image) from Maven
# Central: kafka_2.13 and its runtime jars into .deps/kafka-<version>/libs, the classpath
# the production profile starts the KRaft broker with (infra/stack/src/streamstate_stack/servers.py). Cached.
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"

POM="$DEPS_SCRIPTS/kafka.pom.xml"
out="$DEPS_DIR/kafka-$KAFKA_VERSION"
stamp="$(stamp_of "$POM" "$0" "$DEPS_SCRIPTS/common.sh")"
[ -f "$out/.installed-$stamp" ] && exit 0

say "resolving Apache Kafka $KAFKA_VERSION (kafka_2.13 and its runtime jars) with Maven"
fresh_dir "$out.tmp"
mvn_copy "$POM" "$out.tmp/libs" -Dkafka.version="$KAFKA_VERSION" \
    -Dslf4j.version="$KAFKA_SLF4J_VERSION" -Dreload4j.version="$KAFKA_RELOAD4J_VERSION"
[ -f "$out.tmp/libs/kafka_2.13-$KAFKA_VERSION.jar" ] || die "kafka_2.13-$KAFKA_VERSION.jar missing after resolution"
finish_install "$out" "$stamp"
say "Apache Kafka $KAFKA_VERSION ready in $out ($(ls "$out/libs" | wc -l) jars, $(du -sh "$out" | cut -f1))"
