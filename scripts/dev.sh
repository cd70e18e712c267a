#!/usr/bin/env bash
# make dev: runs the whole pipeline on this machine without Docker, in the
# foreground, until Ctrl-C: PostgreSQL (DATABASE_URL, or the machine's own
# server), Redis (REDIS_URL, or a local one), a Kafka broker with every
# topic, the migrations, and the three services. KAFKA chooses the broker:
# embedded (the default: kfake, in memory, no JDK) or real (Apache Kafka's
# own broker, a JVM keeping its log in .dev/kafka across runs; a JDK and
# Maven are installed when missing); with KAFKA=real, NODES=3 makes it a
# cluster of three nodes (127.0.0.1:9092, :9094, :9096; every topic with
# three replicas and min.insync.replicas=2; its log in .dev/kafka-3). Ctrl-C,
# SIGTERM or SIGHUP, to the script or to its process group, stops every
# process it started: the services, then the broker, each given STOP_TIMEOUT
# seconds before it is killed; and each runs through devrun
# (internal/lifeline), which sends it SIGTERM when the script ends in any
# other way, SIGKILL included. A PostgreSQL cluster or Redis it had to start
# keeps running (they are the machine's own, shared with the tests).
# DEV_RELAYS and DEV_CONSUMERS (2 each) set how many relays (one leads, the
# others stand by) and product-consumers instances (they share the groups'
# partitions) run. DEV_STATE (.dev) is where the binaries, the logs and the
# real broker's data go; DEV_API_ADDR, DEV_API_ADMIN_ADDR,
# DEV_RELAY_ADMIN_ADDR, DEV_CONSUMERS_ADMIN_ADDR and DEV_KAFKA_PORT move the
# listeners off their defaults below.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

KAFKA=${KAFKA:-embedded}
NODES=${NODES:-1}
case "$KAFKA" in
  real) kafka_tools ;;
  embedded) [ "$NODES" = 1 ] || die "NODES=$NODES needs KAFKA=real: the embedded broker has one node" ;;
  *) die "KAFKA must be real or embedded, got \"$KAFKA\"" ;;
esac
case "$NODES" in
  ''|*[!0-9]*|0) die "NODES must be a positive number, got \"$NODES\"" ;;
esac

API_ADDR=${DEV_API_ADDR:-127.0.0.1:8080}
API_ADMIN=${DEV_API_ADMIN_ADDR:-127.0.0.1:8090}
RELAY_ADMIN=${DEV_RELAY_ADMIN_ADDR:-127.0.0.1:8081}
CONSUMERS_ADMIN=${DEV_CONSUMERS_ADMIN_ADDR:-127.0.0.1:8082}
RELAYS=${DEV_RELAYS:-2}
CONSUMERS=${DEV_CONSUMERS:-2}
KAFKA_PORT=${DEV_KAFKA_PORT:-9092}
STATE=${DEV_STATE:-.dev}
STOP_TIMEOUT=15
mkdir -p "$STATE/bin" "$STATE/logs"

if [ -n "${DATABASE_URL:-}" ]; then
  pg_answers "$DATABASE_URL" || die "DATABASE_URL does not answer: $DATABASE_URL"
  db_url=$DATABASE_URL
else
  admin=$(local_postgres)
  if [ "$(psql "$admin" -tAc "SELECT 1 FROM pg_database WHERE datname = 'commerce'")" != 1 ]; then
    psql "$admin" -qc 'CREATE DATABASE commerce' >&2
  fi
  db_url=${admin/\/postgres\?/\/commerce?}
fi
redis_url=${REDIS_URL:-}
if [ -z "$redis_url" ]; then redis_url=$(local_redis); fi

log "building"
go build -o "$STATE/bin/" ./cmd/devrun ./cmd/devkafka ./cmd/migrate ./services/commerce-api ./services/outbox-relay ./services/product-consumers

log "migrating $db_url"
DATABASE_URL=$db_url "$STATE/bin/migrate" 2>>"$STATE/logs/migrate.log"

pids=()      # the services
kafka_pid="" # the broker, stopped last: the services leave their groups and flush on the way out

