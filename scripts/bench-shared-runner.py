#!/usr/bin/env python3
"""The cost of a run on the shared-runner install against a personal one, paired (README,
"Performance"). As root: builds nothing; installs build/spendcap as in
tests/integration/test_shared_runner.py (an /etc overlay in a private mount namespace, real
users), then alternates, as the same unprivileged user, `spendcap run -- true` on the privileged
runner (its front, locked policy, shared ledger) and on a personal ledger (the plain binary, no
runner), PAIRS times each, and prints the medians, their paired difference and the load average.

    sudo scripts/bench-shared-runner.py [PAIRS]     (default 30)
"""
import os
import statistics
import subprocess
import sys
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))
os.environ.setdefault("SPENDCAP_BIN", os.path.join(HERE, "..", "build", "spendcap"))

import test_shared_runner as shared  # noqa: E402
from spendcap_testlib import SPENDCAP  # noqa: E402

PAIRS = int(sys.argv[1]) if len(sys.argv) > 1 else 30
LOCKED = dict(shared.LOCKED, defaults={"gpu": "a100-80gb", "gpus": 1, "grace": "1s",
                                       "kill_after": "1s"})


class Bench(shared.SharedRunnerSetup):
    locked_policy = LOCKED

    def test_bench(self):
        user = self.users[0]
        env = self.user_env(user)
        personal = ["setpriv", "--reuid", user, "--regid", user, "--init-groups", SPENDCAP,
                    "run", "--rate", "4", "--budget", "10", "--ledger",
                    os.path.join(self.tmp, user, "personal.db"), "--quiet", "--", "true"]
        runner = ["nsenter", "-t", str(self.holder.pid), "-m", "--", "setpriv", "--reuid", user,
                  "--regid", user, "--init-groups", self.bin, "run", "--team", "vision",
                  "--budget", "10", "--quiet", "--", "true"]
        # setpriv and nsenter alone, to subtract what is not spendcap's.
        enter = ["nsenter", "-t", str(self.holder.pid), "-m", "--", "setpriv", "--reuid", user,
                 "--regid", user, "--init-groups", "true"]
        plain = ["setpriv", "--reuid", user, "--regid", user, "--init-groups", "true"]

        def timed(argv):
            start = time.monotonic()
            result = subprocess.run(argv, env=env, cwd=self.tmp, capture_output=True, text=True)
            elapsed = time.monotonic() - start
            self.assertEqual(result.returncode, 0, result.stderr)
            return elapsed

        for argv in (personal, runner):
            timed(argv)  # warm: the ledgers exist, the page cache holds the binary
        samples = {"personal": [], "runner": [], "enter": [], "plain": []}
        for _ in range(PAIRS):
            samples["personal"].append(timed(personal))
            samples["runner"].append(timed(runner))
            samples["plain"].append(timed(plain))
            samples["enter"].append(timed(enter))
        ms = {k: [v * 1000 for v in vs] for k, vs in samples.items()}
        diffs = [(r - e) - (p - q) for r, e, p, q in
                 zip(ms["runner"], ms["enter"], ms["personal"], ms["plain"])]
        print("\n%d pairs, load average %s" % (PAIRS, open("/proc/loadavg").read().split()[:3]))
        for name in ("personal", "runner", "plain", "enter"):
            print("%-9s median %7.1f ms  (p10 %.1f, p90 %.1f)" % (
                name, statistics.median(ms[name]),
                sorted(ms[name])[len(ms[name]) // 10], sorted(ms[name])[len(ms[name]) * 9 // 10]))
        print("runner - personal, paired, launchers subtracted: median %.1f ms" %
              statistics.median(diffs))


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0], "Bench"])
