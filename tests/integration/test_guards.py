"""Runaway guards and the progress channel (issue 10, tests 1, 3, 4 and 6; the respawn-loop guard's
2 and 5 are in test_respawn.py): the crash-loop guard across invocations, the progress file's costs
and projection, the projection and stall guards, and the burn-rate warning. Real runs of the real binary on a real SQLite ledger."""
import os
import subprocess
import sys
import unittest

from spendcap_testlib import FIXTURES, SPENDCAP, LedgerTest

PROGRESS_JOB = os.path.join(FIXTURES, "progress_job.py")


class CrashLoopTest(LedgerTest):
    """Test 1: a retry loop around a failing command is refused (120) after N failures, without
    running the command; one refused event per window; --retry-backoff's real wait. That a success
    resets the count and budget stops do not count is unit-tested (tests/unit/run)."""

    def setUp(self):
        super().setUp()
        self.write_policy({"defaults": {"grace": "0s", "kill_after": "1s"}})
        self.attempts = self.path("attempts")
        self.ok = self.path("ok")

    def command(self):
        # Appends one byte per attempt that ran, and fails unless ./ok exists.
        return ["--", sys.executable, "-c",
                "import os, sys; open(%r, 'a').write('x'); sys.exit(0 if os.path.exists(%r) else 3)"
                % (self.attempts, self.ok)]

    def attempt(self, extra=()):
        return self.run_spendcap(["run", "--team", "t", "--experiment", "loop", "--rate", "36",
                                  "--budget", "1"] + list(extra) + self.command())

    def ran(self):
        if not os.path.exists(self.attempts):
            return 0
        with open(self.attempts) as f:
            return len(f.read())

    def test_retry_loop_is_refused_after_five_failures(self):
        # The README's idiom: retry until it works, but stop when spendcap refuses.
        script = ('n=0; while [ $n -lt 20 ]; do n=$((n+1)); "$@"; rc=$?; '
                  '[ $rc -eq 0 ] && break; [ $rc -eq 120 ] && break; done; echo "$n $rc"')
        args = [SPENDCAP, "run", "--team", "t", "--experiment", "loop", "--rate", "36",
                "--budget", "1"] + self.command()
        out = subprocess.run(["bash", "-c", script, "loop"] + args, env=self.spendcap_env(),
                             cwd=self.tmp, capture_output=True, text=True, timeout=120)
        self.assertEqual(out.stdout.split(), ["6", "120"], out.stderr)
        self.assertEqual(self.ran(), 5, "the refused attempt must not run the command")
        self.assertIn("runaway:crash-loop", out.stderr)
        # Knocking again: still refused, and the refused event of this window was already sent.
        again = self.attempt()
        self.assertEqual(again.returncode, 120, again.stderr)
        self.assertIn("refused before in this window", again.stderr)
        self.assertEqual(self.ran(), 5)
        refused = self.runs("status = 'refused'")
        self.assertEqual(len(refused), 2)
        self.assertTrue(all("runaway:crash-loop" in row["reason"] for row in refused))

    # A success resetting the count, runs stopped by a budget not counting, and the policy turning
    # the guard off are unit-tested over the fake host (tests/unit/run/test_run_steps.cpp).

    def test_retry_backoff_waits_before_starting(self):
        self.assertEqual(self.attempt().returncode, 3)
        result = self.attempt(["--retry-backoff"])
        self.assertEqual(result.returncode, 3, result.stderr)
        self.assertIn("retry back-off: 1 failures", result.stderr)
        self.assertEqual(self.ran(), 2)


