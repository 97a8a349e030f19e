#!/usr/bin/env bash
# A throwaway PostgreSQL for the tests and benchmarks: `start` makes a cluster (initdb) under a
# fresh directory in /tmp and starts it (pg_ctl), listening on a socket in that directory and on
# 127.0.0.1:$SPENDCAP_PG_PORT (default 55432), trusting local connections (it holds nothing but
# test ledgers and goes away with `stop`). `env` prints the variables that point tests at it:
#
#   eval "$(scripts/pg-test-server.sh env)"   # SPENDCAP_TEST_PG_URL, PGHOST, PGPORT, PGUSER
#
# Run as root, the server runs as user postgres. The directory is $SPENDCAP_PG_DIR (default
# /tmp/spendcap-pg-test.$UID). `stop` stops it and removes the directory; both are idempotent.
# `halt` stops it keeping its data, and `start` then restarts it as it was (a server outage).
# $SPENDCAP_PG_LISTEN adds listen addresses (comma-separated) and $SPENDCAP_PG_TRUST a network
# (CIDR) whose connections it trusts: the many-hosts test reaches it from network namespaces.
# $SPENDCAP_PG_FSYNC=on makes it durable (the fleet test), $SPENDCAP_PG_WALDIR puts its WAL in
# that directory (initdb --waldir: a small disk to fill), $SPENDCAP_PG_MAX_CONNECTIONS sets
# max_connections (default 200) and $SPENDCAP_PG_OPTIONS adds server options ("-c name=value").
#
# Beside the server, `start` starts a pgbouncer (when /usr/sbin/pgbouncer is installed) in
# transaction pooling on 127.0.0.1:$SPENDCAP_PGBOUNCER_PORT (default: the server's port + 1000),
# trusting local connections and looking roles up in the server (auth_query), so that any role the
# tests create can log in through it; `env` then prints SPENDCAP_TEST_PGBOUNCER_URL. The tests'
# `.pgbouncer` variants run the PostgreSQL suite through it (tests/cmake/through_pgbouncer.sh).
# `halt` leaves it running (the server's outage, behind a pooler that stays up).
# SPENDCAP_PGBOUNCER=0 starts none; one that cannot start (its port taken) is reported, not fatal.
set -euo pipefail
bin=${SPENDCAP_PG_BIN:-/usr/lib/postgresql/15/bin}
dir=${SPENDCAP_PG_DIR:-/tmp/spendcap-pg-test.$(id -u)}
port=${SPENDCAP_PG_PORT:-55432}
bouncer=${SPENDCAP_PGBOUNCER_BIN:-/usr/sbin/pgbouncer}
bouncer_port=${SPENDCAP_PGBOUNCER_PORT:-$((port + 1000))}
as_server() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}
superuser() {
  if [ "$(id -u)" = 0 ]; then echo postgres; else id -un; fi
}
bouncer_running() {
  [ -f "$dir/pgbouncer.pid" ] && kill -0 "$(cat "$dir/pgbouncer.pid")" 2>/dev/null
}
# Transaction pooling: spendcap keeps no session state between transactions (its statements are
# unnamed, its advisory locks and settings transaction-scoped, no LISTEN, SET or temporary
# tables). The schema comes from the role's search_path (ALTER ROLE ... SET search_path): a url's
# `options` startup parameter is refused by pgbouncer 1.18.
start_bouncer() {
  [ -x "$bouncer" ] && [ "${SPENDCAP_PGBOUNCER:-1}" != 0 ] || return 0
  bouncer_running && return 0
  local super
  super=$(superuser)
  as_server tee "$dir/pgbouncer.ini" >/dev/null <<INI
[databases]
* = host=127.0.0.1 port=$port
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $bouncer_port
unix_socket_dir = $dir
auth_type = trust
auth_file = $dir/pgbouncer.users
auth_user = $super
pool_mode = transaction
max_client_conn = 1000
default_pool_size = 20
max_db_connections = 150
server_idle_timeout = 5
server_lifetime = 300
logfile = $dir/pgbouncer.log
pidfile = $dir/pgbouncer.pid
admin_users = $super
INI
  echo "\"$super\" \"\"" | as_server tee "$dir/pgbouncer.users" >/dev/null
  as_server "$bouncer" -d -q "$dir/pgbouncer.ini"
  for _ in $(seq 100); do
    bouncer_running && return 0
    sleep 0.1
  done
  # The server is up without it: the tests through pgbouncer then say they were skipped.
  echo "pg-test-server.sh: pgbouncer did not start on port $bouncer_port ($dir/pgbouncer.log)" >&2
}
stop_bouncer() {
  if bouncer_running; then
    local pid
    pid=$(cat "$dir/pgbouncer.pid")
    kill "$pid"
    for _ in $(seq 100); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
  fi
}
case "${1:-}" in
  start)
    if [ -f "$dir/data/postmaster.pid" ] && as_server "$bin/pg_ctl" -D "$dir/data" status >/dev/null 2>&1; then
      start_bouncer
      exit 0
    fi
    # A cluster left by `halt` is started again as it was (the outage tests); else a new one.
    if [ ! -f "$dir/data/PG_VERSION" ]; then
      rm -rf "$dir"
      mkdir -p "$dir"
      if [ "$(id -u)" = 0 ]; then chown postgres "$dir"; fi
      as_server "$bin/initdb" -D "$dir/data" -U "$(superuser)" --auth=trust -E UTF8 --no-sync \
        ${SPENDCAP_PG_WALDIR:+--waldir=$SPENDCAP_PG_WALDIR} >/dev/null
      if [ -n "${SPENDCAP_PG_TRUST:-}" ]; then
        echo "host all all $SPENDCAP_PG_TRUST trust" | as_server tee -a "$dir/data/pg_hba.conf" >/dev/null
      fi
    fi
    listen=127.0.0.1${SPENDCAP_PG_LISTEN:+,$SPENDCAP_PG_LISTEN}
    # setsid: the server outlives the shell that started it (and its job control).
    as_server setsid "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 start \
      -o "-k $dir -p $port -c listen_addresses=$listen -c fsync=${SPENDCAP_PG_FSYNC:-off} \
         -c max_connections=${SPENDCAP_PG_MAX_CONNECTIONS:-200} ${SPENDCAP_PG_OPTIONS:-}" >/dev/null
    start_bouncer
    ;;
  halt)
    # Stops the server, keeping its data: `start` brings it back as it was.
    as_server "$bin/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null
    ;;
  stop)
    stop_bouncer
    if [ -d "$dir/data" ]; then
      as_server "$bin/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null 2>&1 || true
    fi
    rm -rf "$dir"
    ;;
  env)
    echo "export PGHOST=$dir PGPORT=$port PGUSER=$(superuser) PGDATABASE=postgres"
    echo "export SPENDCAP_TEST_PG_URL=postgresql://$(superuser)@127.0.0.1:$port/postgres"
    echo "export SPENDCAP_TEST_PG_DIR=$dir SPENDCAP_TEST_PG_BIN=$bin"
    if bouncer_running; then
      echo "export SPENDCAP_TEST_PGBOUNCER_URL=postgresql://$(superuser)@127.0.0.1:$bouncer_port/postgres"
    fi
    ;;
  *)
    echo "usage: $0 start|halt|stop|env" >&2
    exit 125
    ;;
esac
