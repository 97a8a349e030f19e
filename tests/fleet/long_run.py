#!/usr/bin/env python3
"""The long run (issue 33 item 5): one `spendcap run` supervising a churning tree of about 200
processes (churn.py) for --minutes, its RSS and CPU sampled every minute (--every), so that a
leak or a cost that grows with the tree's history shows. Its own ledger (SQLite in a fresh XDG
home); the supervisor's and the guard's VmRSS and CPU seconds, the tree's size and the machine's
load are written as JSON lines to --out, and a summary at the end.

    nice tests/fleet/long_run.py --minutes 30 --out /tmp/long_run.jsonl
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
TICK = os.sysconf("SC_CLK_TCK")


def stat(pid):
    with open("/proc/%d/stat" % pid, "rb") as f:
        fields = f.read().rsplit(b")", 1)[1].split()
    return fields  # fields[0] is the state


def cpu_seconds(pid):
    fields = stat(pid)
    return (int(fields[11]) + int(fields[12])) / TICK


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def parents():
    """{pid: parent pid} of every process, from one scan of /proc."""
    found = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                found[int(entry)] = int(stat(int(entry))[1])
            except (OSError, ValueError, IndexError):
                pass
    return found


def children_of(pid, table=None):
    return [p for p, parent in (table or parents()).items() if parent == pid]


def tree_size(root):
    table = parents()
    below = {}
    for pid, parent in table.items():
        below.setdefault(parent, []).append(pid)
    size, todo = 0, [root]
    while todo:
        for child in below.get(todo.pop(), []):
            size += 1
            todo.append(child)
    return size


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--minutes", type=float, default=30)
    parser.add_argument("--every", type=float, default=60)
    parser.add_argument("--processes", type=int, default=200)
    parser.add_argument("--out", default="/tmp/spendcap-long-run.jsonl")
    parser.add_argument("--spendcap", default=os.environ.get("SPENDCAP_BIN") or
                        os.path.join(REPO, "build", "spendcap"))
    args = parser.parse_args()
    home = tempfile.mkdtemp(prefix="spendcap-long-run-")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPENDCAP_")}
    for name in ("data", "state", "config"):
        os.mkdir(os.path.join(home, name))
        env["XDG_%s_HOME" % name.upper()] = os.path.join(home, name)
    spendcap = subprocess.Popen(
        [args.spendcap, "run", "--team", "long", "--rate", "1", "--budget", "100", "--quiet",
         "--", sys.executable, os.path.join(HERE, "churn.py"), str(args.processes)],
        env=env, cwd=home, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        stderr=open(os.path.join(home, "spendcap.err"), "w"))
    samples = []
    out = open(args.out, "w")
    began = time.time()
    end = began + args.minutes * 60
    last_cpu = None
    try:
        time.sleep(min(args.every, 30))
        while True:
            if spendcap.poll() is not None:
                out.write(json.dumps({"ended_early": spendcap.returncode}) + "\n")
                break
            guards = children_of(spendcap.pid)
            guard = guards[0] if guards else None
            cpu = cpu_seconds(spendcap.pid)
            sample = {"minute": round((time.time() - began) / 60, 2),
                      "supervisor_rss_kib": rss_kib(spendcap.pid),
                      "supervisor_cpu_s": round(cpu, 2),
                      "cpu_s_per_min": None if last_cpu is None else
                      round((cpu - last_cpu[0]) / ((time.time() - last_cpu[1]) / 60), 3),
                      "guard_rss_kib": rss_kib(guard) if guard else None,
                      "guard_cpu_s": round(cpu_seconds(guard), 2) if guard else None,
                      "tree": tree_size(guard) if guard else None,
                      "load1": os.getloadavg()[0]}
            last_cpu = (cpu, time.time())
            samples.append(sample)
            out.write(json.dumps(sample) + "\n")
            out.flush()
            if time.time() >= end:
                break
            # Every --every seconds from the start, whatever a sample took.
            following = began + args.every * (int((time.time() - began) / args.every) + 1)
            time.sleep(max(0, min(following, end) - time.time()))
    finally:
        spendcap.send_signal(signal.SIGTERM)
        try:
            spendcap.wait(timeout=60)
        except subprocess.TimeoutExpired:
            spendcap.kill()
    rates = [s["cpu_s_per_min"] for s in samples if s["cpu_s_per_min"] is not None]
    rss = [s["supervisor_rss_kib"] for s in samples]
    summary = {"summary": True, "minutes": round((time.time() - began) / 60, 1),
               "samples": len(samples), "rss_kib_first": rss[0] if rss else None,
               "rss_kib_last": rss[-1] if rss else None, "rss_kib_max": max(rss) if rss else None,
               "cpu_s_per_min_min": min(rates) if rates else None,
               "cpu_s_per_min_max": max(rates) if rates else None,
               "tree_min": min((s["tree"] or 0) for s in samples) if samples else None,
               "tree_max": max((s["tree"] or 0) for s in samples) if samples else None,
               "exit": spendcap.returncode}
    out.write(json.dumps(summary) + "\n")
    out.close()
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
