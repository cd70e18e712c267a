# Shared by the project's scripts: make PostgreSQL and Redis available on
# this machine. Source it; every function logs to stderr and prints only its
# result on stdout.

log() { echo "$(basename "$0" .sh): $*" >&2; }
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
PG_MAX_CONNECTIONS=300

as_postgres() { (cd / && as_root runuser -u postgres -- "$@"); }

# local_postgres prints the URL of the machine's own server, starting,
# creating or installing it as needed.
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
  # The tests run several packages at once, each test with pools of its
  # own, and the benchmarks hold several 32-connection sides open: more than
  # the 100 connections of a default server. The setting needs a restart,
  # so it is applied when this script starts the server, never to one that
  # already runs (other work may be using it).
  local conf="/etc/postgresql/$ver/$cluster/conf.d/commerce-test.conf"
  if [ ! -f "$conf" ]; then
    echo "max_connections = $PG_MAX_CONNECTIONS" | as_root tee "$conf" >/dev/null
  fi
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
  echo "$PG_URL"
}

redis_answers() { # url
  command -v redis-cli >/dev/null 2>&1 || return 1
  [ "$(timeout 3 redis-cli -u "$1" ping 2>/dev/null)" = PONG ]
}

# local_redis prints the URL of a Redis on 127.0.0.1:6379, starting or
# installing it as needed.
local_redis() {
  local url="redis://127.0.0.1:6379/0"
  if redis_answers "$url"; then echo "$url"; return; fi
  command -v redis-server >/dev/null 2>&1 || apt_install redis-server
  log "starting Redis"
  mkdir -p /tmp/commerce-redis
  redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no \
    --dir /tmp/commerce-redis --logfile /tmp/commerce-redis/redis.log >&2
  for _ in $(seq 1 40); do redis_answers "$url" && break; sleep 0.25; done
  redis_answers "$url" || die "Redis started but $url does not answer"
  echo "$url"
}


# java_major prints the major version of the java on PATH (17 for 17.0.15),
# nothing when there is none.
java_major() {
  command -v java >/dev/null 2>&1 || return 0
  java -version 2>&1 | sed -n 's/.* version "\([0-9]*\).*/\1/p' | head -n 1
}

# kafka_tools makes sure Apache Kafka's broker can run here
# (internal/kafkabroker): a JDK 17 or newer, and Maven to resolve its jars
# from Maven Central. Debian 12 ships both.
kafka_tools() {
  local v; v=$(java_major)
  if [ -z "$v" ] || [ "$v" -lt 17 ]; then apt_install openjdk-17-jdk-headless; fi
  command -v mvn >/dev/null 2>&1 || apt_install maven
}

# kafka_jars resolves the broker's jars into their cache once (later calls
# return at once; concurrent ones wait for the first), so that no test or
# broker start waits on Maven Central.
kafka_jars() {
  (cd "$(dirname "${BASH_SOURCE[0]}")/.." && go run ./scripts/kafkajars >/dev/null) ||
    die "could not resolve Apache Kafka's jars (see the error above)"
}

# The Schemathesis release the API's contract test runs (TestSchemathesis in
# services/commerce-api/internal/app), from PyPI, in a virtual environment
# of its own under the user's cache.
SCHEMATHESIS_VERSION=4.32.5

# schemathesis_cli installs Schemathesis once (python3 -m venv, then pip)
# and prints the path of its CLI.
schemathesis_cli() {
  local venv="${XDG_CACHE_HOME:-$HOME/.cache}/commerce-pipeline/schemathesis-$SCHEMATHESIS_VERSION"
  local cli="$venv/bin/schemathesis"
  if [ ! -x "$cli" ] || [ "$("$cli" --version 2>/dev/null)" != "schemathesis, version $SCHEMATHESIS_VERSION" ]; then
    python3 -c 'import venv, ensurepip' 2>/dev/null || apt_install python3-venv
    log "installing Schemathesis $SCHEMATHESIS_VERSION into $venv"
    rm -rf "$venv"
    python3 -m venv "$venv" >&2
    "$venv/bin/pip" install --quiet --disable-pip-version-check "schemathesis==$SCHEMATHESIS_VERSION" >&2 ||
      die "could not install Schemathesis $SCHEMATHESIS_VERSION from PyPI"
  fi
  echo "$cli"
}
