#!/usr/bin/env bash
# Runs the benchmarks and prints the tables README.md quotes: exec overhead, supervision cost, kill
# latency, ledger throughput and `budgets` over 1,000,000 runs. Builds first (scripts/setup.sh).
# Usage: scripts/bench.sh [--quick]   (--quick: fewer runs, a 10 s supervision window)
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh >/dev/null
cmake --build build -j"${JOBS:-2}" --target exec_overhead ledger_bench report_bench >/dev/null

runs=300 seconds=60 kill_runs=5
if [ "${1:-}" = "--quick" ]; then runs=50 seconds=10 kill_runs=2; fi

echo "## Exec overhead"
./build/tests/bench/exec_overhead ./build/spendcap "$runs"
echo
python3 tests/bench/supervision_bench.py ./build/spendcap --seconds "$seconds" --kill-runs "$kill_runs"
echo "## Ledger"
./build/tests/bench/ledger_bench
# The same heartbeats on PostgreSQL (a throwaway server, stopped afterwards).
if [ -x /usr/lib/postgresql/15/bin/initdb ]; then
  ./scripts/pg-test-server.sh start
  trap './scripts/pg-test-server.sh stop' EXIT
  (eval "$(./scripts/pg-test-server.sh env)" &&
    ./build/tests/bench/ledger_bench --ledger "$SPENDCAP_TEST_PG_URL")
fi
echo
echo "## Reports (issue 11)"
./build/tests/bench/report_bench
