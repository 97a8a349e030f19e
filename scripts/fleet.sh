#!/usr/bin/env bash
# The fleet test (issue 33; tests/fleet/fleet.py says what it does): hosts as network namespaces,
# concurrent runs on shared team budgets, faults of every kind from a seed, a history and a
# checker. As root, after a build (build/spendcap).
#
#   scripts/fleet.sh            the short fleet (2 hosts x 20, about 2 minutes; CTest's
#                               fleet.short runs the same)
#   scripts/fleet.sh --full     16 hosts x 64 concurrent runs for 10 minutes, every fault kind and
#                               12 more at random: a large machine's size (PostgreSQL needs about
#                               2,100 connections; 1,024 wrappers want more than 2 cores)
#   scripts/fleet.sh --soak     the short fleet over and over with new seeds until one fails
#   scripts/fleet.sh --long-run 30 minutes of one run supervising a churning tree of 200
# Anything after the mode goes to fleet.py (--hosts, --slots, --duration, --seed, --out, ...).
set -euo pipefail
cd "$(dirname "$0")/.."
fleet=tests/fleet/fleet.py
mode=${1:---short}
[ $# -gt 0 ] && shift
case "$mode" in
  --short) exec python3 "$fleet" --hosts 2 --slots 20 --duration 75 "$@" ;;
  --full)
    exec python3 "$fleet" --hosts 16 --slots 64 --duration 600 --sync 5 --horizon 30 \
      --random-faults 12 --tick 2 "$@" ;;
  --soak)
    round=0
    while true; do
      round=$((round + 1))
      seed=$RANDOM$RANDOM
      echo "fleet soak: round $round, seed $seed"
      python3 "$fleet" --hosts 2 --slots 20 --duration 75 --seed "$seed" \
        --out "/tmp/spendcap-fleet-soak" "$@" || { echo "fleet soak: seed $seed failed"; exit 1; }
    done ;;
  --long-run) exec python3 tests/fleet/long_run.py --minutes 30 "$@" ;;
  *) echo "usage: $0 [--short|--full|--soak|--long-run] [fleet.py options]" >&2; exit 125 ;;
esac
