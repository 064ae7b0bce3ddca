#!/bin/sh
exec /opt/kafka/bin/kafka-run-tool.sh kafka.tools.ConsoleProducer "$@"
