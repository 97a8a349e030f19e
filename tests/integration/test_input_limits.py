"""What one run adds to the shared ledger and to the owner's webhook receiver is bounded (issue 38,
item 4), on a real SQLite ledger with a real refusal: before, a run refused at admission stored
its ~1.4 MB of `--tag` text (the ledger grew 3.1 MB a run, its row and its `refused` event's body)
and sent it all in its webhook. Flags over a limit are refused (125) naming it; the command is
kept up to 4 KiB with a mark; a refused run at the limits adds at most a few tens of KB.
Refused runs are rate-limited per user: past 10 a minute they are counted in one row per user and
minute (refused_counts), with no row of their own and no `refused` webhook, and the refusal says
so. Before, 200 refused runs at the limits grew the ledger and the receiver 200 times."""
import json
import os
import sqlite3
import sys

from spendcap_testlib import LedgerTest
from test_webhooks import Endpoint

MAX_TAGS, MAX_KEY, MAX_VALUE, MAX_NAME, MAX_COMMAND = 32, 64, 256, 128, 4096
RECORDED_PER_MINUTE = 10  # ledger.hpp's kRecordedRefusalsPerMinute


def tags_at_the_limits():
    return sum((["--tag", "k%02d%s=%s" % (i, "x" * (MAX_KEY - 3), "y" * MAX_VALUE)]
                for i in range(MAX_TAGS)), [])


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
        connection = sqlite3.connect(self.ledger_file(), timeout=30, isolation_level=None)
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
        tags = tags_at_the_limits()
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


class RefusedRateLimitTest(LedgerTest):
    sql = InputLimitsTest.sql
    ledger_bytes = InputLimitsTest.ledger_bytes

    """A loop of 200 refused runs at the limits, its `refused` webhook delivered to a real receiver:
    the ledger and the receiver grow by at most 10 refused runs a minute, whatever the loop."""

    LOOP = 200

    def setUp(self):
        super().setUp()
        self.receiver = Endpoint()
        self.addCleanup(self.receiver.close)
        self.write_policy({"budgets": {"team": {"full": {"amount": 0.000001, "period": "day"}}},
                           "webhooks": [{"url_env": "HOOK", "events": ["refused"]}]})
        self.env["HOOK"] = self.receiver.url

    def counts(self):
        """(minute, refused, recorded) rows; none before schema 23 (the negative control)."""
        try:
            return self.sql("SELECT minute, refused, recorded FROM refused_counts")
        except sqlite3.OperationalError:
            return []

    def test_a_loop_of_refused_runs_is_counted_not_stored(self):
        args = ["run", "--team", "full", "--rate", "1"] + tags_at_the_limits() + ["--", "true"]
        self.run_ok(["run", "--team", "full", "--rate", "1", "--", "true"], code=120)  # the ledger
        self.sql("DELETE FROM runs")
        if self.counts():
            self.sql("DELETE FROM refused_counts")
        self.receiver.requests.clear()
        before = self.ledger_bytes()
        last = None
        for _ in range(self.LOOP):
            last = self.run_spendcap(args)
            self.assertEqual(last.returncode, 120, last.stderr)
        growth = self.ledger_bytes() - before
        webhook_bytes = sum(len(r["body"]) for r in self.receiver.requests)
        rows = self.runs("status = 'refused'")
        counted = self.counts()
        print("\n%d refused runs: ledger +%d bytes (%.0f a run), %d rows; receiver %d requests, "
              "%d bytes (%.0f a run); counts %s" %
              (self.LOOP, growth, growth / self.LOOP, len(rows), len(self.receiver.requests),
               webhook_bytes, webhook_bytes / self.LOOP, counted), file=sys.stderr)
        minutes = len(counted)
        self.assertLessEqual(minutes, 3, "the loop takes well under two minutes")
        self.assertEqual(sum(c[1] for c in counted), self.LOOP, "every refusal counted")
        self.assertEqual(len(rows), sum(c[2] for c in counted))
        self.assertLessEqual(len(rows), RECORDED_PER_MINUTE * minutes)
        self.assertEqual(len(self.receiver.requests), len(rows), "one webhook per stored row")
        self.assertLess(growth / self.LOOP, 2000, "ledger bytes per refused run")
        self.assertLess(webhook_bytes / self.LOOP, 2000, "webhook bytes per refused run")
        self.assertRegex(last.stderr, r"\(refused run \d+ of \S+ this minute: past 10 a minute "
                         r"the ledger counts refused runs instead of recording each, and sends no "
                         r"refused webhook\)")
        status = self.sql("SELECT count(*) FROM outbox")[0][0]
        self.assertEqual(status, 0, "nothing left in the outbox either")
