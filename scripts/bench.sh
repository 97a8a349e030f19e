#!/usr/bin/env bash
# Runs the benchmarks and prints the tables README.md quotes (issue 14): exec overhead against
# bare exec and `timeout` (SQLite, a webhook, PostgreSQL, and the variants of the breakdown), kill
# latency against the kernel's floor, spend overshoot and use, supervision cost at intervals 1 s and
# 100 ms, ledger throughput (SQLite and PostgreSQL), `budgets` and `report` over 1,000,000 runs.
# Builds first (scripts/setup.sh; SPENDCAP_BENCH_NO_SETUP=1 skips it and builds only the benchmarks).
# The kill benchmark needs root and a writable cgroup v2 hierarchy; PostgreSQL parts need the
# postgresql server package (a throwaway server on SPENDCAP_PG_PORT, stopped afterwards).
# Usage: scripts/bench.sh [--quick | --pg]
#   --quick: 30 overhead rounds, 10 s supervision windows, 1 kill round of 10 and 100 processes,
#            5 overshoot runs, 1 s ledger windows and 100,000 runs for the views (a few minutes).
#   --pg:    the PostgreSQL parts only, on the durable server (issue 23): a run's time against
#            SQLite's (20 rounds), heartbeats, pg_test_fsync, multi-node stops (a few minutes).
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-}
if [ "${SPENDCAP_BENCH_NO_SETUP:-0}" != 1 ]; then ./scripts/setup.sh >/dev/null; fi
targets="spendcap exec_overhead ledger_bench report_bench"
if [ "$mode" = "--pg" ]; then targets="spendcap ledger_bench"; fi
# shellcheck disable=SC2086 # the targets are words
cmake --build build -j"${JOBS:-2}" --target $targets >/dev/null

rounds=60 seconds=60 kill_runs=3 sizes=10,100,1000 overshoot_runs=20 ledger_seconds=3 runs=1000000
if [ "$mode" = "--quick" ]; then
  rounds=30 seconds=10 kill_runs=1 sizes=10,100 overshoot_runs=5 ledger_seconds=1 runs=100000
fi
if [ "$mode" = "--pg" ]; then rounds=20; fi

echo "## Machine"
echo "$(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(uname -sr)," \
  "load average $(cut -d' ' -f1-3 /proc/loadavg) at the start, $(date -u +%Y-%m-%dT%H:%MZ)"
echo

pg_url=""
pg_bin=/usr/lib/postgresql/15/bin
if [ "$mode" = "--pg" ]; then
  if [ ! -x $pg_bin/initdb ]; then
    echo "bench.sh --pg: no $pg_bin/initdb (install the postgresql server package)" >&2
    exit 1
  fi
  pg_url=durable-only  # the throwaway test server is not needed
  trap 'stop_durable' EXIT
elif [ -x $pg_bin/initdb ]; then
  ./scripts/pg-test-server.sh start >/dev/null
  trap './scripts/pg-test-server.sh stop >/dev/null; stop_durable' EXIT
  pg_url="$(eval "$(./scripts/pg-test-server.sh env)" && echo "$SPENDCAP_TEST_PG_URL")"
fi

