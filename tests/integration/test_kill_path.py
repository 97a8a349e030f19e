"""The kill path on real process trees (issue 2, tests 1, 2, 3 and 6)."""
import json
import os
import signal
import subprocess
import unittest

from spendcap_testlib import (FIXTURES, SpendcapTest, alive, cgroup_v2_writable,
                              processes_with_marker, wait_until)

# 36 USD/h is 0.01 USD/s. With grace 1s and kill-after 1s the reserve is 0.03, so a budget of 0.06
# trips at 3 s: time enough for the fixture tree to be built first.
TRIP_AT_3S = ["--rate", "36", "--budget", "0.06", "--grace", "1s", "--kill-after", "1s"]


class HostileTreeTest(SpendcapTest):
    """Test 1 and its negative control (test 2)."""

    def run_hostile_tree(self, switches, extra_args=()):
        extra_env = {"SPENDCAP_TEST_SWITCHES": switches} if switches else {}
        result = self.run_spendcap(
            ["run", "--status-file", self.path("status.json")] + list(extra_args) + TRIP_AT_3S +
            self.tree_args(), extra_env=extra_env)
        # The whole tree was built before the trip; what is gone maps to None.
        roles = self.read_roles("ready")
        status = self.read_json("status.json")
        return result, roles, status

    def check_everything_stopped(self, switches, expected_tracking):
        result, roles, status = self.run_hostile_tree(switches)
        self.assertEqual(result.returncode, 124, result.stderr)
        self.assertEqual(status["reason"], "budget:run")
        self.assertEqual(status["tree_tracking"], expected_tracking)
        with open(self.path("ready.cgroup")) as f:
            job_cgroup = f.read()
        # The job really was in the run's own cgroup (and not in one without it): the label above
        # is not just a label.
        in_run_cgroup = job_cgroup.endswith("/spendcap-" + status["run_id"])
        self.assertEqual(in_run_cgroup, expected_tracking == "cgroup", job_cgroup)
        self.assertTrue(os.path.exists(self.path("checkpoint")), "the main process checkpointed")
        self.assertEqual(status["checkpoint_signalled"], 1, "only the main process catches it")
        self.assertLessEqual(status["spend"], 0.06)
        # Nothing of the tree is alive: not the daemon, not the SIGTERM-ignorer, not the stopped one.
        self.assertEqual(processes_with_marker(self.marker), [])
        for role, pid in roles.items():
            self.assertFalse(alive(pid), "%s (pid %s) survived" % (role, pid))

    @unittest.skipUnless(cgroup_v2_writable(), "needs root and a cgroup v2 hierarchy")
    def test_whole_tree_stopped_with_the_runs_cgroup(self):
        self.check_everything_stopped("", "cgroup")

    def test_whole_tree_stopped_without_cgroups(self):
        # The fallback every user without root gets: parentage under the subreaper guard.
        self.check_everything_stopped("no-cgroup", "parentage")

    def test_negative_control_daemon_escapes_without_subreapers_and_cgroup(self):
        # Without isolation: a PID namespace would end the daemon with its init, the guard.
        result, roles, status = self.run_hostile_tree("no-cgroup,no-subreaper",
                                                      ["--isolation", "none"])
        self.assertEqual(result.returncode, 124, result.stderr)
        # Proof that the test above can fail: without the guard as subreaper and without the cgroup,
        # the double-forked daemon re-parents outside the tree and survives.
        self.assertTrue(alive(roles["daemon"]), "the daemon should have escaped")
        self.assertIn(roles["daemon"], processes_with_marker(self.marker))


