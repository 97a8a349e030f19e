"""The end of a run never loses it (issue 38, item 8): whatever fails when the job is over (the
metrics files, the ledger, the disk), the run ends with its true status or 121, its final row is
spooled on the host and replayed, and its status file is written. Before the fix, a run with
`metrics_dir` whose ledger stopped answering ended `internal error: Invalid argument` (125), with
no status file and nothing spooled: the team-budgets read for the metrics timed out and abandoned
the ledger's worker thread, and the final row's own timeout then detached it a second time."""
import os
import sqlite3
import subprocess
import sys
import unittest

from spendcap_testlib import LedgerTest, wait_until


class HeldLedger:
    """Holds a SQLite ledger's write lock (as a `sqlite3` shell left in a transaction would):
    every write of spendcap's waits its busy timeout and fails, and the ledger's one worker thread
    is stuck behind it, so a read queued after a write does not answer either."""

    def __init__(self, path):
        self.connection = sqlite3.connect(path, timeout=30, isolation_level=None)
        self.connection.execute("BEGIN IMMEDIATE")

    def release(self):
        if self.connection is not None:
            self.connection.execute("ROLLBACK")
            self.connection.close()
            self.connection = None


class RunEndTest(LedgerTest):
    def setUp(self):
        super().setUp()
        self.metrics = self.path("textfiles")
        os.mkdir(self.metrics)
        self.spool = os.path.join(self.tmp, "state", "spendcap", "spool")

    def policy(self, metrics=True, **defaults):
        policy = {"defaults": dict({"grace": "0s", "kill_after": "1s", "sync": "1s"}, **defaults),
                  "budgets": {"team": {"vision": {"amount": 100, "period": "day"}}}}
        if metrics:
            policy["metrics_dir"] = self.metrics
        self.write_policy(policy)

    def waiting_job(self, release):
        return [sys.executable, "-c",
                "import os, time\n"
                "end = time.monotonic() + 90\n"
                "while not os.path.exists(%r) and time.monotonic() < end: time.sleep(0.05)\n"
                "raise SystemExit(3)" % release]

    def start_run(self, job, rate="36"):
        err = open(self.path("run.err"), "w")
        self.addCleanup(err.close)
        process = self.start_spendcap(
            ["run", "--team", "vision", "--rate", rate, "--status-file", self.path("s.json"),
             "--"] + job, extra_env={"SPENDCAP_NVML_LIBRARY": "none"},
            stdout=subprocess.DEVNULL, stderr=err)
        self.addCleanup(lambda: process.poll() is None and process.kill())
        return process

    def first_heartbeat(self):
        wait_until(lambda: len(self.runs()) == 1 and self.runs()[0]["spend_micros"] > 0, 30,
                   interval=0.1, what="the run's first heartbeat")

    def spooled(self):
        return os.listdir(self.spool) if os.path.isdir(self.spool) else []

    def stderr(self):
        with open(self.path("run.err")) as f:
            return f.read()

    def assert_replayed(self, status_code):
        def replayed():
            self.spendcap_json(["ps"])
            return self.spooled() == []
        wait_until(replayed, 60, interval=0.5, what="the spooled row to be replayed")
        rows = self.runs()
        self.assertEqual(len(rows), 1)
        self.assertEqual(rows[0]["exit_code"], status_code)
        self.assertNotEqual(rows[0]["status"], "running")

    def check_job_ends_while_ledger_held(self, metrics):
        self.policy(metrics=metrics)
        release = self.path("release")
        process = self.start_run(self.waiting_job(release))
        self.first_heartbeat()
        held = HeldLedger(self.ledger_file())
        self.addCleanup(held.release)
        with open(release, "w"):
            pass
        process.wait(timeout=90)
        stderr = self.stderr()
        # The job's own status, not spendcap's 125.
        self.assertEqual(process.returncode, 3, stderr)
        self.assertNotIn("internal error", stderr)
        self.assertIn("spooled", stderr)
        self.assertEqual(len(self.spooled()), 1, stderr)
        status = self.read_json("s.json")
        self.assertEqual(status["exit_code"], 3)
        held.release()
        self.assert_replayed(3)

    def test_job_ends_while_the_ledger_is_held_with_metrics(self):
        self.check_job_ends_while_ledger_held(metrics=True)

    def test_job_ends_while_the_ledger_is_held_without_metrics(self):
        self.check_job_ends_while_ledger_held(metrics=False)

    def test_ceiling_runs_out_while_the_ledger_is_held_with_metrics(self):
        # A short claim horizon: the grant lasts seconds, so the run stops 121 while held.
        self.policy(claim_horizon="3s")
        process = self.start_run(["sleep", "120"])
        self.first_heartbeat()
        held = HeldLedger(self.ledger_file())
        self.addCleanup(held.release)
        process.wait(timeout=90)
        stderr = self.stderr()
        self.assertEqual(process.returncode, 121, stderr)
        self.assertNotIn("internal error", stderr)
        self.assertEqual(len(self.spooled()), 1, stderr)
        status = self.read_json("s.json")
        self.assertEqual(status["reason"], "ledger-unreachable")
        self.assertLessEqual(status["spend"], status["ceiling"])
        held.release()
        self.assert_replayed(143)  # sleep ended by the kill path's SIGTERM


if __name__ == "__main__":
    unittest.main()
