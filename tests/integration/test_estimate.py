"""`spendcap estimate` (issue 11, test 2 and the --compare part of test 4): the known figures through
the real binary, budgets that gate a launch (exit 0 / 120), and `run --estimate-steps`."""
import json
import os
import unittest

from spendcap_testlib import LedgerTest, SPENDCAP

FAKE_NVML = os.path.join(os.path.dirname(SPENDCAP), "tests", "fake_nvml", "current",
                         "libnvidia-ml.so.1")

POLICY = {
    "rates": {"gpu": {
        "h100": {"on_demand": 3.00, "spot": 1.10, "peak_tflops": 990, "memory_gb": 80},
        "l4": {"on_demand": 0.80, "peak_tflops": 121, "memory_gb": 24},
        "h200": {"on_demand": 4.00, "peak_tflops": 990, "memory_gb": 141},
    }},
    "defaults": {"grace": "0s", "kill_after": "0s", "sync": "1s"},
    "budgets": {"team": {"vision": {"amount": 30, "period": "month"}},
                "experiment": {"small": {"amount": 5, "period": "month"}}},
}


class EstimateTest(LedgerTest):
    def setUp(self):
        super().setUp()
        self.write_policy(POLICY)

    def estimate(self, *args, code=0):
        result = self.run_spendcap(["estimate"] + list(args) + ["--json"])
        self.assertEqual(result.returncode, code, result.stdout + result.stderr)
        return json.loads(result.stdout)

    def test_step_time(self):
        e = self.estimate("--rate", "2.50", "--step-time", "0.8s", "--steps", "50000")
        self.assertAlmostEqual(e["wall_hours"], 11.1111, places=3)
        self.assertAlmostEqual(e["cost"], 27.78, places=2)
        text = self.run_spendcap(["estimate", "--rate", "2.50", "--step-time", "0.8s",
                                  "--steps", "50000"]).stdout
        self.assertIn("11.111 h", text)
        self.assertIn("$27.78", text)
        # Priced by the policy: 2 x h100 on demand is 6.00/h per instance, 2 instances, 1 h.
        e = self.estimate("--gpu", "h100", "--gpus", "2", "--instances", "2",
                          "--step-time", "1s", "--steps", "3600")
        self.assertAlmostEqual(e["cost"], 12.0, places=6)

    def test_model_size(self):
        e = self.estimate("--params", "1e9", "--tokens", "20e9", "--peak-tflops", "750",
                          "--mfu", "0.4", "--gpus", "8", "--rate", "2")
        self.assertAlmostEqual(e["flops"], 1.2e20, delta=1e12)
        self.assertAlmostEqual(e["achieved_tflops"], 300)
        self.assertAlmostEqual(e["accelerator_hours"], 111.11, places=1)
        self.assertAlmostEqual(e["wall_hours"], 111.11 / 8, places=1)
        self.assertAlmostEqual(e["cost"], 222.22, places=1)
        # The policy's peak for the GPU type when --peak-tflops is absent (mfu default 0.4).
        e = self.estimate("--params", "1e9", "--tokens", "20e9", "--gpu", "h100")
        self.assertAlmostEqual(e["achieved_tflops"], 396)
        # No peak anywhere: a usage error naming what to give.
        result = self.run_spendcap(["estimate", "--params", "1e9", "--tokens", "1e9",
                                    "--rate", "1"])
        self.assertEqual(result.returncode, 125)
        self.assertIn("--peak-tflops", result.stderr)

    def test_spot(self):
        # 2,000 GPU-hours: 3.00 on demand = 6,000; spot 1.10 with 6 per 100 h losing 30 min.
        e = self.estimate("--gpu", "h100", "--pricing", "spot", "--step-time", "1h",
                          "--steps", "2000", "--interruptions-per-100h", "6",
                          "--lost-per-interruption", "30m")
        self.assertAlmostEqual(e["on_demand_cost"], 6000, places=6)
        self.assertAlmostEqual(e["spot_cost"], 2266, places=6)
        self.assertAlmostEqual(e["cost"], 2266, places=6)

    def test_reserved(self):
        e = self.estimate("--reserved", "0.62", "--on-demand", "1.00")
        self.assertAlmostEqual(e["break_even_utilisation"], 0.62)
        self.assertAlmostEqual(e["reserved_yearly"], 5431.2)
        self.assertEqual([round(x["on_demand_yearly"]) for x in e["on_demand_at"]],
                         [2628, 5256, 7884])
        # The team's observed utilisation: no run measured it, so it is said, not 0.
        e = self.estimate("--reserved", "0.62", "--on-demand", "1.00", "--team", "vision")
        self.assertIsNone(e["observed_utilisation"])
        text = self.run_spendcap(["estimate", "--reserved", "0.62", "--on-demand", "1.00",
                                  "--team", "vision"]).stdout
        self.assertIn("break-even utilisation: 62%", text)
        self.assertIn("not measured", text)

    @unittest.skipUnless(os.path.exists(FAKE_NVML), "the fake NVML is not built")
    def test_reserved_with_the_teams_measured_utilisation(self):
        # A real run whose GPU (the fake NVML, 80% busy) is measured: the ledger's GPU columns
        # give the team's observed utilisation; another team's unmeasured run does not count.
        with open(self.path("scenario.json"), "w") as f:
            json.dump({"devices": [{"uuid": "GPU-fake-0", "pid_file": self.path("pids"),
                                    "segments": [{"util": 80, "power_w": 250}]}]}, f)
        env = {"SPENDCAP_NVML_LIBRARY": FAKE_NVML,
               "FAKE_NVML_SCENARIO": self.path("scenario.json"), "CUDA_VISIBLE_DEVICES": "0"}
        # The job's pid and its PID namespace: the fake NVML translates it as the driver does.
        job = "echo $$ $(readlink /proc/$$/ns/pid) > %s; exec sleep 3" % self.path("pids")
        result = self.run_spendcap(["run", "--rate", "36", "--budget", "5", "--team", "vision",
                                    "--", "sh", "-c", job], env)
        self.assertEqual(result.returncode, 0, result.stderr)
        result = self.run_spendcap(["run", "--rate", "36", "--budget", "5", "--team", "nlp",
                                    "--", "true"], {"SPENDCAP_NVML_LIBRARY": "none"})
        self.assertEqual(result.returncode, 0, result.stderr)
        row = self.runs("team = ?", ("vision",))[0]
        self.assertGreater(row["gpu_allocated_seconds"], 0)
        expected = row["gpu_busy_seconds"] / row["gpu_allocated_seconds"]
        self.assertAlmostEqual(expected, 0.8, delta=0.05)
        e = self.estimate("--reserved", "0.62", "--on-demand", "1.00", "--team", "vision")
        self.assertAlmostEqual(e["observed_utilisation"], expected, places=9)
        self.assertEqual(e["observed_runs"], 1)
        text = self.run_spendcap(["estimate", "--reserved", "0.62", "--on-demand", "1.00",
                                  "--team", "vision"]).stdout
        self.assertIn("%d%% busy (1 runs measured): reserve" % round(100 * expected), text)
        e = self.estimate("--reserved", "0.62", "--on-demand", "1.00", "--team", "nlp")
        self.assertIsNone(e["observed_utilisation"])
        # The report's GPU-hours are the ledger's.
        result = self.run_spendcap(["report", "--by", "team", "--format", "json"])
        self.assertEqual(result.returncode, 0, result.stderr)
        groups = {g["group"]["team"]: g for g in json.loads(result.stdout)["groups"]}
        self.assertAlmostEqual(groups["vision"]["gpu_hours_allocated"],
                               row["gpu_allocated_seconds"] / 3600)
        self.assertAlmostEqual(groups["vision"]["utilisation"], expected)
        self.assertIsNone(groups["nlp"]["gpu_hours_allocated"])

    def test_serving(self):
        for price, rps, util, expected in [("0.40", "900", "0.55", 0.22),
                                           ("1.20", "1400", "0.45", 0.53),
                                           ("4.00", "300", "0.45", 8.23)]:
            e = self.estimate("--serving", "--price-per-hour", price, "--rps", rps,
                              "--utilisation", util)
            self.assertEqual(round(e["cost_per_million"], 2), expected)
        e = self.estimate("--serving", "--price-per-hour", "2.50",
                          "--predictions-per-day", "40000000")
        self.assertAlmostEqual(e["cost_per_thousand"], 0.0015)
        bad = self.run_spendcap(["estimate", "--serving", "--price-per-hour", "1",
                                 "--rps", "10", "--utilisation", "1.5"])
        self.assertEqual(bad.returncode, 125)
        self.assertIn("--utilisation 1.5", bad.stderr)

    def test_budget_gate(self):
        # 27.78 fits the team's 30 but not the experiment's 5: exit 120.
        args = ["--rate", "2.50", "--step-time", "0.8s", "--steps", "50000"]
        e = self.estimate(*args, "--team", "vision")
        self.assertTrue(e["fits"])
        e = self.estimate(*args, "--team", "vision", "--experiment", "small", code=120)
        self.assertFalse(e["fits"])
        self.assertEqual([b["fits"] for b in e["budgets"]], [True, False])
        # Negative control: a shorter run fits both.
        e = self.estimate("--rate", "2.50", "--step-time", "0.8s", "--steps", "5000",
                          "--team", "vision", "--experiment", "small")
        self.assertTrue(e["fits"])

    def test_run_estimate_steps(self):
        # 0.8 s x 50,000 at 2.50/h = 27.78 > the experiment's 5: refused before it starts.
        marker = self.path("ran")
        job = ["--", "python3", "-c", "open(%r, 'w').close()" % marker]
        refused = self.run_spendcap(["run", "--experiment", "small", "--rate", "2.50",
                                     "--estimate-steps", "50000", "--step-time", "0.8s"] + job)
        self.assertEqual(refused.returncode, 120, refused.stderr)
        self.assertIn("does not fit experiment:small", refused.stderr)
        import os
        self.assertFalse(os.path.exists(marker), "the job never started")
        ok = self.run_spendcap(["run", "--experiment", "small", "--rate", "2.50",
                                "--estimate-steps", "500", "--step-time", "0.8s"] + job)
        self.assertEqual(ok.returncode, 0, ok.stderr)
        self.assertTrue(os.path.exists(marker))
        half = self.run_spendcap(["run", "--experiment", "small", "--rate", "2.50",
                                  "--estimate-steps", "500"] + job)
        self.assertEqual(half.returncode, 125)

    def test_compare_picks_memory_over_price(self):
        # 7e9 x 16 bytes = 112 GB: l4 (24 GB) is the cheapest per unit of work but needs 5 GPUs;
        # h100 (80 GB) needs 2; h200 (141 GB) holds it on one and is chosen.
        e = self.estimate("--compare", "--params", "7e9", "--tokens", "1e9")
        costs = [c["cost"] for c in e["choices"]]
        self.assertEqual(costs, sorted(costs))
        by_name = {c["gpu"]: c for c in e["choices"]}
        self.assertEqual(by_name["l4"]["gpus"], 5)
        self.assertEqual(by_name["h100"]["gpus"], 2)
        self.assertTrue(by_name["h200"]["fits_one_gpu"])
        self.assertEqual(e["recommended"], "h200")
        text = self.run_spendcap(["estimate", "--compare", "--params", "7e9",
                                  "--tokens", "1e9"]).stdout
        self.assertIn("cannot hold the model on one GPU", text)
        # A small model fits everywhere: the cheapest wins.
        e = self.estimate("--compare", "--params", "1e8", "--tokens", "1e9")
        self.assertEqual(e["recommended"], e["choices"][0]["gpu"])


if __name__ == "__main__":
    unittest.main()
