#!/usr/bin/env bash
# compose-smoke: the first-run check a user with Docker can run (it is not
# part of `make test`, which runs where no Docker engine is). From a fresh
# project and fresh volumes it brings the whole compose stack up and waits
# for every health check, walks through the README's requests, waits for the
# aggregates to change, stops the leading outbox-relay and checks the other
# replica takes the lease and publishes, then removes everything (down -v).
#
# Host ports are moved (SMOKE_PORT_BASE, default 28000) so that it runs next
# to `make dev` or a stack already up. Needs docker with compose v2 and curl.
set -euo pipefail
cd "$(dirname "$0")/.."

project=${SMOKE_PROJECT:-commerce-smoke}
base=${SMOKE_PORT_BASE:-28000}
export POSTGRES_HOST_PORT=$((base + 32)) REDIS_HOST_PORT=$((base + 79)) KAFKA_HOST_PORT=$((base + 94))
export API_HOST_PORT=$((base + 80)) CONSUMERS_HOST_PORT=$((base + 82))
api=http://127.0.0.1:$API_HOST_PORT/api/v1
compose=(docker compose -p "$project")

log() { printf '[smoke] %s\n' "$*" >&2; }
die() { log "FAIL: $*"; "${compose[@]}" logs --no-color --tail 50 >&2 || true; exit 1; }
cleanup() { log "down -v"; "${compose[@]}" down -v --remove-orphans >/dev/null 2>&1 || true; }
trap cleanup EXIT

# json_post path user body: POST as the API requires (application/json).
json_post() {
  curl -fsS -X POST "$api$1" -H 'Content-Type: application/json' ${2:+-H "X-User-ID: $2"} ${3:+-d "$3"}
}
# field name json: one integer field of a flat JSON object.
field() { sed -n "s/.*\"$1\":\([0-9-]*\).*/\1/p" <<<"$2" | head -n1; }
# wait_for what seconds command...: retry until the command succeeds.
wait_for() {
  local what=$1 secs=$2; shift 2
  for _ in $(seq 1 $((secs * 2))); do
    "$@" && return 0
    sleep 0.5
  done
  die "$what (after ${secs}s)"
}
psql_c() { "${compose[@]}" exec -T postgres psql -U commerce -d commerce -tAc "$1"; }

cleanup
log "up --wait from fresh volumes"
"${compose[@]}" up --build --detach --wait --wait-timeout 300 || die "the stack did not become healthy"

log "walk-through"
product=$(json_post /products "" '{"name":"Keyboard","price":50000,"stock":3}') || die "create product"
id=$(field id "$product")
json_post "/products/$id/likes" alice >/dev/null || die "like"
curl -fsS "$api/products/$id" -H 'X-User-ID: bob' >/dev/null || die "view"
order=$(json_post /orders bob "{\"items\":[{\"productId\":$id,\"quantity\":3}]}") || die "order"
json_post "/orders/$(field id "$order")/payments" bob >/dev/null || die "payment"

aggregated() { # likes sales views
  local p
  p=$(curl -fsS "$api/products/$id") || return 1
  local views
  views=$(field viewCount "$p")
  [ "$(field likeCount "$p")" = "$1" ] && [ "$(field salesCount "$p")" = "$2" ] && [ "${views:-0}" -ge "$3" ]
}
wait_for "the aggregates of product $id" 60 aggregated 1 3 1
log "aggregates changed: 1 like, 3 sold, viewed"

log "stopping the leading outbox-relay"
lease() { psql_c "SELECT owner || ' ' || token FROM relay_lease WHERE lease_until > now()"; }
has_lease() { [ -n "$(lease)" ]; }
wait_for "a relay holding the lease" 30 has_lease
read -r owner token <<<"$(lease)"
# The node id is host-pid, and a container's host name is its short id.
leader=${owner%-*}
"${compose[@]}" ps -q outbox-relay | grep -q "^$leader" || die "lease owner $owner is no outbox-relay container"
docker stop "$leader" >/dev/null
taken_over() { local o t; read -r o t <<<"$(lease)"; [ -n "$o" ] && [ "$o" != "$owner" ] && [ "$t" -gt "$token" ]; }
wait_for "the other replica taking the lease" 60 taken_over
json_post "/products/$id/likes" carol >/dev/null || die "like after the takeover"
wait_for "a like published by the new leader" 60 aggregated 2 3 1
log "the other replica took over ($(lease)) and publishes"

log "OK"
