"""What one run adds to the shared ledger and to the owner's webhook receiver is bounded (issue 38,
item 4), on a real SQLite ledger with a real refusal: before, a run refused at admission stored
its ~1.4 MB of `--tag` text (the ledger grew 3.1 MB a run, its row and its `refused` event's body)
and sent it all in its webhook. Flags over a limit are refused (125) naming it; the command is
kept up to 4 KiB with a mark; a refused run at the limits adds at most a few tens of KB."""
import json
import os
import sqlite3

from spendcap_testlib import LedgerTest

MAX_TAGS, MAX_KEY, MAX_VALUE, MAX_NAME, MAX_COMMAND = 32, 64, 256, 128, 4096


class InputLimitsTest(LedgerTest):
    def setUp(self):
        super().setUp()
        # A team budget that refuses every run, and a webhook that cannot be reached, so that the
        # `refused` event's body stays in the outbox, where it is measured.
        self.write_policy({"budgets": {"team": {"full": {"amount": 0.000001, "period": "day"}}},
                           "webhooks": [{"url_env": "HOOK", "events": ["refused"]}]})
        self.env["HOOK"] = "http://127.0.0.1:9/hook"

    def refused_run(self, args, command=("true",)):
        return self.run_spendcap(["run", "--team", "full", "--rate", "1"] + list(args) + ["--"] +
                                 list(command))

    def sql(self, query):
        connection = sqlite3.connect(self.ledger_file(), timeout=30)
        try:
            return connection.execute(query).fetchall()
        finally:
            connection.close()

    def ledger_bytes(self):
        self.sql("PRAGMA wal_checkpoint(TRUNCATE)")
        return os.path.getsize(self.ledger_file())

    def test_flags_over_a_limit_are_refused_naming_it(self):
        long_value = "v" * (MAX_VALUE + 1)
        cases = {
            "--tag notes=": (["--tag", "notes=" + long_value], "its VALUE is 257 bytes, over the "
                             "limit of 256 bytes"),
            "--tag ": (["--tag", "k" * (MAX_KEY + 1) + "=1"], "its KEY is 65 bytes, over the "
                       "limit of 64 bytes"),
            "--tag:": (sum((["--tag", "k%d=1" % i] for i in range(MAX_TAGS + 1)), []),
                       "33 tags, over the limit of 32 per run"),
            "--experiment ": (["--experiment", "e" * (MAX_NAME + 1)], "the name is 129 bytes, "
                              "over the limit of 128 bytes"),
        }
        for flag, (args, message) in cases.items():
            with self.subTest(flag=flag):
                result = self.refused_run(args)
                self.assertEqual(result.returncode, 125, result.stderr)
                self.assertIn(message, result.stderr)
                self.assertIn(flag.rstrip(":"), result.stderr)
                self.assertNotIn(long_value, result.stderr, "a refusal quotes a start, not all")
        self.assertEqual(self.runs(), [], "nothing recorded for a refused flag")

    def test_a_refused_run_at_the_limits_is_bounded_in_the_ledger_and_its_webhook(self):
        # The ledger made, then measured over 5 refused runs with every limit filled.
        self.refused_run([])
        tags = sum((["--tag", "k%02d%s=%s" % (i, "x" * (MAX_KEY - 3), "y" * MAX_VALUE)]
                    for i in range(MAX_TAGS)), [])
        names = ["--experiment", "e" * MAX_NAME, "--project", "p" * MAX_NAME, "--job-key",
                 "j" * MAX_NAME]
        command = ["true", "z" * 120000]
        before = self.ledger_bytes()
        for _ in range(5):
            result = self.refused_run(tags + names, command)
            self.assertEqual(result.returncode, 120, result.stderr)
        growth = (self.ledger_bytes() - before) / 5
        # Measured: about 16 KB a run (3.1 MB before with 1.4 MB of tags; 249 KB with these flags).
        self.assertLess(growth, 40000, "bytes per refused run")
        stored = self.runs("status = 'refused' AND experiment != ''")
        self.assertEqual(len(stored), 5)
        argv = json.loads(stored[0]["command"])
        self.assertEqual(argv[-1], "[spendcap: %d more bytes not kept]" %
                         (len("".join(command)) - MAX_COMMAND))
        self.assertEqual(len("".join(argv[:-1])), MAX_COMMAND)
        self.assertEqual(len(json.loads(stored[0]["tags"])), MAX_TAGS)
        bodies = [row[0] for row in self.sql("SELECT body FROM outbox")
                  if json.loads(row[0])["experiment"]]
        self.assertEqual(len(bodies), 5, "the refused events wait in the outbox")
        for body in bodies:
            self.assertLess(len(body), 20000, "a refused event's body")
            self.assertEqual(json.loads(body)["command"][-1], argv[-1])
