"""Root's `outbox list` shows every user's undelivered webhooks (issue 38, item 9): the outbox is
one table of the ledger, and before, root listed only the entries whose user was root, so an
administrator saw "outbox empty" while users' events waited. A user still lists their own."""
import os
import sqlite3
import subprocess
import time
import unittest

from spendcap_testlib import SPENDCAP, UserLedgerTest


@unittest.skipIf(os.geteuid() != 0, "needs root (a user of its own, and root's view)")
class OutboxRootTest(UserLedgerTest):
    def test_root_lists_every_users_entries(self):
        made = self.run_spendcap(["run", "--team", "vision", "--rate", "1", "--budget", "1", "--",
                                  "true"])
        self.assertEqual(made.returncode, 0, made.stderr)  # the user's run makes the ledger
        with sqlite3.connect(self.ledger_file()) as connection:
            connection.execute(
                "INSERT INTO outbox (event_id, event, run_id, user_name, destination, format, "
                "secret_env, body, created_at, attempts, last_error) "
                "VALUES ('e1', 'killed', '0123456789abcdef', ?, 'env:HOOK_URL', 'json', '', "
                "'{}', ?, 1, 'connection refused')", (self.user, time.time()))
        own = self.run_spendcap(["outbox", "list"])
        self.assertEqual(own.returncode, 0, own.stderr)
        self.assertIn("killed  run 01234567", own.stdout)
        as_root = subprocess.run([SPENDCAP, "outbox", "list"], env=self.spendcap_env(),
                                 cwd=self.tmp, capture_output=True, text=True, timeout=60)
        self.assertEqual(as_root.returncode, 0, as_root.stderr)
        self.assertIn("killed  run 01234567", as_root.stdout)
        self.assertIn("user " + self.user, as_root.stdout)


if __name__ == "__main__":
    unittest.main()
