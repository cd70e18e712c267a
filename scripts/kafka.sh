#!/usr/bin/env bash
# make kafka: Apache Kafka's own broker (the release the tests and compose
# run) on 127.0.0.1:9092 (its controller on 9093), every topic of the
# pipeline created, in the foreground until Ctrl-C. It keeps its log in
# .dev/kafka across runs: topics, records and committed offsets survive a
# restart (remove the directory to start empty). Installs a JDK and Maven
# when missing; the first run resolves the broker's jars from Maven Central.
# KAFKA_PREFIX (make kafka KAFKA_PREFIX=staging.) creates the topics under
# that prefix, for services run with the same KAFKA_PREFIX.
# NODES=3 (make kafka NODES=3) runs a cluster of three combined
# broker/controller nodes on 127.0.0.1:9092, :9094 and :9096 (controllers one
# above), every topic with three replicas and min.insync.replicas=2, as in
# production; its log is kept in .dev/kafka-3.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

kafka_tools
mkdir -p .dev/bin
go build -o .dev/bin/ ./cmd/devkafka
# exec: Ctrl-C reaches devkafka itself, which stops the broker it started
# (a controlled shutdown) and exits.
exec .dev/bin/devkafka -kafka real -nodes "${NODES:-1}" -prefix "${KAFKA_PREFIX:-}"
