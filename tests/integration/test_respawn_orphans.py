"""The respawn-loop guard's fallback detector (no netlink connector: any user who is not root) and
orphans (issue 10): the guard reaps orphans itself and reports their exit statuses, so an orphan
that keeps crashing and being started again is counted fully and stops the run (123), while the
same loop of orphans that exit 0 is neither stopped nor warned about. Real trees, real binary."""
import unittest

from spendcap_testlib import LedgerTest

# Each round starts one orphan (the subshell exits at once, its child re-parents to the guard)
# that lives 0.6 s and exits with CODE; the next round starts after it is gone.
LOOP = ("for i in $(seq {rounds}); do "
        "(python3 -c 'import sys, time; time.sleep(0.6); sys.exit({code})' &); sleep 1; done")


class RespawnOrphansTest(LedgerTest):
    def setUp(self):
        super().setUp()
        self.write_policy({"defaults": {"grace": "0s", "kill_after": "1s", "interval": "100ms"},
                           "guards": {"respawn_loop": {"max_restarts": 2, "window": "5m"}}})

    def loop(self, code, rounds):
        return self.run_spendcap(
            ["run", "--verbose", "--rate", "36", "--budget", "5", "--status-file",
             self.path("status.json"), "--", "bash", "-c", LOOP.format(rounds=rounds, code=code)],
            extra_env={"SPENDCAP_TEST_SWITCHES": "no-proc-connector"})

    def test_crashing_orphans_stop_the_run_without_the_connector(self):
        result = self.loop(3, 9)
        self.assertIn("respawn-loop guard: fallback", result.stderr)
        self.assertIn("orphans, whose exit statuses the guard reports", result.stderr)
        self.assertEqual(result.returncode, 123, result.stderr)
        self.assertEqual(self.read_json("status.json")["reason"], "runaway:respawn-loop")
        self.assertIn("restarted after an abnormal exit 3 times", result.stderr)
        self.assertIn("sys.exit(3)", result.stderr)  # the orphan is the one named

    def test_orphans_that_exit_0_are_not_counted(self):
        # Negative control: the same loop, healthy: not stopped, and the orphans not even warned
        # about (their exit statuses are known), though each lived under min_life. (The loop's own
        # `sleep 1`, a child of bash, is warned about: the fallback cannot see its status.)
        result = self.loop(0, 5)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertNotIn("sys.exit(0)", result.stderr)
        self.assertNotIn("abnormal exit", result.stderr)


if __name__ == "__main__":
    unittest.main()
