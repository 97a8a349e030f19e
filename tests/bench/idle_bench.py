#!/usr/bin/env python3
"""What supervising an idle job costs (issue 41 item 1): `spendcap run --rate 1 --budget 100 --
sleep N` at the defaults, measured from outside over a window once the job runs:

  wakeups/s: voluntary context switches (each is a thread going to sleep, so one per wakeup) of
             every thread of spendcap and of its guard, from /proc/PID/task/*/status;
  CPU:       their CPU time (/proc/PID/task/*/schedstat) as a share of one core.

Counts of wakeups do not depend on the machine's load; CPU time does. With --baseline OTHER, the
two binaries run side by side (the same window, started together), --rounds times, so a load that
changes during the measurement falls on both alike. The load average is printed with each round.

As root the respawn-loop guard listens to the netlink process connector, which wakes spendcap for
every fork, exec and exit on the machine (its load, not the run's); --switches no-proc-connector
measures the ordinary user's detector instead (SPENDCAP_TEST_SWITCHES).

Usage: idle_bench.py SPENDCAP [--baseline OTHER] [--seconds 10] [--rounds 3] [--switches S]
                     [--figures FILE]
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(TESTS, "integration"))
from spendcap_testlib import children_of  # noqa: E402


def counts(pid):
    """(voluntary context switches, CPU ns) summed over the threads of `pid`; None once gone."""
    switches = cpu = 0
    try:
        for tid in os.listdir("/proc/%d/task" % pid):
            with open("/proc/%d/task/%s/status" % (pid, tid)) as f:
                for line in f:
                    if line.startswith("voluntary_ctxt_switches:"):
                        switches += int(line.split()[1])
            with open("/proc/%d/task/%s/schedstat" % (pid, tid)) as f:
                cpu += int(f.read().split()[0])
    except (OSError, ValueError):
        return None
    return switches, cpu


def start(spendcap, seconds, env):
    process = subprocess.Popen(
        [spendcap, "run", "--quiet", "--rate", "1", "--budget", "100", "--",
         "sleep", str(seconds)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        guards = children_of(process.pid)
        # The guard is spendcap's child; the run is under way once the guard's child is `sleep`.
        for guard in guards:
            for job in children_of(guard):
                try:
                    with open("/proc/%d/comm" % job) as f:
                        if f.read().strip() == "sleep":
                            return process, guard
                except OSError:
                    pass
        time.sleep(0.02)
    process.kill()
    raise SystemExit("%s: the job did not start within 30 s" % spendcap)


def measure(binaries, seconds, env):
    """One round: every binary's idle run side by side. Returns {binary: (wakeups/s, cpu %)}."""
    runs = [(b,) + start(b, seconds + 10, env) for b in binaries]
    # Past the start (admission, the first heartbeat's grant): the idle state is measured.
    time.sleep(1)
    before = {b: (time.monotonic(), counts(p.pid), counts(g)) for b, p, g in runs}
    time.sleep(seconds)
    after = {b: (time.monotonic(), counts(p.pid), counts(g)) for b, p, g in runs}
    result = {}
    for b, p, g in runs:
        (t0, s0, g0), (t1, s1, g1) = before[b], after[b]
        if None in (s0, g0, s1, g1):
            raise SystemExit("%s: the run ended during the window" % b)
        wall = t1 - t0
        wakeups = (s1[0] - s0[0]) + (g1[0] - g0[0])
        cpu_ns = (s1[1] - s0[1]) + (g1[1] - g0[1])
        result[b] = (wakeups / wall, 100.0 * cpu_ns / 1e9 / wall,
                     (s1[0] - s0[0]) / wall, (g1[0] - g0[0]) / wall)
        p.kill()
        p.wait()
    return result


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("spendcap")
    parser.add_argument("--baseline")
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--switches", default="")
    parser.add_argument("--figures")
    args = parser.parse_args()
    binaries = [args.spendcap] + ([args.baseline] if args.baseline else [])
    env = dict(os.environ)
    if args.switches:
        env["SPENDCAP_TEST_SWITCHES"] = args.switches
    tmp = tempfile.mkdtemp(prefix="spendcap-idle-bench.")
    env.setdefault("XDG_DATA_HOME", tmp)
    env.setdefault("XDG_STATE_HOME", tmp)
    env.setdefault("XDG_CONFIG_HOME", tmp)
    rows = {b: [] for b in binaries}
    print("### An idle run (`sleep`) at the defaults%s, %.0f s windows, %s side by side\n" % (
        " (switches: %s)" % args.switches if args.switches else "", args.seconds,
        " and ".join(binaries)))
    print("| round | load average | binary | wakeups/s (spendcap + guard) | spendcap | guard |"
          " CPU % of one core |")
    print("|---|---|---|---|---|---|---|")
    for round_ in range(args.rounds):
        load = open("/proc/loadavg").read().split()[0]
        for b, figures in measure(binaries, args.seconds, env).items():
            rows[b].append(figures)
            print("| %d | %s | %s | %.2f | %.2f | %.2f | %.3f%% |" % (
                round_ + 1, load, b, figures[0], figures[2], figures[3], figures[1]))
    print()
    for b in binaries:
        print("%s: median %.2f wakeups/s, %.3f%% of a core" % (
            b, statistics.median(r[0] for r in rows[b]), statistics.median(r[1] for r in rows[b])))
    if args.figures:
        with open(args.figures, "a") as out:
            out.write("idle_wakeups_per_s=%.3f\n" % statistics.median(r[0] for r in rows[binaries[0]]))
            out.write("idle_cpu_percent=%.4f\n" % statistics.median(r[1] for r in rows[binaries[0]]))


if __name__ == "__main__":
    main()
