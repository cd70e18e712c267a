#!/usr/bin/env bash
# Makes a PostgreSQL and a Redis available for the tests and prints the
# environment to use them, as `export NAME=value` lines for eval:
#
#   eval "$(scripts/testenv.sh)"
#
# PostgreSQL: TEST_DATABASE_URL if it is set and answers; else nothing (the
# tests start a testcontainers container) when a Docker engine answers; else
# the machine's own server, started, created or installed as needed.
# Redis: the same, with TEST_REDIS_URL.
# Everything it does is logged to stderr; stdout carries only the exports.
set -euo pipefail

log() { echo "testenv: $*" >&2; }
die() { log "$*"; exit 1; }

docker_answers() {
  command -v docker >/dev/null 2>&1 && timeout 5 docker info >/dev/null 2>&1
}

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; elif command -v sudo >/dev/null 2>&1; then sudo "$@"; else
    die "need root to run: $* (or set TEST_DATABASE_URL / TEST_REDIS_URL)"
  fi
}

apt_updated=""
apt_install() {
  command -v apt-get >/dev/null 2>&1 || die "cannot install $* here: no apt-get"
  if [ -z "$apt_updated" ]; then as_root apt-get update -qq >&2; apt_updated=1; fi
  log "installing $*"
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq "$@" >&2
}

pg_answers() { # url
  command -v psql >/dev/null 2>&1 || return 1
  PGCONNECT_TIMEOUT=3 psql "$1" -tAc 'SELECT 1' >/dev/null 2>&1
}

# The role the tests use on the machine's own server. Creating it through the
# local socket as the postgres OS user works whether TCP uses trust or
# password authentication.
PG_ROLE=commerce_test
PG_URL="postgres://${PG_ROLE}:${PG_ROLE}@127.0.0.1:5432/postgres?sslmode=disable"

as_postgres() { (cd / && as_root runuser -u postgres -- "$@"); }

local_postgres() {
  if ! ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1; then
    apt_install postgresql
  fi
  command -v pg_lsclusters >/dev/null 2>&1 || apt_install postgresql-common
  if [ -z "$(pg_lsclusters -h 2>/dev/null)" ]; then
    local ver; ver=$(ls /usr/lib/postgresql | sort -V | tail -n 1)
    log "creating PostgreSQL $ver cluster"
    as_root pg_createcluster "$ver" main >&2
  fi
  read -r ver cluster port status _ < <(pg_lsclusters -h | head -n 1)
  [ "$port" = 5432 ] || die "PostgreSQL cluster $ver/$cluster listens on $port, want 5432; set TEST_DATABASE_URL"
  if [ "$status" != online ]; then
    log "starting PostgreSQL $ver/$cluster"
    as_root pg_ctlcluster --skip-systemctl-redirect "$ver" "$cluster" start >&2
  fi
  for _ in $(seq 1 60); do
    as_postgres pg_isready -q -h /var/run/postgresql -p "$port" && break
    sleep 0.5
  done
  as_postgres psql -q -p "$port" -v ON_ERROR_STOP=1 >&2 <<SQL
DO \$\$ BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '${PG_ROLE}') THEN
    CREATE ROLE ${PG_ROLE} LOGIN SUPERUSER PASSWORD '${PG_ROLE}';
  END IF;
END \$\$;
SQL
  pg_answers "$PG_URL" || die "PostgreSQL started but $PG_URL does not answer"
  echo "export TEST_DATABASE_URL='$PG_URL'"
}

redis_answers() { # url
  command -v redis-cli >/dev/null 2>&1 || return 1
  [ "$(timeout 3 redis-cli -u "$1" ping 2>/dev/null)" = PONG ]
}

local_redis() {
  local url="redis://127.0.0.1:6379/0"
  if redis_answers "$url"; then echo "export TEST_REDIS_URL='$url'"; return; fi
  command -v redis-server >/dev/null 2>&1 || apt_install redis-server
  log "starting Redis"
  mkdir -p /tmp/commerce-redis
  redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no \
    --dir /tmp/commerce-redis --logfile /tmp/commerce-redis/redis.log >&2
  for _ in $(seq 1 40); do redis_answers "$url" && break; sleep 0.25; done
  redis_answers "$url" || die "Redis started but $url does not answer"
  echo "export TEST_REDIS_URL='$url'"
}

# psql and redis-cli are needed to check what answers, even when the server is
# elsewhere.
if ! command -v psql >/dev/null 2>&1 && ! docker_answers; then apt_install postgresql-client; fi
if ! command -v redis-cli >/dev/null 2>&1 && ! docker_answers; then apt_install redis-tools; fi

if [ -n "${TEST_DATABASE_URL:-}" ] && pg_answers "$TEST_DATABASE_URL"; then
  echo "export TEST_DATABASE_URL='$TEST_DATABASE_URL'"
elif [ -n "${TEST_DATABASE_URL:-}" ] && ! command -v psql >/dev/null 2>&1; then
  echo "export TEST_DATABASE_URL='$TEST_DATABASE_URL'" # checked by the tests themselves
elif docker_answers; then
  log "Docker answers: the tests start PostgreSQL with testcontainers"
  echo "unset TEST_DATABASE_URL"
else
  [ -z "${TEST_DATABASE_URL:-}" ] || log "TEST_DATABASE_URL does not answer; using the machine's PostgreSQL"
  local_postgres
fi

if [ -n "${TEST_REDIS_URL:-}" ] && redis_answers "$TEST_REDIS_URL"; then
  echo "export TEST_REDIS_URL='$TEST_REDIS_URL'"
elif docker_answers; then
  log "Docker answers: the tests start Redis with testcontainers"
  echo "unset TEST_REDIS_URL"
else
  local_redis
fi