class CatchersTest(SpendcapTest):
    """Test 3: the checkpoint signal goes only to the processes that catch it."""

    def wrapper_args(self, *extra):
        return ["--", "sh", os.path.join(FIXTURES, "wrapper.sh"), self.path("checkpoint"),
                self.path("worker")] + list(extra)

    def test_wrapper_and_workers_live_through_the_grace_and_die_by_sigterm(self):
        result = self.run_spendcap(
            ["run", "--rate", "36", "--budget", "0.07", "--grace", "2s", "--kill-after", "2s",
             "--status-file", self.path("status.json")] + self.wrapper_args())
        self.assertEqual(result.returncode, 124, result.stderr)
        status = self.read_json("status.json")
        self.assertEqual(status["checkpoint_signalled"], 1)
        self.assertFalse(status["grace_skipped"])
        # The wrapper (the main process) was not sent SIGUSR1: SIGTERM ended it.
        self.assertEqual(status["command_signal"], "SIGTERM")
        checkpoint = self.read_json("checkpoint")
        for n in (1, 2):
            with open(self.path("worker.%d" % n)) as f:
                lines = f.read().split("\n")
            terms = [float(line.split()[1]) for line in lines if line.startswith("TERM")]
            self.assertEqual(len(terms), 1, "worker %d got SIGTERM once: %s" % (n, lines))
            # It lived through the grace: SIGTERM came a whole grace after the checkpoint signal.
            self.assertGreaterEqual(terms[0] - checkpoint["monotonic"], 1.5)
        self.assertEqual(processes_with_marker(self.marker), [])

    def test_grace_is_skipped_when_nothing_catches_the_signal(self):
        result = self.run_spendcap(
            ["run", "--rate", "36", "--budget", "0.40", "--grace", "30s", "--kill-after", "2s",
             "--status-file", self.path("status.json")] + self.wrapper_args("--no-catch"))
        self.assertEqual(result.returncode, 124, result.stderr)
        status = self.read_json("status.json")
        self.assertEqual(status["checkpoint_signalled"], 0)
        self.assertTrue(status["grace_skipped"])
        self.assertFalse(os.path.exists(self.path("checkpoint")))
        # Without the skip, the 30 s grace would be spent waiting for nothing.
        self.assertLess(status["trip_to_empty_seconds"], 15)
        self.assertIn("grace skipped", result.stderr)


class CheckpointAlreadyDoneTest(SpendcapTest):
    def test_kill_still_follows_when_the_checkpoint_file_exists_before_the_trip(self):
        # The job marks its checkpoint done before the trip, catches SIGUSR1 and ignores SIGTERM.
        # The grace ends at once, and SIGKILL must still come after kill-after. (A race under load
        # once let the grace step replace the kill step: the job then lived on, unkilled.)
        job = ("import os, signal, time\n"
               "open(os.environ['SPENDCAP_CHECKPOINT_DONE'], 'w').close()\n"
               "signal.signal(signal.SIGUSR1, lambda *a: None)\n"
               "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
               "open(%r, 'w').close()\n"
               "while True: time.sleep(1)\n") % self.path("ready")
        result = self.run_spendcap(["run", "--rate", "36", "--budget", "0.36", "--grace", "30s",
                                    "--kill-after", "1s", "--status-file", self.path("s.json"),
                                    "--", "python3", "-c", job], timeout=60)
        self.assertEqual(result.returncode, 124, result.stderr)
        status = self.read_json("s.json")
        self.assertEqual(status["checkpoint_signalled"], 1)
        self.assertLess(status["trip_to_empty_seconds"], 10, "not the 30 s grace")
        self.assertEqual(processes_with_marker(self.marker), [])


class SupervisorKilledTest(SpendcapTest):
    """Test 6: SIGKILL to spendcap; the guard ends the tree within 2 s."""

    def check_tree_gone_after_sigkill(self, switches):
        extra_env = {"SPENDCAP_TEST_SWITCHES": switches} if switches else {}
        process = self.start_spendcap(["run", "--rate", "1", "--budget", "10"] + self.tree_args(),
                                      extra_env=extra_env)
        self.wait_for_file("ready")
        roles = self.read_roles("ready")
        process.kill()
        self.assert_tree_gone(timeout=2.0)
        process.communicate(timeout=10)
        for role, pid in roles.items():
            self.assertFalse(alive(pid), "%s (pid %s) outlived spendcap" % (role, pid))

    @unittest.skipUnless(cgroup_v2_writable(), "needs root and a cgroup v2 hierarchy")
    def test_sigkill_with_the_runs_cgroup(self):
        self.check_tree_gone_after_sigkill("")

    def test_sigkill_without_cgroups(self):
        self.check_tree_gone_after_sigkill("no-cgroup")


if __name__ == "__main__":
    unittest.main()
