#!/usr/bin/env python3
"""Exec overhead, paired: the wall time of a whole command (spawn to reaped) for bare `true`,
`timeout 100 true` and `spendcap run ... -- true` in several configurations, run interleaved
(one round runs every candidate once, in a fresh random order) so that the drift of a shared
machine hits all of them alike. For each spendcap variant it prints the median of the per-round
ratio to `timeout` in the same round and the median per-round difference in ms, which hold on a
loaded machine where absolute times do not.

Variants: the default (SQLite ledger, --isolation pid, the run's cgroup); a webhook configured (a
local endpoint answering 204; `finished` is not subscribed, so a run sends nothing, as by
default); a PostgreSQL ledger (--pg URL), and the same through a pooler (--pgbouncer URL: a
pgbouncer in front of that server, whose warm backends a run borrows instead of starting one);
and, for the breakdown, --isolation none, no cgroup
(SPENDCAP_TEST_SWITCHES=no-cgroup), no proc connector (the respawn guard's netlink socket), and the
ledger on tmpfs (/dev/shm).

With --floor FLOOR (tests/bench/floor.c, built as build/tests/bench/floor), the floor of a run's
guarantees joins the rounds: a durable admission and final row in a SQLite WAL ledger, a guard
fork, the job cloned into a fresh cgroup and PID namespace, exec, wait, the cgroup removed. It
needs root and a writable cgroup v2 hierarchy (the one spendcap's own cgroup is in); without them
it is left out, and says so.

With --before OLD_SPENDCAP, the older binary's twin of each chosen variant (the default, webhook
and PostgreSQL runs) joins the rounds (the same ledgers), for a paired before/after of a change.

Usage: overhead_bench.py SPENDCAP [--runs 30] [--pg postgresql://...] [--pgbouncer URL]
                         [--variants a,b,...] [--before OLD_SPENDCAP] [--floor FLOOR]
"""
import argparse
import http.server
import os
import random
import shutil
import statistics
import sys
import tempfile
import threading
import time


class Hook(http.server.BaseHTTPRequestHandler):
    received = 0

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        Hook.received += 1
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args):
        pass


def cgroup_v2_parent():
    """The writable cgroup v2 directory this process is in (as spendcap finds it: the cgroup2
    mount in /proc/self/mountinfo and the `0::` line of /proc/self/cgroup), or None."""
    mount = None
    with open("/proc/self/mountinfo") as lines:
        for line in lines:
            fields = line.split()
            tail = fields[fields.index("-") + 1:]
            if tail and tail[0] == "cgroup2":
                mount = fields[4]
                break
    if mount is None:
        return None
    with open("/proc/self/cgroup") as lines:
        relative = next((l.strip()[3:] for l in lines if l.startswith("0::")), None)
    if relative is None:
        return None
    path = os.path.normpath(mount + "/" + relative.lstrip("/"))
    return path if os.access(path, os.W_OK) else None


CPU_MS = {}  # candidate -> CPU ms of each run (user + system, the run's whole tree as reaped)