# running: whether any of the pids (children of this script) still runs; an
# exited child stays a zombie until it is waited for, and kill -0 still
# finds that.
running() {
  local p st
  for p; do
    st=$(ps -o stat= -p "$p" 2>/dev/null) || continue
    case "$st" in Z*) ;; *) return 0 ;; esac
  done
  return 1
}

# stop: SIGTERM to the pids, SIGKILL to those still running STOP_TIMEOUT
# seconds later, and reap them.
stop() {
  [ $# -gt 0 ] || return 0
  kill -TERM "$@" 2>/dev/null
  local deadline=$(( SECONDS + STOP_TIMEOUT ))
  while running "$@" && [ "$SECONDS" -lt "$deadline" ]; do sleep 0.1; done
  if running "$@"; then
    log "still running after ${STOP_TIMEOUT}s, killed: $*"
    kill -KILL "$@" 2>/dev/null
  fi
  wait "$@" 2>/dev/null
}

# stop_all runs once, on the way out, whatever the way: no further signal
# may cut it short (a closing terminal sends SIGHUP, and a supervisor may
# follow its SIGTERM with another), and a log line that cannot be written
# (the terminal or the pipe reading stderr is gone) must not stop it
# either: it kills first and logs after, with errors ignored.
stop_all() {
  trap '' INT TERM HUP PIPE
  trap - EXIT
  set +e
  if [ ${#pids[@]} -gt 0 ] || [ -n "$kafka_pid" ]; then
    stop "${pids[@]}"
    stop ${kafka_pid:+"$kafka_pid"}
    log "stopped"
  fi
}
trap stop_all EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

# Every process starts in a session of its own (setsid), out of reach of the
# terminal's Ctrl-C and its hangup: this script alone stops them, in order.
# devrun stops each when this script ends without stopping them (SIGKILL).
start() { # name, then env assignments and the command
  local name=$1; shift
  setsid "$STATE/bin/devrun" -parent $$ env "$@" >>"$STATE/logs/$name.log" 2>&1 &
  pids+=($!)
}

wait_http() { # name url
  for _ in $(seq 1 100); do
    curl -fsS -o /dev/null "$2" 2>/dev/null && return 0
    sleep 0.2
  done
  die "$1 did not become ready at $2; see $STATE/logs/$1.log"
}

# Ready is the broker's own answer: devkafka logs "Kafka broker ready" once
# the broker answers a metadata request and every topic has a leader (a
# JVM's port accepts connections well before that). Only what this run
# appends to the log counts.
kafka_log=$STATE/logs/kafka.log
touch "$kafka_log"
kafka_from=$(( $(wc -c <"$kafka_log") + 1 ))
if [ "$KAFKA" = real ]; then
  log "starting Apache Kafka (a few seconds; the first run resolves its jars from Maven Central); log: $kafka_log"
fi
kafka_dir="$STATE/kafka"
[ "$NODES" = 1 ] || kafka_dir="$STATE/kafka-$NODES"
setsid "$STATE/bin/devrun" -parent $$ "$STATE/bin/devkafka" -kafka "$KAFKA" -nodes "$NODES" -port "$KAFKA_PORT" -dir "$kafka_dir" >>"$kafka_log" 2>&1 &
kafka_pid=$!
# kafkabroker gives up after 2 minutes; resolving the jars comes first.
deadline=$(( SECONDS + 600 ))
until tail -c "+$kafka_from" "$kafka_log" | grep -qF '"msg":"Kafka broker ready"'; do
  if ! running "$kafka_pid"; then
    wait "$kafka_pid" 2>/dev/null || true
    kafka_pid=""
    tail -c "+$kafka_from" "$kafka_log" | tail -n 20 >&2
    die "the Kafka broker ($KAFKA) did not start; see $kafka_log"
  fi
  [ "$SECONDS" -lt "$deadline" ] || die "the Kafka broker ($KAFKA) is not ready after 10 minutes; see $kafka_log"
  sleep 0.2
done

# Every node, so that a client starts whichever node is down (node i on
# KAFKA_PORT + 2i, as devkafka lays them out).
brokers=127.0.0.1:$KAFKA_PORT
for i in $(seq 1 $(( NODES - 1 ))); do brokers+=",127.0.0.1:$(( KAFKA_PORT + 2 * i ))"; done
start commerce-api DATABASE_URL="$db_url" REDIS_URL="$redis_url" HTTP_ADDR="$API_ADDR" ADMIN_ADDR="$API_ADMIN" "$STATE/bin/commerce-api"
# The first relay and consumer instance listen on RELAY_ADMIN and
# CONSUMERS_ADMIN; each further one two ports above the previous.
admin_addr() { echo "127.0.0.1:$(( ${1##*:} + 2 * ($2 - 1) ))"; }
for i in $(seq 1 "$RELAYS"); do
  start "outbox-relay-$i" DATABASE_URL="$db_url" KAFKA_BROKERS="$brokers" ADMIN_ADDR="$(admin_addr "$RELAY_ADMIN" "$i")" \
    CLUSTER_NODE_ID="relay-$i" "$STATE/bin/outbox-relay"
done
for i in $(seq 1 "$CONSUMERS"); do
  # Instances on one host need their own static member and node ids.
  start "product-consumers-$i" DATABASE_URL="$db_url" KAFKA_BROKERS="$brokers" REDIS_URL="$redis_url" \
    ADMIN_ADDR="$(admin_addr "$CONSUMERS_ADMIN" "$i")" CLUSTER_NODE_ID="consumers-$i" \
    "$STATE/bin/product-consumers"
done
wait_http commerce-api "http://$API_ADDR/readyz"
for i in $(seq 1 "$RELAYS"); do wait_http "outbox-relay-$i" "http://$(admin_addr "$RELAY_ADMIN" "$i")/healthz"; done
for i in $(seq 1 "$CONSUMERS"); do wait_http "product-consumers-$i" "http://$(admin_addr "$CONSUMERS_ADMIN" "$i")/readyz"; done

kafka_label=$(printf '%-20s' "Kafka ($([ "$NODES" = 1 ] && echo "$KAFKA" || echo "$NODES nodes"))")
cat <<MSG

The pipeline is running. Ctrl-C stops the broker and the services (PostgreSQL and Redis keep running).

  live page           http://$API_ADDR/   <- open it in a browser
  commerce-api        http://$API_ADDR/api/v1   (OpenAPI: http://$API_ADDR/openapi.yaml)
  outbox-relay admin  http://$RELAY_ADMIN/metrics   ($RELAYS relays, admin ports two apart)
  consumers admin     http://$CONSUMERS_ADMIN/metrics   ($CONSUMERS instances, admin ports two apart)
  commerce-api admin  http://$API_ADMIN/metrics
  cluster view        http://$API_ADMIN/api/v1/cluster   (or: DATABASE_URL='$db_url' go run ./cmd/pipelinectl cluster)
  $kafka_label$brokers
  PostgreSQL          $db_url
  Redis               $redis_url
  logs                $STATE/logs/

Try (or use the live page's form):
  curl -s -XPOST localhost:8080/api/v1/products -H 'Content-Type: application/json' -d '{"name":"Keyboard","price":50000,"stock":3}'
  curl -s -XPOST localhost:8080/api/v1/products/1/likes -H 'X-User-ID: alice'
  curl -s localhost:8080/api/v1/products/1 -H 'X-User-ID: bob'
  curl -s -XPOST localhost:8080/api/v1/orders -H 'X-User-ID: bob' -H 'Content-Type: application/json' -d '{"items":[{"productId":1,"quantity":2}]}'
  curl -s -XPOST localhost:8080/api/v1/orders/1/payments -H 'X-User-ID: bob'
  curl -s 'localhost:8080/api/v1/products?sort=likes_desc'

MSG

# Run until interrupted, or until a process dies on its own.
set +e
wait -n "$kafka_pid" "${pids[@]}"
status=$?
log "a process exited (status $status); see $STATE/logs/"
exit "$status"
