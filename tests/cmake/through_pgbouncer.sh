#!/usr/bin/env bash
# Runs a PostgreSQL test command through the test server's pgbouncer (scripts/pg-test-server.sh:
# SPENDCAP_TEST_PGBOUNCER_URL, transaction pooling) instead of the server directly: the pgbouncer
# url becomes SPENDCAP_TEST_PG_URL, the server's own stays in SPENDCAP_TEST_PG_DIRECT_URL, and
# SPENDCAP_TEST_PG_POOLER=1 tells the tests' helpers to name schemas by role, not by url options.
# Without a pgbouncer (or a server) it prints the skip marker (tests/CMakeLists.txt).
set -euo pipefail
if [ -z "${SPENDCAP_TEST_PG_URL:-}" ] || [ -z "${SPENDCAP_TEST_PGBOUNCER_URL:-}" ]; then
  echo "SPENDCAP_SKIPPED: no pgbouncer beside the test server (SPENDCAP_TEST_PGBOUNCER_URL unset:" \
    "install pgbouncer, then scripts/pg-test-server.sh start; eval \"\$(scripts/pg-test-server.sh env)\")"
  exit 0
fi
export SPENDCAP_TEST_PG_DIRECT_URL=$SPENDCAP_TEST_PG_URL
export SPENDCAP_TEST_PG_URL=$SPENDCAP_TEST_PGBOUNCER_URL SPENDCAP_TEST_PG_POOLER=1
exec "$@"
