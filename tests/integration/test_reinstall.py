"""Safe day 2 (issue 38, item 9): install-shared-runner.sh run again (an upgrade; the package's
postinst runs it on every upgrade) keeps what the install in place holds. Without POLICY it keeps
the locked policy (before: replaced by policies/shared-runner.json); without --ledger-dir or
--ledger it keeps the ledger the locked policy names (before: a fresh empty SQLite ledger in
/var/lib/spendcap, team spend $0, even under a PostgreSQL install); a POLICY that changes the
locked one is printed as a diff; the install puts the man pages in place; a `sqlite3 .backup` of
the live ledger reads back the same spend. Same namespace as test_shared_runner.py."""
import gzip
import json
import os
import unittest

from spendcap_testlib import SPENDCAP
from test_shared_runner import INSTALL, WHY_NOT, SharedRunnerSetup


@unittest.skipIf(WHY_NOT, WHY_NOT or "")
class ReinstallTest(SharedRunnerSetup):
    user_count = 1

    def reinstall(self, *args):
        return self.inside(["sh", INSTALL, "--binary", SPENDCAP, "--bin", self.bin, "--runner",
                            self.runner, ] + list(args))

    def locked(self):
        return json.loads(self.inside(["cat", "/etc/spendcap/policy.json"]).stdout)

    def spend_one_run(self):
        user = self.users[0]
        result = self.spendcap(user, ["run", "--team", "vision", "--", "sleep",
                                      "0.3"])
        self.assertEqual(result.returncode, 0, result.stderr)
        spent = self.team_budget(user)["spent"]
        self.assertGreater(spent, 0)
        return spent

    def test_reinstall_without_policy_or_ledger_keeps_both(self):
        spent = self.spend_one_run()
        before = self.locked()
        self.assertEqual(before["ledger"], "sqlite:" + self.ledger)
        result = self.reinstall()  # no POLICY, no --ledger-dir: the ledger is not the default
        self.assertEqual(result.returncode, 0, result.stderr + result.stdout)
        self.assertEqual(self.locked(), before)
        self.assertNotIn("the locked policy changes", result.stderr)
        self.assertEqual(self.team_budget(self.users[0])["spent"], spent)

    def test_a_locked_policy_not_roots_is_not_kept_silently(self):
        chown = self.inside(["chown", self.users[0], "/etc/spendcap/policy.json"])
        self.assertEqual(chown.returncode, 0, chown.stderr)
        result = self.reinstall()
        self.assertEqual(result.returncode, 1, result.stderr + result.stdout)
        self.assertIn("/etc/spendcap/policy.json is not root's", result.stderr)

    def test_a_new_policy_is_printed_as_a_diff_and_keeps_the_ledger(self):
        spent = self.spend_one_run()
        changed = dict(self.locked_policy)
        changed["budgets"] = {"team": {"vision": {"amount": 200, "period": "month",
                                                  "max_run": 10}}}
        path = os.path.join(self.tmp, "changed.json")
        with open(path, "w") as f:
            json.dump(changed, f)
        result = self.reinstall(path)
        self.assertEqual(result.returncode, 0, result.stderr + result.stdout)
        self.assertIn("the locked policy changes", result.stderr)
        self.assertIn('-        "amount": 100', result.stderr)
        self.assertIn('+        "amount": 200', result.stderr)
        self.assertEqual(self.locked()["ledger"], "sqlite:" + self.ledger)
        budget = self.team_budget(self.users[0])
        self.assertEqual((budget["spent"], budget["budget"]), (spent, 200))

    def test_a_postgresql_ledger_is_kept_by_an_upgrade(self):
        # The URL only: an install without OWNER does not connect (the administrator's SQL is
        # printed), so no server is needed to see what the locked policy keeps.
        passfile = os.path.join(self.tmp, "ledger.password")
        result = self.reinstall("--ledger", "postgresql://127.0.0.1:1/spendcap", "--password-file",
                                passfile, os.path.join(self.tmp, "runner.json"))
        self.assertEqual(result.returncode, 0, result.stderr + result.stdout)
        url = self.locked()["ledger"]
        self.assertTrue(url.startswith("postgresql://127.0.0.1:1/spendcap"), url)
        self.assertNotIn("passfile=", url)  # the runner reads ledger_password_file instead
        self.assertEqual(self.locked()["ledger_password_file"], passfile)
        with open(passfile) as f:
            password = f.read()
        # What the package's postinst does on an upgrade: the policy, no --ledger.
        result = self.reinstall(os.path.join(self.tmp, "runner.json"))
        self.assertEqual(result.returncode, 0, result.stderr + result.stdout)
        self.assertEqual(self.locked()["ledger"], url)
        self.assertIn("(kept)", result.stdout)
        self.assertEqual(self.locked()["ledger_password_file"], passfile)
        with open(passfile) as f:
            self.assertEqual(f.read(), password)

    def test_the_install_puts_the_man_pages_in_place(self):
        for page in ("man1/spendcap.1.gz", "man1/spendcap-run.1.gz", "man5/spendcap-policy.5.gz"):
            path = os.path.join(self.tmp, "man", page)
            self.assertTrue(os.path.exists(path), path)
            with gzip.open(path, "rt") as f:
                self.assertIn(".TH", f.read())
        shown = self.inside(["man", "-M", os.path.join(self.tmp, "man"), "-P", "cat",
                             "spendcap-run"])
        if shown.returncode == 0:
            self.assertIn("--budget", shown.stdout)

    def test_a_backup_of_the_live_ledger_reads_back(self):
        spent = self.spend_one_run()
        backup = os.path.join(self.tmp, "backup.db")
        result = self.inside(["sqlite3", self.ledger, ".backup " + backup])
        self.assertEqual(result.returncode, 0, result.stderr)
        read = self.inside([SPENDCAP, "budgets", "--json", "--ledger", "sqlite:" + backup])
        self.assertEqual(read.returncode, 0, read.stderr)
        team = [b for b in json.loads(read.stdout) if b["scope"] == "team:vision"][0]
        self.assertEqual(team["spent"], spent)


if __name__ == "__main__":
    unittest.main()
