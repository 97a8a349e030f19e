"""Spend is exact and never over budget, even for a job that ignores every signal but SIGKILL
(issue 2, test 8)."""
import os
import unittest

from spendcap_testlib import FIXTURES, SpendcapTest, alive, wait_until
import time


class SpendAccuracyTest(SpendcapTest):
    def test_job_ignoring_signals_ends_within_budget_and_spend_matches_its_lifetime(self):
        rate_per_hour, budget = 36.0, 0.10
        process = self.start_spendcap(
            ["run", "--rate", "36", "--budget", "0.10", "--grace", "1s", "--kill-after", "1s",
             "--status-file", self.path("status.json"), "--", "python3",
             os.path.join(FIXTURES, "ignore_all.py"), self.path("start.json")])
        self.wait_for_file("start.json")
        start = self.read_json("start.json")
        # Watch the job die from the outside, polling every 2 ms.
        wait_until(lambda: not alive(start["pid"]), 60, interval=0.002, what="the job to die")
        died = time.monotonic()
        _, stderr = process.communicate(timeout=30)
        self.assertEqual(process.returncode, 124, stderr)
        status = self.read_json("status.json")
        self.assertLessEqual(status["spend"], budget)
        self.assertTrue(status["grace_skipped"], "SIG_IGN is not catching: no grace to wait")
        # The job lived from its start until it died (measured here, not by spendcap); spendcap's
        # launch is a few ms before Python's first line, and its reap a few ms after the death.
        expected = rate_per_hour / 3600.0 * (died - start["monotonic"])
        self.assertAlmostEqual(status["spend"], expected, delta=0.01 * expected)


if __name__ == "__main__":
    unittest.main()
