"""Spend is exact and never over budget, even for a job that ignores every signal but SIGKILL
(issue 2, test 8)."""
import os
import time
import unittest

from spendcap_testlib import FIXTURES, SpendcapTest, alive, wait_until


def started_at_boottime(pid):
    """When the kernel created `pid`, in seconds of CLOCK_BOOTTIME (field 22 of /proc/PID/stat,
    in clock ticks): the moment the guard forked the job, measured by the kernel, not by Python's
    start-up."""
    with open("/proc/%d/stat" % pid, "rb") as f:
        text = f.read()
    ticks = int(text[text.rindex(b")") + 2:].split()[19])
    return ticks / os.sysconf("SC_CLK_TCK")


class SpendAccuracyTest(SpendcapTest):
    def test_job_ignoring_signals_ends_within_budget_and_spend_matches_its_lifetime(self):
        rate_per_hour, budget = 36.0, 0.10
        process = self.start_spendcap(
            ["run", "--rate", "36", "--budget", "0.10", "--grace", "1s", "--kill-after", "1s",
             "--status-file", self.path("status.json"), "--", "python3",
             os.path.join(FIXTURES, "ignore_all.py"), self.path("start.json")])
        self.wait_for_file("start.json")
        pid = self.host_pid(self.read_json("start.json")["pid"])
        born = started_at_boottime(pid)
        # Watch the job die from the outside, polling every 2 ms.
        wait_until(lambda: not alive(pid), 60, interval=0.002, what="the job to die")
        died = time.clock_gettime(time.CLOCK_BOOTTIME)
        _, stderr = process.communicate(timeout=30)
        self.assertEqual(process.returncode, 124, stderr)
        status = self.read_json("status.json")
        self.assertLessEqual(status["spend"], budget)
        self.assertTrue(status["grace_skipped"], "SIG_IGN is not catching: no grace to wait")
        # From the kernel's birth time (10 ms ticks) to the death seen here (2 ms polls): the job's
        # lifetime, measured without spendcap. 1% of 8 s is 80 ms.
        expected = rate_per_hour / 3600.0 * (died - born)
        self.assertAlmostEqual(status["spend"], expected, delta=0.01 * expected)


if __name__ == "__main__":
    unittest.main()
