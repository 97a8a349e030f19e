#!/usr/bin/env python3
"""Supervision cost and kill latency of spendcap on large real process trees.

  supervision: CPU time spendcap and its guard use while supervising a job with a 200-process tree
               for --seconds (default 60) at each --intervals (default 1s and 100ms) and the default sync,
               and their peak RSS.
               CPU is read from /proc/PID/task/*/schedstat (nanoseconds on CPU), sampled every
               second, from the moment the tree is ready to the last sample before the end.
  kill latency: from the trip to the last process of a 500-process tree (100 double-forked
               daemons, 100 nested) reaped, with --grace 0s --kill-after 0s; spendcap's own
               figure (status file: trip_to_empty_seconds), checked from outside: nothing survives.
               Runs with the run's cgroup (cgroup.kill) and with the parentage fallback.

Usage: supervision_bench.py SPENDCAP [--seconds 60] [--intervals 1s,100ms] [--kill-runs 5]
Prints markdown tables (the README quotes them).
"""
import argparse
import json
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
from spendcap_testlib import children_of  # noqa: E402


def cpu_ns(pid):
    total = 0
    try:
        for tid in os.listdir("/proc/%d/task" % pid):
            with open("/proc/%d/task/%s/schedstat" % (pid, tid)) as f:
                total += int(f.read().split()[0])
    except OSError:
        return None
    return total


def status_kb(pid, field):
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def marked(marker):
    needle = ("SPENDCAP_BENCH_MARKER=%s" % marker).encode()
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open("/proc/%s/environ" % entry, "rb") as f:
                    if needle in f.read().split(b"\0"):
                        with open("/proc/%s/stat" % entry, "rb") as s:
                            text = s.read()
                        if chr(text[text.rindex(b")") + 2]) not in "ZX":
                            found.append(int(entry))
            except OSError:
                pass
    return found


def wait_for(path, timeout):
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise SystemExit("timed out waiting for " + path)
        time.sleep(0.01)


def supervision(spendcap, seconds, env, tmp, interval):
    ready = os.path.join(tmp, "ready-sup-" + interval)
    process = subprocess.Popen(
        [spendcap, "run", "--quiet", "--rate", "1", "--budget", "100", "--interval", interval,
         "--", "python3",
         os.path.join(FIXTURES, "big_tree.py"), "--count", "200", "--seconds", str(seconds),
         "--ready", ready], env=env)
    wait_for(ready, 60)
    guard = [pid for pid in children_of(process.pid)][0]
    start = (time.monotonic(), cpu_ns(process.pid), cpu_ns(guard))
    last = start
    hwm = (0, 0)
    rss = (0, 0)
    while process.poll() is None:
        sample = (time.monotonic(), cpu_ns(process.pid), cpu_ns(guard))
        if None not in sample:
            last = sample
            hwm = (status_kb(process.pid, "VmHWM") or hwm[0], status_kb(guard, "VmHWM") or hwm[1])
            rss = (status_kb(process.pid, "VmRSS") or rss[0], status_kb(guard, "VmRSS") or rss[1])
        time.sleep(1)
    wall = last[0] - start[0]
    spendcap_cpu = (last[1] - start[1]) / 1e9
    guard_cpu = (last[2] - start[2]) / 1e9
    print("### Supervision cost: a 200-process tree for %.0f s (interval %s, sync 5s)\n"
          % (wall, interval))
    print("| process | CPU seconds | % of one core | peak RSS (VmHWM) | RSS |")
    print("|---|---|---|---|---|")
    print("| spendcap (supervisor) | %.4f | %.4f%% | %.1f MB | %.1f MB |" % (
        spendcap_cpu, 100 * spendcap_cpu / wall, hwm[0] / 1024, rss[0] / 1024))
    print("| guard | %.4f | %.4f%% | %.1f MB | %.1f MB |" % (
        guard_cpu, 100 * guard_cpu / wall, hwm[1] / 1024, rss[1] / 1024))
    print("| both | %.4f | %.4f%% | | |\n" % (spendcap_cpu + guard_cpu,
                                              100 * (spendcap_cpu + guard_cpu) / wall))


def kill_latency(spendcap, runs, env, tmp):
    print("### Kill latency: trip to the last of 500 processes reaped (grace 0s, kill-after 0s)\n")
    print("| tree tracking | runs | median ms | max ms | survivors |")
    print("|---|---|---|---|---|")
    for mode, switches in (("cgroup (cgroup.kill)", ""), ("parentage (fallback)", "no-cgroup")):
        latencies, survivors = [], 0
        for run in range(runs):
            marker = uuid.uuid4().hex
            run_env = dict(env, SPENDCAP_BENCH_MARKER=marker)
            if switches:
                run_env["SPENDCAP_TEST_SWITCHES"] = switches
            ready = os.path.join(tmp, "ready-%s" % marker)
            status = os.path.join(tmp, "status-%s.json" % marker)
            # 3600/h is 1/s; the reserve is 1 s (reaping slack), so it trips at 9 s: after the
            # tree is built.
            subprocess.run(
                [spendcap, "run", "--quiet", "--rate", "3600", "--budget", "10", "--grace", "0s",
                 "--kill-after", "0s", "--status-file", status, "--", "python3",
                 os.path.join(FIXTURES, "big_tree.py"), "--count", "500", "--daemons", "100",
                 "--nested", "100", "--ready", ready],
                env=run_env, stderr=subprocess.DEVNULL)
            with open(ready) as f:
                built = int(f.read())
            if built != 500:
                raise SystemExit("the tree had %d processes, not 500" % built)
            with open(status) as f:
                outcome = json.load(f)
            latencies.append(outcome["trip_to_empty_seconds"] * 1000)
            survivors += len(marked(marker))
        print("| %s | %d | %.1f | %.1f | %d |" % (mode, runs, statistics.median(latencies),
                                                   max(latencies), survivors))
    print()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("spendcap")
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--intervals", default="1s,100ms")
    parser.add_argument("--kill-runs", type=int, default=5)
    args = parser.parse_args()
    tmp = tempfile.mkdtemp(prefix="spendcap-bench-")
    env = dict(os.environ, XDG_DATA_HOME=tmp, XDG_STATE_HOME=tmp, XDG_CONFIG_HOME=tmp, TMPDIR=tmp)
    env.pop("SPENDCAP_POLICY", None)
    try:
        if args.seconds > 0:
            for interval in args.intervals.split(","):
                supervision(os.path.abspath(args.spendcap), args.seconds, env, tmp, interval)
        if args.kill_runs > 0:
            kill_latency(os.path.abspath(args.spendcap), args.kill_runs, env, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
