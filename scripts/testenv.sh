#!/usr/bin/env bash
# Makes a PostgreSQL and a Redis available for the tests and prints the
# environment to use them, as `export NAME=value` lines for eval:
#
#   eval "$(scripts/testenv.sh)"           # the databases only
#   eval "$(scripts/testenv.sh kafka)"     # and Apache Kafka's broker (make bench)
#   eval "$(scripts/testenv.sh browser promtool kafka schemathesis)"   # and chromium, promtool and Schemathesis (make test)
#
# kafka: the tests and benchmarks run Apache Kafka's own broker as a JVM
# (internal/kafkabroker): a JDK 17+ and Maven are installed when missing and
# the broker's jars resolved from Maven Central into their cache, once; each
# test binary then starts its broker itself. `make dev` with the embedded
# broker needs none of it.
#
# PostgreSQL: TEST_DATABASE_URL if it is set and answers; else nothing (the
# tests start a testcontainers container) when a Docker engine answers; else
# the machine's own server, started, created or installed as needed.
# Redis: the same, with TEST_REDIS_URL.
# Everything it does is logged to stderr; stdout carries only the exports.
set -euo pipefail

. "$(dirname "$0")/lib.sh"

# psql and redis-cli are needed to check what answers, even when the server is
# elsewhere.
if ! command -v psql >/dev/null 2>&1 && ! docker_answers; then apt_install postgresql-client; fi
if ! command -v redis-cli >/dev/null 2>&1 && ! docker_answers; then apt_install redis-tools; fi
# Extra tools, only when asked for: installing a browser (and with it a
# systemd upgrade) is no business of a benchmark.
for tool in "$@"; do
  case "$tool" in
    browser) # the browser test drives Debian's chromium headless
      command -v chromium >/dev/null 2>&1 || apt_install chromium ;;
    promtool) # the alert rules' unit tests; Debian ships it with prometheus
      command -v promtool >/dev/null 2>&1 || apt_install prometheus ;;
    kafka) # Apache Kafka's broker: a JDK, and Maven for its jars
      kafka_tools
      kafka_jars ;;
    schemathesis) # the API's contract test: Schemathesis, pinned, in a venv
      cli=$(schemathesis_cli)
      echo "export SCHEMATHESIS='$cli'" ;;
    *) log "unknown tool $tool (known: browser, promtool, kafka, schemathesis)"; exit 2 ;;
  esac
done

if [ -n "${TEST_DATABASE_URL:-}" ] && pg_answers "$TEST_DATABASE_URL"; then
  echo "export TEST_DATABASE_URL='$TEST_DATABASE_URL'"
elif [ -n "${TEST_DATABASE_URL:-}" ] && ! command -v psql >/dev/null 2>&1; then
  echo "export TEST_DATABASE_URL='$TEST_DATABASE_URL'" # checked by the tests themselves
elif docker_answers; then
  log "Docker answers: the tests start PostgreSQL with testcontainers"
  echo "unset TEST_DATABASE_URL"
else
  [ -z "${TEST_DATABASE_URL:-}" ] || log "TEST_DATABASE_URL does not answer; using the machine's PostgreSQL"
  url=$(local_postgres)
  echo "export TEST_DATABASE_URL='$url'"
fi

if [ -n "${TEST_REDIS_URL:-}" ] && redis_answers "$TEST_REDIS_URL"; then
  echo "export TEST_REDIS_URL='$TEST_REDIS_URL'"
elif docker_answers; then
  log "Docker answers: the tests start Redis with testcontainers"
  echo "unset TEST_REDIS_URL"
else
  url=$(local_redis)
  echo "export TEST_REDIS_URL='$url'"
fi
