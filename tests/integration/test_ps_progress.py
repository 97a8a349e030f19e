"""`spendcap ps` shows how far a running run is (issue 40 item 7), as an ordinary user, on the
SQLite ledger and, with a server (SPENDCAP_TEST_PG_URL), on PostgreSQL: STEP is the progress
channel's step of its total ("120/1200"), ETA the time its steps still need at their pace
("~48s"), from the ledger's progress_eta_at that each heartbeat writes (schema v27); `ps --json`
gives its times as RFC 3339 UTC strings (the format of `runs --json` and `show --json`) and the
run's step, total_steps, eta_seconds and eta_at; with $COLUMNS the table fits that width (names
cut, STEP and ETA whole), through a pipe without it every name is whole.

Negative control: main's binary before this change fails both cases (no STEP or ETA column;
`ps --json`'s started_at a number of seconds)."""
import datetime
import os
import re
import signal
import unittest
import uuid

from spendcap_testlib import FIXTURES, UserLedgerTest, wait_until, why_no_ordinary_user

PROGRESS_JOB = os.path.join(FIXTURES, "progress_job.py")
NO_USER = why_no_ordinary_user()
# 10 steps a second of 1200: two minutes, longer than the test looks (it stops the run).
STEPS, TOTAL = "1200", 1200
DURATION = re.compile(r"^~(\d+h)?(\d+m)?(\d+(\.\d+)?s)?$")


def utc(text):
    """An RFC 3339 UTC time as `runs --json` writes it ("2026-12-08T00:10:05Z")."""
    if not isinstance(text, str) or not text.endswith("Z"):
        raise AssertionError("not an RFC 3339 UTC time: %r" % (text,))
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))


def cells(table, first):
    """The row of `table` (ps's text) whose first cell is `first`, as {header: cell}, each cell
    cut at its header's column (the table's columns are aligned); None when no row is."""
    lines = table.splitlines()
    if not lines:
        return None
    header = lines[0]
    starts = [m.start() for m in re.finditer(r"(?<!\S)\S", header)]
    # "BUDGET USED" is one header of two words.
    starts = [s for s in starts if not header[:s].endswith("BUDGET ")]
    names = [header[a:b].strip() for a, b in zip(starts, starts[1:] + [None])]
    for line in lines[1:]:
        if line.split() and line.split()[0] == first:
            return {name: line[a:b].strip() if b else line[a:].strip()
                    for name, a, b in zip(names, starts, starts[1:] + [None])}
    return None


