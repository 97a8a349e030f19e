"""GPU measurement through a fake NVML (tests/fixtures/fake_nvml, built next to the binary) loaded
by the real dlopen path ($SPENDCAP_NVML_LIBRARY). The fake's utilisation and power are piecewise
constant in time since spendcap initialised NVML, so each figure has an exact expected value."""
import json
import os
import re
import subprocess
import sys
import unittest

from spendcap_testlib import LedgerTest, SPENDCAP

FAKE_DIR = os.path.join(os.path.dirname(SPENDCAP), "tests", "fake_nvml")
FAKE_CURRENT = os.path.join(FAKE_DIR, "current", "libnvidia-ml.so.1")
FAKE_OLD = os.path.join(FAKE_DIR, "old", "libnvidia-ml.so.1")


def within(test, value, expected, fraction=0.02, what=""):
    test.assertLessEqual(abs(value - expected), fraction * abs(expected),
                         "%s: %r is not within %d%% of %r" % (what, value, fraction * 100, expected))


class GpuRunner(LedgerTest):
    def gpu_run(self, devices, seconds, library=FAKE_CURRENT, policy=None, extra_env=None,
                budget="5", rate="36", extra_args=(), job=None):
        """Runs a job that puts its pid in the fake's pid file and sleeps `seconds`; returns
        (completed process, status file JSON)."""
        for device in devices:
            device.setdefault("pid_file", self.path("pids"))
        with open(self.path("scenario.json"), "w") as f:
            json.dump({"devices": devices}, f)
        if policy is not None:
            self.write_policy(policy)
        env = {"SPENDCAP_NVML_LIBRARY": library, "FAKE_NVML_SCENARIO": self.path("scenario.json"),
               "CUDA_VISIBLE_DEVICES": "0"}
        env.update(extra_env or {})
        # The job's pid as it sees it, with its PID namespace: the fake translates it into
        # spendcap's namespace, as the kernel module does.
        job = "echo $$ $(readlink /proc/$$/ns/pid) > %s; exec %s" % (
            self.path("pids"), job or "sleep %s" % seconds)
        result = self.run_spendcap(["run", "--budget", budget, "--rate", rate, "--status-file",
                                    self.path("status.json")] + list(extra_args) +
                                   ["--", "sh", "-c", job], env)
        return result, self.read_json("status.json")


