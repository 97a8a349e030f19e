#!/usr/bin/env python3
"""Kill latency against its floor, measured in the same run so that the ratio holds on any machine.

For trees of 10, 100 and 1,000 processes (a fifth of them double-forked daemons in their own
sessions, a tenth nested as grandchildren; tests/fixtures/big_tree.py), each round measures:

  floor:       the tree in a cgroup this benchmark creates; from writing `cgroup.kill` directly to
               the last process reaped by this process (a subreaper, so the orphans are its own).
  spendcap:    `spendcap run --grace 0s --kill-after 0s` tripped by its budget once the tree is
               built; spendcap's own figure (the status file's trip_to_empty_seconds: from the trip
               to the last process reaped), with the run's cgroup and with the parentage fallback
               (SPENDCAP_TEST_SWITCHES=no-cgroup). Survivors are counted from outside.
  timeout:     `timeout -s KILL` on the same tree: the escaped daemons it leaves alive are counted
               (then killed by this benchmark).

Prints, per size, the medians and the ratio of the medians to the floor (goal: within 1.2x).
Usage: kill_bench.py SPENDCAP [--runs 3] [--sizes 10,100,1000]   (needs root and cgroup v2)
"""
import argparse
import ctypes
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(TESTS, "fixtures")
sys.path.insert(0, os.path.join(TESTS, "integration"))
from spendcap_testlib import MARKER_VARIABLE, kill_marked, processes_with_marker  # noqa: E402

PR_SET_CHILD_SUBREAPER = 36


def cgroup_root():
    for line in open("/proc/self/mountinfo"):
        fields = line.split()
        separator = fields.index("-")
        if fields[separator + 1] == "cgroup2":
            return fields[4]
    raise SystemExit("no cgroup v2 mount")


def tree_argv(size, ready):
    return ["python3", os.path.join(FIXTURES, "big_tree.py"), "--count", str(size),
            "--daemons", str(size // 5), "--nested", str(size // 10), "--ready", ready]


def wait_for(path, timeout, process=None):
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        if time.monotonic() > deadline or (process and process.poll() is not None):
            raise SystemExit("the tree never became ready: " + path)
        time.sleep(0.005)


def reap_all():
    """Reaps children until there are none (this process is a subreaper)."""
    while True:
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            return


def floor_once(size, env, tmp, root):
    group = os.path.join(root, "spendcap-killbench-" + uuid.uuid4().hex[:12])
    os.mkdir(group)
    ready = os.path.join(tmp, "ready-" + uuid.uuid4().hex)
    procs = os.path.join(group, "cgroup.procs")

    def enter():
        with open(procs, "w") as f:
            f.write("0")

    try:
        started = time.monotonic()
        process = subprocess.Popen(tree_argv(size, ready), env=env, preexec_fn=enter)
        wait_for(ready, 120, process)
        built = time.monotonic() - started
        begin = time.monotonic()
        with open(os.path.join(group, "cgroup.kill"), "w") as f:
            f.write("1")
        reap_all()
        elapsed = time.monotonic() - begin
        with open(procs) as f:
            left = f.read().split()
        if left:
            raise SystemExit("the floor's cgroup still holds %d processes" % len(left))
        return elapsed * 1000, built
    finally:
        os.rmdir(group)


def spendcap_once(spendcap, size, env, tmp, switches, build_seconds):
    marker = uuid.uuid4().hex
    run_env = dict(env, **{MARKER_VARIABLE: marker})
    if switches:
        run_env["SPENDCAP_TEST_SWITCHES"] = switches
    ready = os.path.join(tmp, "ready-" + marker)
    status = os.path.join(tmp, "status-%s.json" % marker)
    # $1/s and a reserve of $1 (reaping slack): it trips at budget - 1 seconds, after the tree.
    budget = math.ceil(2 * build_seconds) + 3
    subprocess.run([spendcap, "run", "--quiet", "--rate", "3600", "--budget", str(budget),
                    "--grace", "0s", "--kill-after", "0s", "--status-file", status, "--"]
                   + tree_argv(size, ready), env=run_env, stderr=subprocess.DEVNULL)
    if not os.path.exists(ready):
        raise SystemExit("spendcap tripped before the tree of %d was built" % size)
    with open(status) as f:
        outcome = json.load(f)
    survivors = len(processes_with_marker(marker))
    kill_marked(marker)
    reap_all()
    return outcome["trip_to_empty_seconds"] * 1000, survivors


def timeout_once(size, env, tmp, build_seconds):
    marker = uuid.uuid4().hex
    ready = os.path.join(tmp, "ready-" + marker)
    limit = "%.1f" % (2 * build_seconds + 2)
    subprocess.run(["timeout", "-s", "KILL", limit] + tree_argv(size, ready),
                   env=dict(env, **{MARKER_VARIABLE: marker}))
    if not os.path.exists(ready):
        raise SystemExit("timeout fired before the tree of %d was built" % size)
    deadline = time.monotonic() + 10  # the killed ones become zombies of this subreaper
    survivors = processes_with_marker(marker)
    while time.monotonic() < deadline:
        reap = True
        while reap:
            try:
                reap = os.waitpid(-1, os.WNOHANG)[0] != 0
            except ChildProcessError:
                reap = False
        survivors = processes_with_marker(marker)
        if len(survivors) <= size // 5:  # at most the daemons
            break
        time.sleep(0.05)
    kill_marked(marker)
    reap_all()
    return len(survivors)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("spendcap")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--sizes", default="10,100,1000")
    args = parser.parse_args()
    spendcap = os.path.abspath(args.spendcap)
    if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise SystemExit("cannot become a subreaper")
    root = cgroup_root()
    tmp = tempfile.mkdtemp(prefix="spendcap-killbench-")
    env = dict(os.environ, XDG_DATA_HOME=tmp, XDG_STATE_HOME=tmp, XDG_CONFIG_HOME=tmp)
    env.pop("SPENDCAP_POLICY", None)
    print("### Kill latency against the kernel's floor (%d rounds per size, interleaved)\n"
          % args.runs)
    print("| processes (daemons) | floor: cgroup.kill + reap, ms | spendcap, cgroup, ms | ratio "
          "| spendcap, parentage, ms | ratio | survivors (spendcap) | `timeout -s KILL` survivors |")
    print("|---|---|---|---|---|---|---|---|")
    try:
        for size in [int(s) for s in args.sizes.split(",")]:
            floor, cgroup, parentage, survivors, timeout_left = [], [], [], 0, []
            for _ in range(args.runs):
                ms, built = floor_once(size, env, tmp, root)
                floor.append(ms)
                ms, left = spendcap_once(spendcap, size, env, tmp, "", built)
                cgroup.append(ms)
                survivors += left
                ms, left = spendcap_once(spendcap, size, env, tmp, "no-cgroup", built)
                parentage.append(ms)
                survivors += left
                timeout_left.append(timeout_once(size, env, tmp, built))
            f, c, p = (statistics.median(x) for x in (floor, cgroup, parentage))
            print("| %d (%d) | %.1f | %.1f | %.2fx | %.1f | %.2fx | %d | %s of %d |" % (
                size, size // 5, f, c, c / f, p, p / f, survivors,
                "/".join(str(n) for n in timeout_left), size // 5))
            sys.stdout.flush()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print()


if __name__ == "__main__":
    sys.exit(main())