@unittest.skipIf(NO_USER, NO_USER or "")
class PsProgressTest(UserLedgerTest):
    ledger_args = []

    def setUp(self):
        super().setUp()
        self.env.pop("COLUMNS", None)  # a pipe without it: every name whole
        self.write_policy({"defaults": {"grace": "0s", "kill_after": "1s"}})

    def check(self):
        team = "team-of-a-rather-long-name-" + uuid.uuid4().hex[:12]
        experiment = "an-experiment-with-a-long-name-too"
        # The ledger made first: two first connections at once may both create a new schema.
        self.run_ok(["ps"] + self.ledger_args)
        process = self.start_spendcap(
            ["run"] + self.ledger_args + ["--team", team, "--experiment", experiment, "--rate",
                                          "36", "--budget", "5", "--sync", "1s", "--",
                                          "python3", PROGRESS_JOB, "--lines-per-second", "10",
                                          "--steps", STEPS, "--total-steps", str(TOTAL)])
        self.addCleanup(lambda: process.poll() is None and process.kill())

        def mine():
            listed = self.spendcap_json(["ps"] + self.ledger_args)
            return [run for run in listed if run["team"] == team]

        wait_until(lambda: mine() or process.poll() is not None, 60, interval=0.2,
                   what="the run in ps")
        if process.poll() is not None:
            self.fail("the run ended early: %s" % process.communicate()[1])
        (run,) = mine()
        short = run["id"][:8]

        # STEP shows a step > 0 of the total, and ETA a duration, once a heartbeat carried the
        # pace (the job's lines are read from 1 s on; --sync 1s).
        shown = {}

        def progressed():
            result = self.run_spendcap(["ps"] + self.ledger_args)
            self.assertEqual(result.returncode, 0, result.stderr)
            row = cells(result.stdout, short)
            shown.update(row or {}, table=result.stdout)
            step = re.match(r"^(\d+)/%d$" % TOTAL, (row or {}).get("STEP", ""))
            return bool(step and int(step.group(1)) > 0 and
                        DURATION.match(row.get("ETA", "")) and row["ETA"] != "~")

        try:
            wait_until(progressed, 60, interval=0.3, what="ps to show the run's STEP and ETA")
        except AssertionError as error:
            self.fail("%s; ps said:\n%s" % (error, shown.get("table")))
        table = shown["table"]
        self.assertIn(team, table, "through a pipe every name is whole")
        self.assertIn(experiment, table)

        # ps --json: RFC 3339 times as `runs --json` gives them; the step, total and ETA.
        (run,) = mine()
        started = utc(run["started_at"])
        self.assertGreaterEqual(utc(run["heartbeat_at"]), started)
        (listed,) = [r for r in self.spendcap_json(["runs"] + self.ledger_args + ["--team", team])]
        self.assertEqual(run["started_at"], listed["started_at"], "the same formatter as runs")
        self.assertIsNone(run["finished_at"])
        self.assertIsInstance(run["step"], int)
        self.assertIsInstance(run["total_steps"], int)
        self.assertGreater(run["step"], 0)
        self.assertEqual(run["total_steps"], TOTAL)
        self.assertIsInstance(run["eta_seconds"], (int, float))
        self.assertGreater(run["eta_seconds"], 0)
        # The steps left at about 10 a second (a loaded host reads them slower: a wide bound).
        self.assertLess(run["eta_seconds"], 30 * (TOTAL - run["step"]) / 10.0 + 30, run)
        eta_at = utc(run["eta_at"])
        self.assertGreater(eta_at, started)
        now = datetime.datetime.now(datetime.timezone.utc)
        self.assertAlmostEqual((eta_at - now).total_seconds(), run["eta_seconds"], delta=10)

        # With a width asked for ($COLUMNS, as a terminal's) the table fits it: the long names
        # are cut, the run's id, STEP and ETA are whole.
        fitted = self.run_spendcap(["ps"] + self.ledger_args, extra_env={"COLUMNS": "130"})
        self.assertEqual(fitted.returncode, 0, fitted.stderr)
        self.assertTrue(all(len(line) <= 130 for line in fitted.stdout.splitlines()),
                        fitted.stdout)
        self.assertNotIn(team, fitted.stdout)
        row = cells(fitted.stdout, short)
        self.assertIsNotNone(row, fitted.stdout)
        self.assertTrue(row["TEAM"].endswith("~"), fitted.stdout)
        self.assertRegex(row["STEP"], r"^\d+/%d$" % TOTAL)
        self.assertRegex(row["ETA"], DURATION)

        process.send_signal(signal.SIGTERM)  # setpriv execs spendcap: the same pid
        process.communicate(timeout=60)

    def test_sqlite(self):
        self.check()

    @unittest.skipUnless(os.environ.get("SPENDCAP_TEST_PG_URL"), "no SPENDCAP_TEST_PG_URL")
    def test_postgresql(self):
        # A schema of its own (spendcap creates it): ps lists only this test's runs.
        url = os.environ["SPENDCAP_TEST_PG_URL"]
        if os.environ.get("SPENDCAP_TEST_PG_POOLER") != "1":  # a pooler takes no options
            schema = "ps_" + uuid.uuid4().hex[:12]
            url += ("&" if "?" in url else "?") + "options=-csearch_path%3D" + schema
        self.ledger_args = ["--ledger", url]
        self.check()


if __name__ == "__main__":
    unittest.main()
