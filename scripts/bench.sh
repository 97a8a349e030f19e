#!/usr/bin/env bash
# Runs the benchmarks and prints the tables README.md quotes (issue 14): exec overhead against
# bare exec and `timeout` (SQLite, a webhook, PostgreSQL, and the variants of the breakdown), kill
# latency against the kernel's floor, spend overshoot and use, supervision cost at intervals 1 s and
# 100 ms, ledger throughput (SQLite and PostgreSQL), `budgets` and `report` over 1,000,000 runs.
# Builds first (scripts/setup.sh; SPENDCAP_BENCH_NO_SETUP=1 skips it and builds only the benchmarks).
# The kill benchmark needs root and a writable cgroup v2 hierarchy; PostgreSQL parts need the
# postgresql server package (a throwaway server on SPENDCAP_PG_PORT, stopped afterwards).
# Usage: scripts/bench.sh [--quick]
#   --quick: 30 overhead rounds, 10 s supervision windows, 1 kill round of 10 and 100 processes,
#            5 overshoot runs, 1 s ledger windows and 100,000 runs for the views (a few minutes).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${SPENDCAP_BENCH_NO_SETUP:-0}" != 1 ]; then ./scripts/setup.sh >/dev/null; fi
cmake --build build -j"${JOBS:-2}" --target spendcap exec_overhead ledger_bench report_bench >/dev/null

rounds=60 seconds=60 kill_runs=3 sizes=10,100,1000 overshoot_runs=20 ledger_seconds=3 runs=1000000
if [ "${1:-}" = "--quick" ]; then
  rounds=30 seconds=10 kill_runs=1 sizes=10,100 overshoot_runs=5 ledger_seconds=1 runs=100000
fi

echo "## Machine"
echo "$(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(uname -sr)," \
  "load average $(cut -d' ' -f1-3 /proc/loadavg) at the start, $(date -u +%Y-%m-%dT%H:%MZ)"
echo

pg_url=""
if [ -x /usr/lib/postgresql/15/bin/initdb ]; then
  ./scripts/pg-test-server.sh start >/dev/null
  trap './scripts/pg-test-server.sh stop >/dev/null' EXIT
  pg_url="$(eval "$(./scripts/pg-test-server.sh env)" && echo "$SPENDCAP_TEST_PG_URL")"
fi

echo "## Exec overhead"
python3 tests/bench/overhead_bench.py ./build/spendcap --runs "$rounds" ${pg_url:+--pg "$pg_url"}
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
if [ -n "$pg_url" ]; then
  ./build/tests/bench/ledger_bench --seconds "$ledger_seconds" --ledger "$pg_url"
fi
echo
echo "## Reports"
./build/tests/bench/report_bench --runs "$runs"
