"""`spendcap ps` on a shared runner (the real install, as test_shared_runner does it) shows, for each
run, the budget that binds it (issue 38, item 6): a run with its own `--budget` lower than what its
team's budget leaves it shows that budget ("run 0% of $2.00"), a run without one its team's.
Before, every row showed the team's budget ("team:vision 0% of $100.00"), which a $2 run never
reaches."""
import json
import os
import re
import subprocess
import unittest

from test_shared_runner import WHY_NOT, SharedRunnerSetup
from spendcap_testlib import wait_until

LOCKED = {
    "locked": True,
    "ledger": "set by the install",
    "rates": {"gpu": {"a100-80gb": {"on_demand": 36.0}}},
    "defaults": {"gpu": "a100-80gb", "gpus": 1, "grace": "0s", "kill_after": "1s"},
    "budgets": {"team": {"vision": {"amount": 100, "period": "month"}}},
}


@unittest.skipIf(WHY_NOT, WHY_NOT or "")
class PsBindingBudgetTest(SharedRunnerSetup):
    locked_policy = LOCKED

    def start_run(self, user, args, release):
        job = ("import os, time\n"
               "end = time.monotonic() + 90\n"
               "while not os.path.exists(%r) and time.monotonic() < end: time.sleep(0.05)"
               % release)
        argv = ["nsenter", "-t", str(self.holder.pid), "-m", "--", "setpriv", "--reuid", user,
                "--regid", user, "--init-groups", self.bin, "run", "--team", "vision"] + \
            list(args) + ["--", "python3", "-c", job]
        process = subprocess.Popen(argv, env=self.user_env(user), cwd=self.tmp,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.addCleanup(process.wait)
        return process

    def test_each_run_shows_the_budget_that_binds_it(self):
        user = self.users[0]
        release = os.path.join(self.tmp, "release")
        self.addCleanup(lambda: open(release, "a").close())
        own = self.start_run(user, ["--budget", "2", "--experiment", "own"], release)
        team = self.start_run(user, ["--experiment", "team"], release)

        def listed():
            result = self.spendcap(user, ["ps", "--json"])
            return result.returncode == 0 and len(json.loads(result.stdout)) == 2
        wait_until(listed, 60, interval=0.2, what="both runs in ps")
        result = self.spendcap(user, ["ps"])
        self.assertEqual(result.returncode, 0, result.stderr)
        rows = {}
        for line in result.stdout.splitlines():
            for experiment in ("own", "team"):
                if re.search(r"\s%s\s" % experiment, line):
                    rows[experiment] = line
        self.assertRegex(rows.get("own", ""), r"run \d+% of \$2\.00$", result.stdout)
        self.assertRegex(rows.get("team", ""), r"team:vision \d+% of \$100\.00$", result.stdout)
        with open(release, "w"):
            pass
        self.assertEqual(own.wait(timeout=60), 0, own.stderr.read())
        self.assertEqual(team.wait(timeout=60), 0, team.stderr.read())


if __name__ == "__main__":
    unittest.main()
