"""The money around a run on the shared runner (issue 29, items 2 and 4), with real users on the
install test_shared_runner.py makes (scripts/install-shared-runner.sh, /etc overlaid in a private
mount namespace):

- job keys: another team's run and a non-member's cannot join, resize or spend a key; `stop --job`
  reaches only keys the caller may stop, and the key's own user clears an order on it;
- a command that waits out the ledger's lock names the holding process and its user;
- `--metrics-dir` at the ledger's directory is refused;
- the crash-loop guard counts the caller's own failures (a user's layer may share the count: the
  negative control, refused, naming whose failures counted).

alice is in the members-only team `closed` (group scclosed), bob is not; `open` is open to all.

Needs what test_shared_runner needs (root, useradd, setpriv, nsenter, mount namespaces)."""
import json
import os
import subprocess
import unittest
import uuid

import test_shared_runner as shared
from spendcap_testlib import wait_until

# Root holds the ledger's write lock until killed (as a stuck writer would).
LOCKER = r"""
import sqlite3, sys, time
db = sqlite3.connect(sys.argv[1], timeout=30, isolation_level=None)
db.execute("BEGIN IMMEDIATE")
open(sys.argv[2], "w").close()
time.sleep(300)
"""

TRUST = dict(shared.LOCKED, rates={"gpu": {"a100-80gb": {"on_demand": 36.0}}},
             defaults={"gpu": "a100-80gb", "gpus": 1, "grace": "1s", "kill_after": "1s",
                       "grace_on_signal": "1s", "kill_after_on_signal": "1s"},
             budgets={"team": {"open": {"amount": 1000, "period": "month", "max_run": 100},
                               "closed": {"amount": 1000, "period": "month", "max_run": 100,
                                          "members": {"unix_groups": ["scclosed"]}}}})


def stop_process(process):
    if process.poll() is None:
        process.kill()
    process.communicate(timeout=30)


