#!/usr/bin/env bash
# Runs every test: sets up and builds (scripts/setup.sh), then the unit and integration tests under
# CTest. Exits non-zero on the first failing build or any failing test.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
ctest --test-dir build --output-on-failure -j"${JOBS:-2}"
