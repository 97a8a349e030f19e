#!/usr/bin/env python3
"""Multi-node stop latency (issue 23): two wrappers joined by --run-id on one SQLite ledger; a
SIGTERM trips node-a (or on --ledger, a PostgreSQL one), and node-b must stop by the run's stop order within one --sync of the
trip (it takes the order at its next heartbeat). Prints, per --sync, the median and the worst
delay from node-a's trip to node-b's exit over a few rounds, beside the goal.

Usage: multi_node_bench.py SPENDCAP [--rounds 3] [--syncs 1s,2s] [--ledger postgresql://...]
"""
import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

SLEEPER = "import sys, time; open(sys.argv[1], 'w').close(); time.sleep(300)"


def wait_for(path, bound):
    deadline = time.monotonic() + bound
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise RuntimeError("%s did not appear within %d s" % (path, bound))
        time.sleep(0.02)


def one_round(spendcap, tmp, sync, index, ledger):
    env = dict(os.environ, XDG_DATA_HOME=os.path.join(tmp, "data"),
               XDG_CONFIG_HOME=os.path.join(tmp, "config"), XDG_STATE_HOME=os.path.join(tmp, "state"))
    run_id = "bench-%d" % index
    nodes = {}
    for node in ("node-a", "node-b"):
        started = os.path.join(tmp, "%s-%d.started" % (node, index))
        nodes[node] = (subprocess.Popen(
            [spendcap, "run", "--run-id", run_id, "--rate", "36", "--budget", "100",
             "--sync", sync, "--grace", "0s", "--kill-after", "1s"] +
            (["--ledger", ledger] if ledger else []) + [
             "--status-file", os.path.join(tmp, "%s-%d.json" % (node, index)), "--",
             "python3", "-c", SLEEPER, started],
            env=dict(env, SLURMD_NODENAME=node), stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL), started)
    for process, started in nodes.values():
        wait_for(started, 60)
    # A heartbeat or two in, so that node-b's next one is anywhere within its sync.
    time.sleep(1.3)
    tripped = time.monotonic()
    nodes["node-a"][0].send_signal(signal.SIGTERM)
    nodes["node-b"][0].wait(timeout=120)
    delay = time.monotonic() - tripped
    nodes["node-a"][0].wait(timeout=60)
    with open(os.path.join(tmp, "node-b-%d.json" % index)) as f:
        reason = json.load(f)["reason"]
    return delay, reason


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("spendcap")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--syncs", default="1s,2s")
    parser.add_argument("--ledger", default="", help="a PostgreSQL url (default: SQLite)")
    args = parser.parse_args()
    tmp = tempfile.mkdtemp(prefix="spendcap-multi-node-bench-")
    try:
        index = 0
        for sync in args.syncs.split(","):
            delays, reasons = [], set()
            for _ in range(args.rounds):
                delay, reason = one_round(args.spendcap, tmp, sync, index, args.ledger)
                index += 1
                delays.append(delay)
                reasons.add(reason)
            seconds = float(sync.rstrip("s"))
            print("  --sync %s: node-b stopped %.2f s (median), %.2f s (worst of %d) after node-a's "
                  "trip, by %s; goal: within %s (+ its kill path)%s"
                  % (sync, statistics.median(delays), max(delays), len(delays),
                     ",".join(sorted(reasons)), sync,
                     "" if max(delays) <= seconds + 1.5 else " (MISSED)"))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
