"""The respawn-loop guard (issue 10, tests 2 and 5): a crash loop inside the tree is stopped with
the netlink process connector (root) or warned about by the fallback; healthy workers, a build and
a polling loop are not. Real trees (tests/fixtures/respawn.py) under the real binary."""
import os
import sys
import unittest

from spendcap_testlib import FIXTURES, LedgerTest

RESPAWN = os.path.join(FIXTURES, "respawn.py")


class RespawnLoopTest(LedgerTest):
    """Tests 2 and 5: a crash loop inside the tree is stopped (connector) or warned about
    (fallback); healthy workers, a build and a polling loop are not."""

    def setUp(self):
        super().setUp()
        self.write_policy({"defaults": {"grace": "0s", "kill_after": "1s", "interval": "100ms"}})

    def tree(self, mode, count, fallback=False):
        env = {"SPENDCAP_TEST_SWITCHES": "no-proc-connector"} if fallback else None
        # --verbose: the guard says which detector it uses.
        return self.run_spendcap(["run", "--verbose", "--rate", "36", "--budget", "5",
                                  "--status-file", self.path("status.json"), "--", sys.executable,
                                  RESPAWN, mode, str(count)], extra_env=env)

    def connector(self, result):
        if "respawn-loop guard: netlink process connector" not in result.stderr:
            self.skipTest("no netlink process connector here: " + result.stderr.splitlines()[0])

    def test_crash_loop_is_stopped(self):
        result = self.tree("crash", 60)
        self.connector(result)
        self.assertEqual(result.returncode, 123, result.stderr)
        self.assertEqual(self.read_json("status.json")["reason"], "runaway:respawn-loop")
        self.assertIn("restarted after an abnormal exit 11 times", result.stderr)

    def test_healthy_workers_build_and_polling_are_not(self):
        for mode, count in (("workers", 15), ("build", 30), ("poll", 15)):
            with self.subTest(mode=mode):
                result = self.tree(mode, count)
                self.connector(result)
                self.assertEqual(result.returncode, 0, result.stderr)
                self.assertNotIn("respawn loop", result.stderr)

    def test_fallback_warns_about_the_crash_loop_only(self):
        result = self.tree("crash", 20, fallback=True)
        self.assertIn("respawn-loop guard: fallback, warns only", result.stderr)
        self.assertEqual(result.returncode, 0, result.stderr)  # warned, never stopped
        self.assertIn("warning: possible respawn loop", result.stderr)
        result = self.tree("workers", 15, fallback=True)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertNotIn("respawn loop", result.stderr)


if __name__ == "__main__":
    unittest.main()