def run_once(argv, env, name=None):
    devnull = os.open(os.devnull, os.O_WRONLY)
    start = time.perf_counter()
    pid = os.posix_spawnp(argv[0], argv, env, file_actions=[
        (os.POSIX_SPAWN_DUP2, devnull, 1), (os.POSIX_SPAWN_DUP2, devnull, 2)])
    _, status, usage = os.wait4(pid, 0)
    elapsed = (time.perf_counter() - start) * 1000
    os.close(devnull)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit("%s exited %d" % (" ".join(argv), os.waitstatus_to_exitcode(status)))
    if name:
        CPU_MS.setdefault(name, []).append((usage.ru_utime + usage.ru_stime) * 1000)
    return elapsed


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("spendcap")
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--pg", default="")
    parser.add_argument("--pgbouncer", default="")
    parser.add_argument("--figures", default="",
                        help="append NAME=VALUE lines of the headline figures to this file")
    parser.add_argument("--before", default="")
    parser.add_argument("--floor", default="", help="tests/bench/floor.c built (root only)")
    parser.add_argument("--variants", default="sqlite,webhook,pg,isolation-none,no-cgroup,"
                        "no-proc-connector,tmpfs")
    args = parser.parse_args()
    spendcap = os.path.abspath(args.spendcap)
    tmp = tempfile.mkdtemp(prefix="spendcap-overhead-")
    shm = tempfile.mkdtemp(prefix="spendcap-overhead-", dir="/dev/shm")
    base = dict(os.environ, XDG_DATA_HOME=tmp, XDG_STATE_HOME=tmp, XDG_CONFIG_HOME=tmp)
    for name in ("SPENDCAP_POLICY", "SPENDCAP_TEST_SWITCHES", "SPENDCAP_LEDGER"):
        base.pop(name, None)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hook)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    hook_url = "http://127.0.0.1:%d/hook" % server.server_address[1]
    run = [spendcap, "run", "--quiet", "--rate", "1", "--budget", "100"]
    known = {
        "sqlite": ("spendcap, SQLite ledger", run + ["--", "true"], base),
        "webhook": ("spendcap, SQLite, a webhook (204)",
                    run + ["--webhook-env", "BENCH_HOOK", "--", "true"],
                    dict(base, BENCH_HOOK=hook_url)),
        "pg": ("spendcap, PostgreSQL ledger", run + ["--ledger", args.pg, "--", "true"], base),
        "pgbouncer": ("spendcap, PostgreSQL through pgbouncer",
                      run + ["--ledger", args.pgbouncer, "--", "true"], base),
        "version": ("spendcap --version", [spendcap, "--version"], base),
        "ps": ("spendcap ps", [spendcap, "ps"], base),
        "isolation-none": ("spendcap --isolation none", run + ["--isolation", "none", "--", "true"],
                           base),
        "no-cgroup": ("spendcap, no cgroup (parentage)", run + ["--", "true"],
                      dict(base, SPENDCAP_TEST_SWITCHES="no-cgroup")),
        "no-proc-connector": ("spendcap, no proc connector", run + ["--", "true"],
                              dict(base, SPENDCAP_TEST_SWITCHES="no-proc-connector")),
        "tmpfs": ("spendcap, ledger on tmpfs", run + ["--", "true"],
                  dict(base, XDG_DATA_HOME=shm, XDG_STATE_HOME=shm)),
    }
    if args.before:
        old = [os.path.abspath(args.before)] + run[1:]
        known["before"] = ("before: spendcap, SQLite ledger", old + ["--", "true"], base)
        known["before-webhook"] = ("before: spendcap, SQLite, a webhook (204)",
                                   old + ["--webhook-env", "BENCH_HOOK", "--", "true"],
                                   dict(base, BENCH_HOOK=hook_url))
        known["before-pg"] = ("before: spendcap, PostgreSQL ledger",
                              old + ["--ledger", args.pg, "--", "true"], base)
        # The old binary beside each variant chosen that it has.
        chosen = args.variants.split(",")
        for name, twin in (("sqlite", "before"), ("webhook", "before-webhook"),
                           ("pg", "before-pg")):
            if name in chosen:
                args.variants += "," + twin
    candidates = [("true", ["true"], base), ("timeout 100 true", ["timeout", "100", "true"], base)]
    if args.floor:
        parent = cgroup_v2_parent() if os.geteuid() == 0 else None
        if parent is None:
            print("(the floor left out: it needs root and a writable cgroup v2 hierarchy)\n")
        else:
            candidates.append(("floor (tests/bench/floor.c)",
                               [os.path.abspath(args.floor), os.path.join(tmp, "floor.db"),
                                parent, "true"], base))
    for name in args.variants.split(","):
        if name in ("pg", "before-pg") and not args.pg:
            continue
        if name == "pgbouncer" and not args.pgbouncer:
            continue
        candidates.append(known[name])
    times = {c[0]: [] for c in candidates}
    try:
        for c in candidates:  # warm the caches and create the ledgers
            run_once(c[1], c[2])
        for _ in range(args.runs):
            order = list(candidates)
            random.shuffle(order)
            for name, argv, env in order:
                times[name].append(run_once(argv, env, name))
    finally:
        server.shutdown()
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(shm, ignore_errors=True)
    timeout = times["timeout 100 true"]
    print("### Exec overhead: %d interleaved rounds, %d candidates in random order per round\n"
          % (args.runs, len(candidates)))
    print("| command | median ms | p25 ms | p75 ms | ratio to timeout (median, paired) "
          "| minus timeout (median, paired) | CPU ms (median) | CPU ratio to timeout |")
    print("|---|---|---|---|---|---|---|---|")
    timeout_cpu = CPU_MS["timeout 100 true"]
    figures = []
    for name, _, _ in candidates:
        ms = sorted(times[name])
        q = statistics.quantiles(ms, n=4)
        ratios = [a / b for a, b in zip(times[name], timeout)]
        diffs = [a - b for a, b in zip(times[name], timeout)]
        cpu = CPU_MS[name]
        cpu_ratios = [a / b for a, b in zip(cpu, timeout_cpu) if b > 0]
        print("| %s | %.2f | %.2f | %.2f | %.2f | %+.2f ms | %.1f | %s |" % (
            name, statistics.median(ms), q[0], q[2], statistics.median(ratios),
            statistics.median(diffs), statistics.median(cpu),
            "%.2f" % statistics.median(cpu_ratios) if cpu_ratios else "-"))
        figures.append((name, statistics.median(ms), statistics.median(ratios),
                        statistics.median(cpu), statistics.median(cpu) /
                        max(statistics.median(timeout_cpu), 1e-9)))
    sqlite = times.get("spendcap, SQLite ledger")
    if sqlite:
        print("\nAgainst the default run, paired (medians of per-round differences and ratios):")
        for name, _, _ in candidates[2:]:
            if name in ("spendcap, SQLite ledger", "floor (tests/bench/floor.c)"):
                continue
            diffs = [a - b for a, b in zip(times[name], sqlite)]
            ratios = [a / b for a, b in zip(times[name], sqlite)]
            print("- %s: %+.2f ms, %.2fx" % (name, statistics.median(diffs),
                                            statistics.median(ratios)))
    floor = times.get("floor (tests/bench/floor.c)")
    if floor:
        print("\nAgainst the floor, paired (medians of per-round ratios, wall and CPU):")
        floor_cpu = CPU_MS["floor (tests/bench/floor.c)"]
        for name, _, _ in candidates:
            if name.startswith("floor"):
                continue
            ratios = [a / b for a, b in zip(times[name], floor)]
            cpu = [a / b for a, b in zip(CPU_MS[name], floor_cpu) if b > 0]
            print("- %s: %.2fx wall, %s CPU" % (name, statistics.median(ratios),
                                               "%.2fx" % statistics.median(cpu) if cpu else "-"))
    print("\nwebhook deliveries received: %d (none expected: finished is not subscribed)\n"
          % Hook.received)
    if args.figures:
        keys = {"timeout 100 true": "timeout", "spendcap, SQLite ledger": "run_sqlite",
                "spendcap, PostgreSQL ledger": "run_pg", "floor (tests/bench/floor.c)": "floor",
                "spendcap, PostgreSQL through pgbouncer": "run_pgbouncer",
                "spendcap --version": "version", "spendcap ps": "ps"}
        with open(args.figures, "a") as out:
            for name, ms, ratio, cpu, cpu_ratio in figures:
                if name in keys:
                    k = keys[name]
                    out.write("%s_ms=%.2f\n%s_ratio=%.3f\n%s_cpu_ms=%.2f\n%s_cpu_ratio=%.3f\n"
                              % (k, ms, k, ratio, k, cpu, k, cpu_ratio))
            floor = times.get("floor (tests/bench/floor.c)")
            if sqlite and floor:
                floor_cpu = CPU_MS["floor (tests/bench/floor.c)"]
                sqlite_cpu = CPU_MS["spendcap, SQLite ledger"]
                out.write("run_vs_floor=%.3f\n" % statistics.median(
                    [a / b for a, b in zip(sqlite, floor)]))
                out.write("run_vs_floor_cpu=%.3f\n" % statistics.median(
                    [a / b for a, b in zip(sqlite_cpu, floor_cpu) if b > 0]))
            if sqlite:
                for name, key in (("spendcap, PostgreSQL ledger", "pg_vs_sqlite"),
                                  ("spendcap, PostgreSQL through pgbouncer",
                                   "pgbouncer_vs_sqlite")):
                    if name in times:
                        ratio = statistics.median(
                            [a / b for a, b in zip(times[name], sqlite)])
                        out.write("%s=%.3f\n" % (key, ratio))


if __name__ == "__main__":
    sys.exit(main())
