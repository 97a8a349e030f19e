"""Isolation: the job cannot reach its supervisor.

With --isolation pid (the default where the kernel allows it) the guard is the init of the job's
own PID namespace: the job sees neither spendcap nor anything outside its tree, and the kernel
refuses its SIGSTOP and SIGKILL to the guard. Without isolation the guard still holds the kill
deadline: a supervisor that stops answering does not let the tree outlive its ceiling.
"""
import os
import pwd
import shutil
import signal
import subprocess
import time
import unittest

from spendcap_testlib import (FIXTURES, SPENDCAP, LedgerTest, SpendcapTest, alive,
                              processes_with_marker, proc_state, wait_until)

# $0.01 a second; the budget's ceiling is reached 6 s after the launch.
RATE, BUDGET, CEILING_AFTER_SECONDS = "36", "0.06", 6.0
TRIP_AT_3S = ["--rate", RATE, "--budget", BUDGET, "--grace", "1s", "--kill-after", "1s"]


class HunterTest(SpendcapTest):
    """A job that SIGSTOPs then SIGKILLs everything that might be spendcap."""

    def hunt(self, isolation):
        return self.run_spendcap(
            # --verbose: the start line in full, with the isolation.
            ["run", "--verbose", "--isolation", isolation, "--status-file",
             self.path("status.json")] +
            TRIP_AT_3S + ["--", "python3", os.path.join(FIXTURES, "hunter.py"),
                          self.path("report.json"), "--spare", str(os.getpid())], timeout=60)

    def test_with_isolation_the_job_reaches_nothing(self):
        result = self.hunt("pid")
        self.assertEqual(result.returncode, 124, result.stderr)
        self.assertIn("isolation: pid namespace", result.stderr)
        status = self.read_json("status.json")
        self.assertEqual(status["isolation"], "pid")
        self.assertEqual(status["reason"], "budget:run")
        self.assertLessEqual(status["spend"], float(BUDGET))
        report = self.read_json("report.json")
        # What it could name was the guard alone, as pid 1: its PPid chain ends there, and the
        # guard (forked from spendcap) is the only process whose argv names spendcap.
        self.assertEqual(report["targets"], [1], report)
        self.assertEqual(report["pid"], 2, "the job is the namespace's second process")
        self.assert_tree_gone(timeout=2.0)

    def test_negative_control_without_isolation_the_job_kills_spendcap(self):
        # Proof that the hunter can do harm: without the namespace it stops and kills spendcap.
        result = self.hunt("none")
        self.assertEqual(result.returncode, -signal.SIGKILL, result.stderr)
        self.assertIn("isolation: none: the job can signal spendcap", result.stderr)
        self.assertFalse(os.path.exists(self.path("status.json")), "spendcap never got to the end")
        # The guard died too; the job's PDEATHSIG ended it.
        self.assert_tree_gone(timeout=5.0)


class StoppedSupervisorTest(SpendcapTest):
    def test_guard_ends_the_tree_by_the_ceiling_when_the_supervisor_is_stopped(self):
        process = self.start_spendcap(
            ["run", "--isolation", "none", "--status-file", self.path("status.json")] +
            TRIP_AT_3S + ["--", "python3", os.path.join(FIXTURES, "stop_supervisor.py"),
                          self.path("ready.json")], stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL)
        try:
            self.wait_for_file("ready.json")
            ready = self.read_json("ready.json")
            self.assertEqual(ready["supervisor"], process.pid)
            wait_until(lambda: proc_state(process.pid) == "T", 5, what="spendcap to be stopped")
            # spendcap carries the marker too; the guard, once done, is a zombie nobody reaps yet.
            tree = lambda: [pid for pid in processes_with_marker(self.marker) if pid != process.pid]
            self.assertGreaterEqual(len(tree()), 3, "the guard, the job and its child run")
            # The launch came before the job's first line; the ceiling is reached at most 6 s
            # after it. The supervisor never trips (it is stopped): the guard alone ends the tree.
            deadline = ready["started"] + CEILING_AFTER_SECONDS
            wait_until(lambda: not tree(), deadline + 1.0 - time.monotonic(),
                       what="the tree to be gone by the ceiling")
            self.assertEqual(proc_state(process.pid), "T", "spendcap was stopped all along")
        finally:
            process.send_signal(signal.SIGCONT)
            try:
                process.wait(timeout=30)
            finally:
                process.kill()


