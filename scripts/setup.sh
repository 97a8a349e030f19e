#!/usr/bin/env bash
# Sets up spendcap on Debian 12: installs the packages it needs (idempotent: apt runs only when one
# is missing, `apt-get update` first), then configures and builds Release into build/.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  build-essential cmake pkg-config git ca-certificates
  libboost1.81-dev libboost-filesystem1.81-dev nlohmann-json3-dev libcli11-dev
  libsqlite3-dev libpq-dev doctest-dev
  libcurl4-openssl-dev  # <curl/curl.h> for webhooks (libcurl is dlopened, never linked)
  python3 python3-jsonschema sqlite3 procps util-linux passwd
)
# The tests' real PyTorch job (tests/integration/test_torch.py): only when tests are run.
# clang's libFuzzer and sanitizer runtimes are in libclang-rt-14-dev, which clang only recommends
# (and --no-install-recommends skips).
if [ "${SPENDCAP_SETUP_TESTS:-0}" = 1 ]; then packages+=(python3-torch clang libclang-rt-14-dev); fi
# Issue 13's tests: man(1) renders spendcap(1), YAML for the Kubernetes manifest, a real Slurm.
if [ "${SPENDCAP_SETUP_TESTS:-0}" = 1 ]; then
  # file(1): `cpack -G DEB` reads each binary's type with it for the package's shared-library deps.
  packages+=(man-db groff-base python3-yaml slurm-wlm munge file)
fi
# The PostgreSQL ledger's tests run a throwaway server (scripts/pg-test-server.sh) and, beside it,
# a pgbouncer that the suite also runs through; ip(8) makes the network namespaces of its
# many-hosts test.
if [ "${SPENDCAP_SETUP_TESTS:-0}" = 1 ]; then
  packages+=(postgresql postgresql-client pgbouncer iproute2)
fi
# The metrics test (tests/integration/test_metrics.py): promtool, and a real node_exporter.
if [ "${SPENDCAP_SETUP_TESTS:-0}" = 1 ]; then packages+=(prometheus prometheus-node-exporter); fi
# setfacl: install-shared-runner.sh --metrics-reader gives node_exporter a default ACL
# (tests/integration/test_shared_metrics.py).
if [ "${SPENDCAP_SETUP_TESTS:-0}" = 1 ]; then packages+=(acl); fi
# The html report's test loads the page in a real headless browser (tests/integration/test_report.py).
if [ "${SPENDCAP_SETUP_TESTS:-0}" = 1 ]; then packages+=(chromium); fi

missing=()
for package in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" ||
    missing+=("$package")
done
if ((${#missing[@]})); then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "setup: installing ${missing[*]}"
  $sudo apt-get update
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y --no-install-recommends "${missing[@]}"
fi

# Warnings are errors on Debian 12's GCC, the platform this script is for, in the quick start's build as
# in scripts/test.sh's: the same configuration, so README's second command reuses the first's build
# instead of compiling everything again (on a fresh 2-core machine that was a second full build).
# SPENDCAP_CMAKE_ARGS: extra configure options (e.g. -DSPENDCAP_WERROR=OFF for another compiler).
# shellcheck disable=SC2086
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DSPENDCAP_WERROR=ON ${SPENDCAP_CMAKE_ARGS:-}
cmake --build build -j"${JOBS:-2}"
