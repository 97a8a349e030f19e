#!/usr/bin/env python3
"""Spend overshoot and use: how close to its budget a run that trips ends, and how much of the
budget the job got to use.

  single runs: --runs runs (default 20) of each kind, 4 at a time, `--rate 3600 --budget 5
               --grace 1s --kill-after 1s` (a reserve of $3: the reaping slack and both waits):
               a job that dies on the first signal (`sleep`), and one that ignores every signal
               until SIGKILL (tests/fixtures/ignore_all.py). Final spend is the status file's.
  team budget: 8 runs at once of a team with a total budget of $10 (`spendcap budgets apply`), each
               at $0.10/s with no budget of its own and a claim horizon of 5 s (so that all 8 hold
               a ceiling; at the default 5 min the first run is granted the whole budget and the
               other 7 are refused, 120): the team's final spend (`spendcap budgets --json`)
               against its budget, and each run's exit code.

Prints final spend / budget (must be <= 1.0) and the share of the budget used.
Usage: overshoot_bench.py SPENDCAP [--runs 20]
"""
import argparse
import concurrent.futures
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import uuid

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(TESTS, "fixtures")
BUDGET = 5.0


def one_run(spendcap, env, tmp, kind):
    name = uuid.uuid4().hex
    status = os.path.join(tmp, "status-%s.json" % name)
    job = (["sleep", "1000"] if kind == "sleep" else
           ["python3", os.path.join(FIXTURES, "ignore_all.py"), os.path.join(tmp, "start-" + name)])
    result = subprocess.run([spendcap, "run", "--quiet", "--rate", "3600", "--budget", str(BUDGET),
                             "--grace", "1s", "--kill-after", "1s", "--status-file", status,
                             "--"] + job, env=env, stderr=subprocess.PIPE, text=True)
    if result.returncode != 124:
        raise SystemExit("a %s run exited %d: %s" % (kind, result.returncode, result.stderr))
    with open(status) as f:
        return json.load(f)


def team(spendcap, env, tmp):
    policy = os.path.join(tmp, "team-policy.json")
    with open(policy, "w") as f:
        json.dump({"budgets": {"team": {"bench": {"amount": 10, "period": "total"}}}}, f)
    subprocess.run([spendcap, "budgets", "apply", policy], env=env, check=True,
                   stdout=subprocess.DEVNULL)

    def member(_):
        return subprocess.run([spendcap, "run", "--quiet", "--team", "bench", "--rate", "360",
                               "--claim-horizon", "5s",
                               "--grace", "1s", "--kill-after", "1s", "--", "sleep", "1000"],
                              env=env, stderr=subprocess.PIPE, text=True).returncode

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        codes = list(pool.map(member, range(8)))
    report = subprocess.run([spendcap, "budgets", "--json"], env=env, check=True,
                            stdout=subprocess.PIPE, text=True)
    return codes, json.loads(report.stdout)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("spendcap")
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    spendcap = os.path.abspath(args.spendcap)
    tmp = tempfile.mkdtemp(prefix="spendcap-overshoot-")
    env = dict(os.environ, XDG_DATA_HOME=tmp, XDG_STATE_HOME=tmp, XDG_CONFIG_HOME=tmp)
    env.pop("SPENDCAP_POLICY", None)
    try:
        print("### Spend overshoot and use: `--rate 3600 --budget 5 --grace 1s --kill-after 1s`, "
              "%d runs of each, 4 at a time\n" % args.runs)
        print("| job | final spend / budget: max | median | min | budget used (median) "
              "| trip to tree empty, max |")
        print("|---|---|---|---|---|---|")
        for kind in ("sleep", "ignore_all"):
            with concurrent.futures.ThreadPoolExecutor(4) as pool:
                outcomes = list(pool.map(lambda _: one_run(spendcap, env, tmp, kind),
                                         range(args.runs)))
            ratios = [o["spend"] / o["budget"] for o in outcomes]
            print("| %s | %.3f | %.3f | %.3f | %.0f%% | %.3f s |" % (
                "`sleep` (dies on the first signal)" if kind == "sleep"
                else "ignores every signal until SIGKILL", max(ratios),
                statistics.median(ratios), min(ratios), 100 * statistics.median(ratios),
                max(o["trip_to_empty_seconds"] for o in outcomes)))
        codes, budgets = team(spendcap, env, tmp)
        scope = [b for b in budgets if b["scope"] == "team:bench"][0]
        print("\n8 runs at once on a team budget of $10 (each $0.10/s, claim horizon 5 s): "
              "team spend / budget %.3f (used %.0f%%, overrun %s), exit codes %s\n" % (
                  scope["spent"] / scope["budget"], 100 * scope["spent"] / scope["budget"],
                  scope.get("overrun"), " ".join(str(c) for c in sorted(codes))))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