class GpuTest(GpuRunner):
    def test_busy_idle_and_spend_match_the_scenario(self):
        # 100% for 2 s, 50% for 2 s, then 0%: 3 busy GPU-seconds whatever the run's length. The
        # fake's clock starts at nvmlInit_v2, on the helper thread after launch: the leading
        # idle second keeps that latency (counted at the first sample's value) out of the figure.
        segments = [{"seconds": 1, "util": 0, "power_w": 50},
                    {"seconds": 2, "util": 100, "power_w": 300},
                    {"seconds": 2, "util": 50, "power_w": 200},
                    {"util": 0, "power_w": 50}]
        result, status = self.gpu_run([{"uuid": "GPU-fake-0", "segments": segments}], 7)
        self.assertEqual(result.returncode, 0, result.stderr)
        gpu = status["gpu"]
        self.assertTrue(gpu["measured"], gpu)
        self.assertEqual(gpu["devices"], ["0 (GPU-fake-0)"])
        self.assertEqual(gpu["utilisation_source"], "per-process")
        within(self, gpu["busy_gpu_seconds"], 3.0, what="busy GPU-seconds")
        within(self, gpu["allocated_gpu_seconds"], status["elapsed_seconds"], what="allocated")
        # Only the time after the driver's last sample (under 1/6 s) is unmeasured.
        self.assertGreater(gpu["measured_gpu_seconds"], gpu["allocated_gpu_seconds"] - 0.4)
        within(self, gpu["mean_utilisation"], gpu["busy_gpu_seconds"] / gpu["measured_gpu_seconds"],
               0.001, what="mean")
        idle_fraction = ((gpu["measured_gpu_seconds"] - gpu["busy_gpu_seconds"]) /
                         gpu["allocated_gpu_seconds"])
        within(self, gpu["idle_spend"], status["spend"] * idle_fraction, what="idle spend")
        # Energy from the counter: 300 W x 2 s + 200 W x 2 s + 50 W for the rest.
        self.assertEqual(gpu["energy_source"], "energy counter")
        expected = 600 + 400 + 50 * (gpu["allocated_gpu_seconds"] - 4)
        within(self, gpu["energy_joules"], expected, what="energy")
        self.assertFalse(gpu["shared"])
        self.assertRegex(result.stderr, r"GPU: 1 device, .* busy of .* measured \(.*per-process\)")

    def test_energy_from_integrated_power_with_an_old_library(self):
        # The old variant lacks the _v3 process lists and the energy counter: the _v2 lists still
        # find the run, and energy comes from the power readings (constant 250 W).
        result, status = self.gpu_run(
            [{"segments": [{"util": 80, "power_w": 250}]}], 4, library=FAKE_OLD)
        self.assertEqual(result.returncode, 0, result.stderr)
        gpu = status["gpu"]
        self.assertEqual(gpu["energy_source"], "integrated power")
        within(self, gpu["energy_joules"], 250 * gpu["allocated_gpu_seconds"], what="energy")
        within(self, gpu["mean_utilisation"], 0.8, what="utilisation")
        self.assertIn("no nvmlDeviceGetComputeRunningProcesses_v3: compute processes from "
                      "nvmlDeviceGetComputeRunningProcesses_v2", gpu["notes"])
        self.assertIn("no nvmlDeviceGetTotalEnergyConsumption: energy from power readings",
                      gpu["notes"])

    def test_a_shared_device_splits_its_energy_by_utilisation(self):
        # Another run's process uses 20% of the device while this run uses 60%: this run's share
        # of the energy is 60 / 80.
        result, status = self.gpu_run(
            [{"segments": [{"util": 60, "power_w": 400}], "other_pids": [4194000],
              "other_util": 20}], 4, policy={"energy": {"pue": 1.5, "kg_co2_per_kwh": 0.4,
                                                        "usd_per_kwh": 0.2}})
        self.assertEqual(result.returncode, 0, result.stderr)
        gpu = status["gpu"]
        self.assertTrue(gpu["shared"])
        expected_joules = 400 * gpu["allocated_gpu_seconds"] * 0.75
        within(self, gpu["energy_joules"], expected_joules, what="energy share")
        within(self, gpu["energy_kwh"], expected_joules / 3.6e6 * 1.5, what="kWh x PUE")
        within(self, gpu["co2_kg"], gpu["energy_kwh"] * 0.4, what="CO2")
        self.assertIn("shared with processes outside the run", result.stderr)
        # The energy cost is reported, never added to spend.
        within(self, status["spend"], 36 / 3600 * status["elapsed_seconds"], 0.05, what="spend")

    def test_mig_slices_by_gpm_and_unmeasured_without(self):
        # The fake used to list processes and give device-level utilisation on a MIG GPU; the
        # driver does neither (nvml.h: NOT_SUPPORTED on MIG). The run's slice is found by its
        # MIG- UUID and measured through GPM; the whole GPU's energy is not charged to a slice.
        slice_ = {"uuid": "MIG-fake-0a", "gi": 1, "ci": 0, "gpm": True,
                  "segments": [{"util": 40}], "pid_file": self.path("pids")}
        device = {"pid_file": "", "segments": [{"util": 0, "power_w": 100}], "mig": [slice_]}
        result, status = self.gpu_run([device], 4,
                                      extra_env={"CUDA_VISIBLE_DEVICES": "MIG-fake-0a"})
        self.assertEqual(result.returncode, 0, result.stderr)
        gpu = status["gpu"]
        self.assertEqual(gpu["devices"], ["1 (MIG-fake-0a)"])
        self.assertEqual(gpu["utilisation_source"], "GPM (MIG slice)")
        within(self, gpu["mean_utilisation"], 0.4, what="GPM utilisation")
        self.assertNotIn("energy_joules", gpu)
        self.assertTrue(any("energy counter is the whole GPU's" in n for n in gpu["notes"]), gpu)
        # The older form names the same slice; without GPM the slice is not measured, and said.
        slice_["gpm"] = False
        result, status = self.gpu_run(
            [device], 2, extra_env={"CUDA_VISIBLE_DEVICES": "MIG-GPU-fake-0/1/0"})
        gpu = status["gpu"]
        self.assertEqual(gpu["devices"], ["1 (MIG-fake-0a)"])
        self.assertNotIn("mean_utilisation", gpu)
        self.assertTrue(any("no GPM" in n for n in gpu["notes"]), gpu)

    def test_idle_guard_stops_an_idle_run_and_leaves_a_busy_one(self):
        policy = {"guards": {"idle_gpu": {"below_percent": 5, "for": "2s"}}}
        result, status = self.gpu_run([{"segments": [{"util": 1, "power_w": 50}]}], 60,
                                      policy=policy)
        self.assertEqual(result.returncode, 123, result.stderr)
        self.assertEqual(status["reason"], "runaway:idle-gpu")
        self.assertTrue(status["stopped_by_spendcap"])
        self.assertLess(status["elapsed_seconds"], 30)
        self.assertIn("GPUs stayed under 5% utilisation", result.stderr)
        # Negative control: the same guard, a busy GPU.
        result, status = self.gpu_run([{"segments": [{"util": 90, "power_w": 300}]}], 5,
                                      policy=policy)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(status["reason"], "exited")
        # Turned off: the idle run that was stopped above runs to its end.
        policy["guards"]["idle_gpu"]["enabled"] = False
        result, status = self.gpu_run([{"segments": [{"util": 1, "power_w": 50}]}], 4,
                                      policy=policy)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(status["reason"], "exited")
        self.assertNotIn("has no effect", result.stderr)

    def test_the_ledger_keeps_the_figures_and_show_prints_them(self):
        result, status = self.gpu_run([{"segments": [{"seconds": 2, "util": 100, "power_w": 300},
                                                     {"util": 0, "power_w": 50}]}], 3)
        self.assertEqual(result.returncode, 0, result.stderr)
        gpu = status["gpu"]
        [row] = self.runs("id = ?", (status["run_id"],))
        self.assertEqual(row["gpu_measured"], 1)
        self.assertEqual(row["gpu_devices"], 1)
        # The ledger keeps the measured mean over the allocated time.
        self.assertAlmostEqual(row["gpu_busy_seconds"] / row["gpu_allocated_seconds"],
                               gpu["mean_utilisation"], places=6)
        self.assertAlmostEqual(row["gpu_allocated_seconds"], gpu["allocated_gpu_seconds"], places=6)
        self.assertEqual(row["gpu_idle_spend_micros"], round(gpu["idle_spend"] * 1e6))
        self.assertIsNone(row["gpu_co2_kg"])  # no kg_co2_per_kwh in the policy: not 0
        self.assertIsNone(row["gpu_energy_cost_micros"])
        timeline = json.loads(row["gpu_timeline"])
        self.assertEqual(len(timeline), 1)  # one minute
        shown = self.run_spendcap(["show", status["run_id"]])
        self.assertEqual(shown.returncode, 0, shown.stderr)
        self.assertRegex(shown.stdout, r"GPU: +1 device")
        self.assertIn("utilisation per minute (0-100%):\n", shown.stdout)
        self.assertRegex(shown.stdout, "[▁-█]")
        # Not measured: the ledger says why, with no figure.
        result, status = self.gpu_run([], 0.1, library=self.path("none.so"))
        [row] = self.runs("id = ?", (status["run_id"],))
        self.assertEqual(row["gpu_measured"], 0)
        self.assertIsNone(row["gpu_busy_seconds"])
        self.assertIsNone(row["gpu_allocated_seconds"])
        shown = self.run_spendcap(["show", status["run_id"]])
        self.assertRegex(shown.stdout, r"GPU: +not measured \(no NVML library")
        missing = self.run_spendcap(["show", "no-such-run"])
        self.assertEqual(missing.returncode, 125)
        self.assertIn("show no-such-run: no such run", missing.stderr)

    def test_without_nvml_the_run_works_and_says_not_measured(self):
        result, status = self.gpu_run([], 0.2, library=self.path("no-such-libnvidia-ml.so.1"))
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(status["gpu"], {"measured": False, "why": "no NVML library (%s)"
                                         % self.path("no-such-libnvidia-ml.so.1")})
        self.assertIn("GPU: not measured (no NVML library", result.stderr)
        gpu_lines = [line for line in result.stderr.splitlines() if "GPU" in line]
        for line in gpu_lines:
            self.assertNotRegex(line, r"(?<![\d.])0(\.0+)?( |%|$)", line)
        # Negative control: the same run with the fake does measure.
        result, status = self.gpu_run([{"segments": [{"util": 50}]}], 0.2)
        self.assertTrue(status["gpu"]["measured"], status)

    def test_measured_billing_charges_busy_gpu_time_only(self):
        # 50% busy: under --billing measured the GPU part (here the whole --rate) is half.
        result, status = self.gpu_run([{"segments": [{"util": 50, "power_w": 200}]}], 4,
                                      extra_args=["--billing", "measured"])
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(status["billing"], "measured")
        allocated = 36 / 3600 * status["elapsed_seconds"]
        within(self, status["allocated_spend"], allocated, 0.05, what="allocated spend")
        within(self, status["spend"], allocated * 0.5, 0.05, what="measured spend")
        within(self, status["gpu"]["idle_spend"], allocated * 0.5, 0.05, what="idle spend")
        self.assertIn("measured billing: ", result.stderr)
        [row] = self.runs("id = ?", (status["run_id"],))
        self.assertEqual(row["spend_micros"], round(status["spend"] * 1e6))
        self.assertIn("measured billing", row["gpu_sources"])
        # The policy says it too; a run whose budget trips at the allocated rate still trips,
        # and ends under its budget both ways.
        result, status = self.gpu_run(
            [{"segments": [{"util": 50, "power_w": 200}]}], 60, budget="0.05",
            policy={"defaults": {"billing": "measured"}},
            extra_args=["--grace", "1s", "--kill-after", "1s"])
        self.assertEqual(result.returncode, 124, result.stderr)
        self.assertEqual(status["reason"], "budget:run")
        self.assertEqual(status["billing"], "measured")
        self.assertLessEqual(status["allocated_spend"], 0.05)
        # Half of the measured time was idle; an unmeasured period is billed as allocated.
        gpu = status["gpu"]
        measured = gpu["measured_gpu_seconds"] / gpu["allocated_gpu_seconds"]
        self.assertLessEqual(status["spend"],
                             status["allocated_spend"] * (1 - 0.5 * measured) + 0.0001)
        self.assertLess(status["spend"], status["allocated_spend"] * 0.6)
        self.assertNotIn("has no effect", result.stderr)
        # Negative control: measured billing without NVML bills as allocated, and says so.
        result, status = self.gpu_run([], 1, library=self.path("none.so"),
                                      extra_args=["--billing", "measured"])
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(status["billing"], "allocated")
        self.assertNotIn("allocated_spend", status)
        within(self, status["spend"], 36 / 3600 * status["elapsed_seconds"], 0.05, what="spend")
        self.assertIn("billed as allocated", status["billing_note"])
        bad = self.run_spendcap(["run", "--budget", "1", "--rate", "1", "--billing", "busy",
                                 "--", "true"])
        self.assertEqual(bad.returncode, 125)
        self.assertIn("--billing busy", bad.stderr)

    def test_the_end_event_carries_the_measured_utilisation(self):
        from test_webhooks import Endpoint
        endpoint = Endpoint()
        self.addCleanup(endpoint.close)
        hook = {"url_env": "HOOK_URL", "format": "json", "events": ["finished"]}
        result, status = self.gpu_run([{"segments": [{"util": 50, "power_w": 200}]}], 2,
                                      policy={"webhooks": [hook]},
                                      extra_env={"HOOK_URL": endpoint.url})
        self.assertEqual(result.returncode, 0, result.stderr)
        [event] = [e for e in endpoint.events() if e["event"] == "finished"]
        within(self, event["gpu_utilisation"], status["gpu"]["mean_utilisation"], 0.001,
               what="webhook utilisation")
        within(self, event["gpu_utilisation"], 0.5, what="utilisation")
        # Negative control: not measured, no figure at all (never 0).
        endpoint.requests.clear()
        result, status = self.gpu_run([], 0.2, library=self.path("none.so"),
                                      extra_env={"HOOK_URL": endpoint.url})
        [event] = [e for e in endpoint.events() if e["event"] == "finished"]
        self.assertNotIn("gpu_utilisation", event)

    def test_the_input_bound_hint_names_cpu_bound_and_io_bound(self):
        fixture = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures",
                               "input_feed.py")
        idle = [{"segments": [{"util": 10, "power_w": 80}]}]
        # Three loader processes burning CPU on this machine's CPUs while the GPU idles.
        result, status = self.gpu_run(idle, 0, job="python3 %s cpu 3 4" % fixture)
        self.assertEqual(result.returncode, 0, result.stderr)
        hint = status["gpu"]["input_hint"]
        self.assertEqual(hint["kind"], "cpu-bound", hint)
        self.assertIn("preprocessing / augmentation is the bottleneck", result.stderr)
        # The trainer blocked in read() on a slow feed.
        result, status = self.gpu_run(idle, 0, job="python3 %s io 4" % fixture)
        self.assertEqual(result.returncode, 0, result.stderr)
        hint = status["gpu"]["input_hint"]
        self.assertEqual(hint["kind"], "io-bound", hint)
        self.assertIn("the disk or network feed is the bottleneck", result.stderr)
        self.assertIn("I/O wait time itself cannot be seen", hint["text"])
        # Negative controls: a job that only sleeps is neither; a busy GPU gets no hint.
        result, status = self.gpu_run(idle, 3)
        self.assertEqual(status["gpu"]["input_hint"]["kind"], "neither", status["gpu"])
        result, status = self.gpu_run([{"segments": [{"util": 95, "power_w": 300}]}], 0,
                                      job="python3 %s cpu 3 3" % fixture)
        self.assertNotIn("input_hint", status["gpu"])
        self.assertNotIn("input-bound hint", result.stderr)


if __name__ == "__main__":
    unittest.main()