class ProgressTest(LedgerTest):
    """Tests 3 and 4: costs and the projection from the progress file; the projection guard; the
    stall guard; bad and huge lines ignored."""

    def setUp(self):
        super().setUp()
        self.write_policy({"defaults": {"grace": "0s", "kill_after": "1s"}})

    def job(self, budget, extra_flags=(), job_args=()):
        # 36/h is $0.01 a second; 10 steps a second: $0.001 a step; 1000 steps: $1.00 in all.
        return self.run_spendcap(["run", "--rate", "36", "--budget", str(budget), "--interval",
                                  "200ms", "--status-file", self.path("status.json")]
                                 + list(extra_flags)
                                 + ["--", sys.executable, PROGRESS_JOB] + list(job_args))

    def test_cost_per_step_and_projection(self):
        result = self.job(5, job_args=["--seconds", "3"])
        self.assertEqual(result.returncode, 0, result.stderr)
        progress = self.read_json("status.json")["progress"]
        # The job counts its steps from its own start, after python's; a loaded host only makes
        # the cost per step higher, so the bounds are wider above.
        self.assertGreater(progress["cost_per_step"], 0.0008)
        self.assertLess(progress["cost_per_step"], 0.002)
        self.assertGreater(progress["projected_total"], 0.8)
        self.assertLess(progress["projected_total"], 2.0)
        self.assertAlmostEqual(progress["cost_per_thousand_units"],
                               progress["cost_per_step"] * 1000 / 32, places=6)
        self.assertIn("/step", result.stderr)
        self.assertIn("projected total", result.stderr)
        self.assertNotIn("will not fit", result.stderr)  # negative control: $1.00 fits $5
        row = self.runs()[0]
        self.assertEqual(row["metric_name"], "val_acc")
        self.assertAlmostEqual(row["units"], 32 * progress["step"])
        self.assertEqual(row["egress_gb"], 0.5)

    def test_a_run_that_will_not_fit_is_warned_about_early(self):
        result = self.job(0.5, job_args=["--seconds", "3"])
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("will not fit its budget", result.stderr)
        self.assertEqual(result.stderr.count("will not fit"), 1)
        # Long before the budget: 3 s of a run whose budget lasts about 50 s.
        self.assertLess(self.read_json("status.json")["spend"], 0.1)

    def test_require_fit_stops_it(self):
        result = self.job(0.5, extra_flags=["--require-fit"], job_args=["--seconds", "60"])
        self.assertEqual(result.returncode, 123, result.stderr)
        status = self.read_json("status.json")
        self.assertEqual(status["reason"], "runaway:will-not-fit")
        self.assertLess(status["spend"], 0.2)

    def test_a_stalled_job_is_stopped(self):
        result = self.job(5, extra_flags=["--stall-after", "2s"],
                          job_args=["--lines", "3", "--seconds", "60"])
        self.assertEqual(result.returncode, 123, result.stderr)
        status = self.read_json("status.json")
        self.assertEqual(status["reason"], "runaway:stall")
        self.assertIn("no progress line for", result.stderr)
        self.assertLess(status["elapsed_seconds"], 30)

    def test_a_job_that_keeps_reporting_is_not_stalled(self):
        result = self.job(5, extra_flags=["--stall-after", "2s"], job_args=["--seconds", "4"])
        self.assertEqual(result.returncode, 0, result.stderr)

    def test_bad_and_huge_lines_are_ignored(self):
        result = self.job(5, job_args=["--junk", "--seconds", "3"])
        self.assertEqual(result.returncode, 0, result.stderr)
        progress = self.read_json("status.json")["progress"]
        self.assertEqual(progress["bad_lines"], 3)
        self.assertGreater(progress["good_lines"], 3)
        self.assertGreater(progress["step"], 1)


class BurnRateTest(LedgerTest):
    """Test 6: a run on 8 GPUs of an experiment that expects the burn of 1 is warned about."""

    POLICY = {
        "rates": {"gpu": {"h100": {"on_demand": 4.0}}},
        "defaults": {"gpu": "h100", "grace": "0s", "kill_after": "1s"},
        "budgets": {"experiment": {"bert": {"amount": 100, "period": "day",
                                            "expected_per_hour": 4.0}}},
    }

    def run_on(self, gpus):
        self.write_policy(self.POLICY)
        return self.run_spendcap(["run", "--experiment", "bert", "--gpus", str(gpus), "--",
                                  sys.executable, "-c", "pass"])

    def test_eight_gpus_warn(self):
        result = self.run_on(8)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("burn-rate anomaly: $32.00/h", result.stderr)

    def test_one_gpu_does_not(self):
        result = self.run_on(1)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertNotIn("burn-rate anomaly", result.stderr)


if __name__ == "__main__":
    unittest.main()
