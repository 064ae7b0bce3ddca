#!/bin/sh
# The official image's start-up: KAFKA_* variables become server.properties (KAFKA_A_B ->
# a.b; the JVM's own KAFKA_*_OPTS stay variables), the storage is formatted once with
# CLUSTER_ID, then the broker runs in the foreground.
set -eu
config=/opt/kafka/config/server.properties
env | sed -n 's/^KAFKA_\([A-Z0-9_]*\)=\(.*\)$/\1 \2/p' | while read -r name value; do
    case "$name" in
        HEAP_OPTS|OPTS|LOG4J_OPTS|JMX_OPTS|JVM_PERFORMANCE_OPTS|GC_LOG_OPTS) continue ;;
    esac
    echo "$(echo "$name" | tr 'A-Z_' 'a-z.')=$value"
done >"$config"
grep -q '^log.dirs=' "$config" || echo "log.dirs=/var/lib/kafka/data" >>"$config"
log_dirs="$(sed -n 's/^log.dirs=//p' "$config")"
if [ ! -f "${log_dirs%%,*}/meta.properties" ]; then
    : "${CLUSTER_ID:?set CLUSTER_ID (22 characters, base64 UUID) to format the KRaft storage}"
    KAFKA_HEAP_OPTS=-Xmx256m /opt/kafka/bin/kafka-run-class.sh kafka.tools.StorageTool format \
        --cluster-id "$CLUSTER_ID" --config "$config" --ignore-formatted
fi
exec /opt/kafka/bin/kafka-run-class.sh kafka.Kafka "$config"
