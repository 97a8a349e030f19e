"""One exit code, named the same everywhere (issue 40 item 3): a budget trip whose job checkpoints
and exits 0 makes spendcap exit 124; `runs` and `show` (table, csv, json) give spendcap's exit as
`exit_code` (124, as the status file does) and the command's as `command_exit_code` (0), the
FOCUS export as x_ExitCode and x_CommandExitCode, on the SQLite ledger and, with a server (SPENDCAP_TEST_PG_URL), on PostgreSQL.

Negative control: before schema v22 the ledger kept only the command's exit, and `runs --json`
gave `exit_code` 0 for this run while spendcap had exited 124."""
import csv
import io
import os
import unittest
import uuid

from spendcap_testlib import LedgerTest

# $1/s; with --grace 1s --kill-after 1s the reserve is $3, so --budget 6 trips at about 3 s.
TRIP = ["--rate", "3600", "--budget", "6", "--grace", "1s", "--kill-after", "1s"]
# Catches the checkpoint signal (SIGUSR1) and exits 0, as a job that wrote its checkpoint does.
JOB = ["sh", "-c", "trap 'exit 0' USR1; while :; do sleep 0.05; done"]


class ExitCodesTest(LedgerTest):
    ledger_args = []

    def check(self):
        team = "t" + uuid.uuid4().hex[:8]
        status_file = self.path("status.json")
        result = self.run_spendcap(["run"] + self.ledger_args + ["--team", team, "--experiment",
                                   "e", "--status-file", status_file] + TRIP + ["--"] + JOB)
        self.assertEqual(result.returncode, 124, result.stderr)
        status = self.read_json("status.json")
        self.assertEqual((status["exit_code"], status["command_exit_code"]), (124, 0))

        runs = self.spendcap_json(["runs"] + self.ledger_args + ["--team", team])
        self.assertEqual(len(runs), 1, runs)
        self.assertEqual((runs[0]["exit_code"], runs[0]["command_exit_code"]), (124, 0), runs)
        shown = self.spendcap_json(["show"] + self.ledger_args + [runs[0]["id"]])
        self.assertEqual((shown["exit_code"], shown["command_exit_code"]), (124, 0), shown)

        table = self.run_ok(["runs"] + self.ledger_args + ["--team", team]).stdout
        self.assertRegex(table.splitlines()[0], r"EXIT +CMD EXIT")
        self.assertRegex(table, r"budget:run +124 +0 ")
        text = self.run_ok(["show"] + self.ledger_args + [runs[0]["id"]]).stdout
        self.assertRegex(text, r"exit code: +124\b")
        self.assertRegex(text, r"command's exit: +0\b")

        rows = list(csv.DictReader(io.StringIO(self.run_ok(
            ["runs"] + self.ledger_args + ["--team", team, "--format", "csv"]).stdout)))
        self.assertEqual((rows[0]["exit_code"], rows[0]["command_exit_code"]), ("124", "0"))

        # The FOCUS export carries both as custom columns (x_ prefix, FOCUS 1.2); main's binary
        # had neither column.
        focus = list(csv.DictReader(io.StringIO(self.run_ok(
            ["report"] + self.ledger_args + ["--team", team, "--format", "focus"]).stdout)))
        self.assertTrue(focus)
        for row in focus:
            self.assertEqual((row["x_ExitCode"], row["x_CommandExitCode"]), ("124", "0"), row)

    def test_sqlite(self):
        self.check()

    @unittest.skipUnless(os.environ.get("SPENDCAP_TEST_PG_URL"), "no SPENDCAP_TEST_PG_URL")
    def test_postgresql(self):
        self.ledger_args = ["--ledger", os.environ["SPENDCAP_TEST_PG_URL"]]
        self.check()


if __name__ == "__main__":
    unittest.main()