# The durable server the PostgreSQL figures come from (issue 23): fsync and synchronous_commit on,
# scram-sha-256 over TCP on 127.0.0.1, the writers as a runner role (spendcap_runner). Its own
# directory and port ($SPENDCAP_PG_DURABLE_DIR, $SPENDCAP_PG_DURABLE_PORT), removed at the end.
durable_dir=${SPENDCAP_PG_DURABLE_DIR:-/tmp/spendcap-pg-durable.$(id -u)}
durable_port=${SPENDCAP_PG_DURABLE_PORT:-55433}
durable_owner_url="" durable_runner_url=""
as_postgres() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
pg_super() { if [ "$(id -u)" = 0 ]; then echo postgres; else id -un; fi; }
start_durable() {
  rm -rf "$durable_dir" && mkdir -p "$durable_dir"
  if [ "$(id -u)" = 0 ]; then chown postgres "$durable_dir"; fi
  local secret
  secret=$(od -An -tx1 -N12 /dev/urandom | tr -d ' \n')
  echo "$secret" | as_postgres tee "$durable_dir/pw" >/dev/null
  as_postgres $pg_bin/initdb -D "$durable_dir/data" -U "$(pg_super)" --auth-local=trust \
    --auth-host=scram-sha-256 --pwfile="$durable_dir/pw" -E UTF8 >/dev/null
  as_postgres setsid $pg_bin/pg_ctl -D "$durable_dir/data" -l "$durable_dir/server.log" -w -t 60 \
    start -o "-k $durable_dir -p $durable_port -c listen_addresses=127.0.0.1 -c fsync=on \
    -c synchronous_commit=on -c password_encryption=scram-sha-256 -c max_connections=200" >/dev/null
  # On stdin, not in argv: the password.
  echo "CREATE ROLE spendcap_runner NOLOGIN;
        CREATE ROLE bench_runner LOGIN PASSWORD '$secret' IN ROLE spendcap_runner;" |
    psql -X -q -h "$durable_dir" -p "$durable_port" -U "$(pg_super)" -d postgres >/dev/null
  # One password for both roles, through libpq's PGPASSWORD: never in a url or argv.
  export PGPASSWORD=$secret
  durable_owner_url="postgresql://$(pg_super)@127.0.0.1:$durable_port/postgres"
  durable_runner_url="postgresql://bench_runner@127.0.0.1:$durable_port/postgres"
}
stop_durable() {
  if [ -d "$durable_dir/data" ]; then
    as_postgres $pg_bin/pg_ctl -D "$durable_dir/data" -m fast -w stop >/dev/null 2>&1 || true
  fi
  rm -rf "$durable_dir"
}

if [ -n "$pg_url" ]; then
  start_durable
  ./build/spendcap ps --ledger "$durable_owner_url" >/dev/null  # the owner creates the schema
fi

pg_parts() {
  echo "### PostgreSQL on the durable server (fsync, synchronous_commit, scram over TCP; goal: >= 2,000 heartbeats/s at 32 writers, also on one hot team)"
  echo "load average $(cut -d' ' -f1-3 /proc/loadavg)"
  ./build/tests/bench/ledger_bench --seconds "$ledger_seconds" --ledger "$durable_owner_url" \
    --runner-ledger "$durable_runner_url"
  echo "load average $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "### pg_test_fsync on the durable server's filesystem (1 s per method)"
  (cd "$durable_dir" && as_postgres $pg_bin/pg_test_fsync -s 1 -f "$durable_dir/fsync.test" \
    | sed -n '/one 8kB write/,/^$/p')
  echo "### multi-node: one node's trip stops the others (goal: within one --sync)"
  python3 tests/bench/multi_node_bench.py ./build/spendcap --ledger "$durable_runner_url"
}

if [ "$mode" = "--pg" ]; then
  echo "## Exec overhead, SQLite against PostgreSQL (goal: PostgreSQL within 1.5x of SQLite)"
  echo "load average $(cut -d' ' -f1-3 /proc/loadavg)"
  python3 tests/bench/overhead_bench.py ./build/spendcap --runs "$rounds" --variants sqlite,pg \
    --pg "$durable_runner_url"
  echo "load average $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "## Ledger"
  pg_parts
  exit 0
fi

echo "## Exec overhead"
python3 tests/bench/overhead_bench.py ./build/spendcap --runs "$rounds" \
  ${durable_runner_url:+--pg "$durable_runner_url"}
echo "## Kill latency"
if [ "$(id -u)" -eq 0 ]; then
  python3 tests/bench/kill_bench.py ./build/spendcap --runs "$kill_runs" --sizes "$sizes"
else
  echo "(skipped: creating the floor's cgroup needs root)"
fi
echo "## Spend overshoot and use"
python3 tests/bench/overshoot_bench.py ./build/spendcap --runs "$overshoot_runs"
echo "## Supervision"
python3 tests/bench/supervision_bench.py ./build/spendcap --seconds "$seconds" --kill-runs 0
echo "## Ledger"
./build/tests/bench/ledger_bench --seconds "$ledger_seconds" --runs "$runs"
if [ -n "$durable_owner_url" ]; then pg_parts; fi
echo
echo "## Reports"
echo "goals (issue 23 item 3, over 1,000,000 runs, from the rollups): --by experiment <= 0.2 s," \
  "--by team --by experiment <= 0.3 s, the same table as a scan of every run (checked each pass);" \
  "load: $(cut -d' ' -f1-3 /proc/loadavg)"
./build/tests/bench/report_bench --runs "$runs"
