#!/usr/bin/env bash
# A throwaway PostgreSQL server for tests: `start` or `stop`.
#
# start: initdb's a cluster under $KH_PG_STATE_DIR (default /tmp/kh-test-postgres), listening on
#        127.0.0.1:$KH_PG_PORT (default 55432) only, with trust auth (loopback, test data only),
#        creates database kh_test and prints `KH_TEST_POSTGRES_URL=...` as its last line.
#        Idempotent: an already running server is reused.
# stop:  stops the server this script started (pid file in the state dir), nothing else.
#
# Needs the Debian `postgresql` package (PostgreSQL 15 binaries in /usr/lib/postgresql/15/bin, or
# any version found there). initdb refuses to run as root, so as root the cluster runs as the
# `postgres` OS user (created by the package) via runuser.
set -euo pipefail

STATE_DIR="${KH_PG_STATE_DIR:-/tmp/kh-test-postgres}"
PORT="${KH_PG_PORT:-55432}"
DATA="$STATE_DIR/data"
LOG="$STATE_DIR/postgres.log"
URL="postgres://postgres@127.0.0.1:$PORT/kh_test"

pg_bin() {
  local dir
  for dir in /usr/lib/postgresql/15/bin $(find /usr/lib/postgresql -mindepth 2 -maxdepth 2 -name bin -type d 2>/dev/null | sort -rV); do
    if [ -x "$dir/initdb" ]; then echo "$dir"; return 0; fi
  done
  echo "postgres.sh: no PostgreSQL binaries under /usr/lib/postgresql/*/bin; install them: apt-get install -y postgresql" >&2
  return 1
}

as_owner() {
  if [ "$(id -u)" = 0 ]; then
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

start() {
  local bin
  bin="$(pg_bin)"
  mkdir -p "$STATE_DIR"
  if [ "$(id -u)" = 0 ]; then
    id postgres >/dev/null 2>&1 || { echo "postgres.sh: OS user 'postgres' missing (apt-get install -y postgresql creates it)" >&2; exit 1; }
    chown postgres: "$STATE_DIR"
  fi
  if [ -f "$DATA/postmaster.pid" ] && as_owner "$bin/pg_ctl" -D "$DATA" status >/dev/null 2>&1; then
    echo "postgres.sh: reusing the server already running in $DATA" >&2
  else
    if [ ! -f "$DATA/PG_VERSION" ]; then
      as_owner "$bin/initdb" -D "$DATA" -U postgres --auth=trust --encoding=UTF8 --locale=C >"$STATE_DIR/initdb.log" 2>&1 \
        || { cat "$STATE_DIR/initdb.log" >&2; exit 1; }
    fi
    # Loopback TCP only; the unix socket lives in the state dir, not in /var/run.
    as_owner "$bin/pg_ctl" -D "$DATA" -l "$LOG" -w -t 60 start \
      -o "-c listen_addresses=127.0.0.1 -c port=$PORT -c unix_socket_directories=$STATE_DIR -c max_connections=300 -c shared_buffers=64MB" \
      >/dev/null || { tail -n 30 "$LOG" >&2; exit 1; }
    head -n 1 "$DATA/postmaster.pid" >"$STATE_DIR/server.pid"
  fi
  for _ in $(seq 1 60); do
    "$bin/pg_isready" -q -h 127.0.0.1 -p "$PORT" && break
    sleep 0.5
  done
  if ! "$bin/psql" -h 127.0.0.1 -p "$PORT" -U postgres -d postgres -tAc "SELECT 1 FROM pg_database WHERE datname = 'kh_test'" | grep -q 1; then
    "$bin/psql" -h 127.0.0.1 -p "$PORT" -U postgres -d postgres -qc "CREATE DATABASE kh_test" >/dev/null
  fi
  echo "postgres.sh: PostgreSQL $("$bin/postgres" --version | awk '{print $3}') on 127.0.0.1:$PORT, data in $DATA" >&2
  echo "KH_TEST_POSTGRES_URL=$URL"
}

stop() {
  local bin
  bin="$(pg_bin)"
  if [ ! -f "$STATE_DIR/server.pid" ]; then
    echo "postgres.sh: nothing to stop (no $STATE_DIR/server.pid)" >&2
    return 0
  fi
  if [ -f "$DATA/postmaster.pid" ] && [ "$(head -n 1 "$DATA/postmaster.pid")" = "$(cat "$STATE_DIR/server.pid")" ]; then
    as_owner "$bin/pg_ctl" -D "$DATA" -m fast -w stop >/dev/null
  else
    echo "postgres.sh: the server of $STATE_DIR/server.pid is not running" >&2
  fi
  rm -f "$STATE_DIR/server.pid"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  *) echo "usage: $0 start|stop" >&2; exit 2 ;;
esac