@unittest.skipIf(shared.WHY_NOT, shared.WHY_NOT or "")
class LedgerTrustTest(shared.SharedRunnerSetup):
    locked_policy = TRUST

    def setUp(self):
        super().setUp()
        self.alice, self.bob = self.users
        for argv in (["groupadd", "scclosed"], ["usermod", "-aG", "scclosed", self.alice]):
            # Only in the overlaid /etc: gone with the namespace. Another test's useradd may hold
            # the lock files for a moment (the overlay shows them): wait for it, bounded.
            for _ in range(30):
                result = self.inside(argv)
                if result.returncode == 0 or "lock" not in result.stderr:
                    break
                wait_until(lambda: not any(os.path.exists("/etc/%s.lock" % name)
                                           for name in ("passwd", "group", "gshadow", "shadow")),
                           30, what="another useradd's lock on /etc")
            self.assertEqual(result.returncode, 0, result.stderr)
        self.service_uid = int(self.inside(["id", "-u", "spendcap"]).stdout.strip())

    def as_user(self, user, argv):
        return ["nsenter", "-t", str(self.holder.pid), "-m", "--", "setpriv", "--reuid", user,
                "--regid", user, "--init-groups"] + list(argv)

    def start(self, user, argv, **kwargs):
        process = subprocess.Popen(self.as_user(user, argv), env=self.user_env(user),
                                   cwd=self.tmp, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   text=True, **kwargs)
        self.addCleanup(stop_process, process)
        return process

    def hold_the_lock(self):
        locked = os.path.join(self.tmp, "locked-" + uuid.uuid4().hex[:6])
        locker = subprocess.Popen(["nsenter", "-t", str(self.holder.pid), "-m", "--", "python3",
                                   "-c", LOCKER, self.ledger, locked])
        self.addCleanup(locker.wait)
        self.addCleanup(locker.kill)
        wait_until(lambda: os.path.exists(locked) or locker.poll() is not None, 30,
                   what="root's write lock on the ledger")
        self.assertIsNone(locker.poll())
        return locker

    def test_a_job_key_is_its_first_runs_team_and_user(self):
        a, b = self.alice, self.bob
        first = self.spendcap(a, ["run", "--team", "closed", "--job-key", "akey", "--budget", "20",
                                  "--", "true"])
        self.assertEqual(first.returncode, 0, first.stderr)
        # Another team's run (bob's, and alice's own) cannot join it.
        for user in (b, a):
            other = self.spendcap(user, ["run", "--team", "open", "--job-key", "akey", "--budget",
                                         "30", "--", "sleep", "5"])
            self.assertEqual(other.returncode, 120, other.stderr)
            self.assertIn("job key akey is team closed's, %s's" % a, other.stderr)
        # A non-member cannot charge the members-only team at all.
        member_only = self.spendcap(b, ["run", "--team", "closed", "--job-key", "akey",
                                        "--budget", "8.5", "--", "true"])
        self.assertEqual(member_only.returncode, 125, member_only.stderr)
        self.assertEqual(self.root_sql("SELECT count(*) FROM runs WHERE job_key = 'akey' AND "
                                       "status <> 'refused' AND user_name <> '%s'" % a), "0")
        stop = self.spendcap(b, ["stop", "--job", "akey"])
        self.assertEqual(stop.returncode, 125, stop.stdout + stop.stderr)
        again = self.spendcap(a, ["run", "--team", "closed", "--job-key", "akey", "--budget", "20",
                                  "--", "true"])
        self.assertEqual(again.returncode, 0, again.stderr)
        self.assertNotIn("raised", again.stdout + again.stderr)

    def test_stop_job_reaches_only_keys_the_caller_may_stop(self):
        a, b = self.alice, self.bob
        first = self.spendcap(a, ["run", "--team", "open", "--job-key", "okey", "--budget", "5",
                                  "--", "true"])
        self.assertEqual(first.returncode, 0, first.stderr)
        stop = self.spendcap(b, ["stop", "--job", "okey", "--reason", "bob's"])
        self.assertEqual(stop.returncode, 125, stop.stdout + stop.stderr)
        self.assertIn("job key okey is %s's of team open" % a, stop.stderr)
        self.assertEqual(self.root_sql("SELECT count(*) FROM stop_orders"), "0")
        # The ledger's owner places one; the key's own user clears it, and runs again.
        placed = self.inside([self.bin, "stop", "--job", "okey", "--reason", "owner's"])
        self.assertEqual(placed.returncode, 0, placed.stderr)
        blocked = self.spendcap(a, ["run", "--team", "open", "--job-key", "okey", "--budget", "5",
                                    "--", "true"])
        self.assertEqual(blocked.returncode, 120, blocked.stderr)
        not_bobs = self.spendcap(b, ["stop", "--clear", "--job", "okey"])
        self.assertEqual(not_bobs.returncode, 125, not_bobs.stderr)
        cleared = self.spendcap(a, ["stop", "--clear", "--job", "okey"])
        self.assertEqual(cleared.returncode, 0, cleared.stderr)
        next_run = self.spendcap(a, ["run", "--team", "open", "--job-key", "okey", "--budget",
                                     "5", "--", "true"])
        self.assertEqual(next_run.returncode, 0, next_run.stderr)

    # ---- the ledger's lock ----

    def test_a_command_that_waits_out_the_lock_names_its_holder(self):
        a = self.alice
        self.hold_the_lock()
        stop = self.spendcap(a, ["stop", "--user", a])
        self.assertEqual(stop.returncode, 125, stop.stderr)
        self.assertRegex(stop.stderr, r"locked for more than 10s: held by pid \d+ \(python3, "
                                      r"user root\)")

    # ---- the ledger's directory ----

    def test_metrics_dir_at_the_ledgers_directory_is_refused(self):
        a = self.alice
        before = sorted(os.listdir(self.ledger_dir))
        run = self.spendcap(a, ["run", "--team", "open", "--budget", "1", "--metrics-dir",
                                self.ledger_dir, "--", "true"])
        self.assertEqual(run.returncode, 125, run.stderr)
        self.assertIn("refused on this shared runner: only the locked policy's metrics_dir", run.stderr)
        self.assertEqual(sorted(os.listdir(self.ledger_dir)), before)

    def test_another_users_crash_loop_does_not_refuse_mine(self):
        a, b = self.alice, self.bob
        failing = ["run", "--team", "open", "--experiment", "X", "--budget", "1", "--", "false"]
        for _ in range(5):
            result = self.spendcap(b, failing)
            self.assertEqual(result.returncode, 1, result.stderr)
        own = self.spendcap(b, failing)
        self.assertEqual(own.returncode, 120, own.stderr)
        self.assertIn("failures counted: %s's own" % b, own.stderr)
        mine = self.spendcap(a, failing)
        self.assertEqual(mine.returncode, 1, mine.stderr)  # ran, and failed by itself
        # The negative control: alice's own layer shares the count, and bob's failures refuse her.
        shared = os.path.join(self.tmp, a, "shared.json")
        with open(shared, "w") as f:
            json.dump({"guards": {"crash_loop": {"shared": True}}}, f)
        refused = self.spendcap(a, ["run", "--policy", shared] + failing[1:])
        self.assertEqual(refused.returncode, 120, refused.stderr)
        self.assertIn("failures counted: %s, %s's; guards.crash_loop.shared" % (b, a),
                      refused.stderr)


if __name__ == "__main__":
    unittest.main()