class OverrunTest(LedgerTest):
    """Without isolation a job can stop both the supervisor and the guard: nothing trips, and the
    ledger reconciles the silent run at its ceiling. When they wake, the real final row (above the
    ceiling) replaces that charge as an overrun, with its true spend: never hidden."""

    def test_a_late_final_row_above_the_ceiling_is_recorded_as_an_overrun(self):
        self.write_policy({"defaults": {"sync": "1s"},
                           "budgets": {"team": {"over": {"amount": 10, "period": "day"}}}})
        process = self.start_spendcap(
            ["run", "--team", "over", "--isolation", "none"] + TRIP_AT_3S +
            ["--", "python3", os.path.join(FIXTURES, "stop_supervisor.py"),
             self.path("ready.json"), "--guard-too"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        stopped = [process.pid]
        try:
            self.wait_for_file("ready.json")
            ready = self.read_json("ready.json")
            stopped.append(ready["guard"])
            for pid in (ready["guard"], process.pid):
                wait_until(lambda: proc_state(pid) == "T", 5, what="%d to be stopped" % pid)
            # Stale after 3 s of silence, due at the ceiling plus the shutdown time: `ps` asks the
            # ledger, which reconciles it then.
            def reconciled():
                self.spendcap_json(["ps"])
                rows = self.runs()
                return rows and rows[0]["reconciled"] == 1
            wait_until(reconciled, 30, interval=0.2, what="the lost run to be reconciled")
            row = self.runs()[0]
            self.assertEqual(row["spend_micros"], row["ceiling_micros"])
            self.assertEqual(row["overrun"], 0)
            self.assertEqual(self.spendcap_json(["budgets"])[0]["overrun"], 0)
            self.assertFalse(any(run["overrun"] for run in self.spendcap_json(["ps"])))
        finally:
            for pid in stopped:
                os.kill(pid, signal.SIGCONT)
        stdout, stderr = process.communicate(timeout=60)
        self.assertIn("OVERRUN", stderr + stdout)
        row = self.runs()[0]
        self.assertEqual(row["reconciled"], 0)
        self.assertEqual(row["overrun"], 1, row)
        self.assertGreater(row["spend_micros"], row["ceiling_micros"])
        self.assertEqual(row["status"], "killed")
        budget = self.spendcap_json(["budgets"])[0]
        self.assertAlmostEqual(budget["overrun"],
                               (row["spend_micros"] - row["ceiling_micros"]) / 1e6, places=5)
        self.assertAlmostEqual(budget["spent"], row["spend_micros"] / 1e6, places=5)
        # `ps` lists it though it is finished: an overrun is never hidden.
        listed = [run for run in self.spendcap_json(["ps"]) if run["id"] == row["id"]]
        self.assertEqual(len(listed), 1, "ps does not list the overrun")
        self.assertTrue(listed[0]["overrun"])
        self.assertAlmostEqual(listed[0]["spend"], row["spend_micros"] / 1e6, places=5)
        self.assertIn("(OVERRUN)", self.run_spendcap(["ps"]).stdout)
        self.assert_tree_gone(timeout=5.0)


def nobody_can_run_spendcap():
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        return False
    try:
        pwd.getpwnam("nobody")
    except KeyError:
        return False
    return True


class UnprivilegedTest(SpendcapTest):
    @unittest.skipUnless(nobody_can_run_spendcap(), "needs root to become nobody, and setpriv")
    def test_daemon_gone_when_the_run_ends_as_nobody(self):
        nobody = pwd.getpwnam("nobody")
        home = self.path("nobody")
        for name in ("", "data", "state", "config", "tmp"):
            os.mkdir(os.path.join(home, name))
            os.chown(os.path.join(home, name), nobody.pw_uid, nobody.pw_gid)
        os.chmod(self.tmp, 0o755)
        extra = {"HOME": home, "XDG_DATA_HOME": os.path.join(home, "data"),
                 "XDG_STATE_HOME": os.path.join(home, "state"),
                 "XDG_CONFIG_HOME": os.path.join(home, "config"),
                 "TMPDIR": os.path.join(home, "tmp")}
        ready, status_path = os.path.join(home, "ready"), os.path.join(home, "status.json")
        env = self.spendcap_env(extra)
        result = subprocess.run(
            ["setpriv", "--reuid=nobody", "--regid=%d" % nobody.pw_gid, "--clear-groups", SPENDCAP,
             "run", "--verbose", "--rate", "1", "--budget", "1", "--kill-after", "1s",
             "--status-file", status_path, "--", "python3", os.path.join(FIXTURES, "daemon.py"),
             ready],
            env=env, cwd=home, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            timeout=60)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertTrue(os.path.exists(ready), "the daemon was in place")
        self.assertIn("isolation: pid namespace", result.stderr)
        import json
        with open(status_path) as f:
            status = json.load(f)
        self.assertEqual(status["isolation"], "pid")
        self.assertEqual(status["tree_tracking"], "parentage", "nobody gets no cgroup")
        # Zero survivors, seen from the host the moment spendcap returned.
        self.assertEqual(processes_with_marker(self.marker), [])


if __name__ == "__main__":
    unittest.main()
