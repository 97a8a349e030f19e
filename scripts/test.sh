#!/usr/bin/env bash
# Runs every test: sets up and builds (scripts/setup.sh), then the unit and integration tests under
# CTest. Exits non-zero on the first failing build or any failing test.
set -euo pipefail
cd "$(dirname "$0")/.."
# Warnings are errors (setup.sh's default), so the build stays free of them; the tests' own packages
# come too.
SPENDCAP_SETUP_TESTS=1 ./scripts/setup.sh
# A throwaway PostgreSQL for the PostgreSQL ledger's tests, stopped even when tests fail.
./scripts/pg-test-server.sh start
trap './scripts/pg-test-server.sh stop' EXIT
eval "$(./scripts/pg-test-server.sh env)"
ctest --test-dir build --output-on-failure -j"${JOBS:-2}"
