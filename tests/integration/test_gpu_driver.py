"""GPU measurement against a fake NVML that behaves as the driver does (tests/fixtures/fake_nvml):
per-process samples each with its own timestamp and none for 0% processes, NOT_FOUND, pids
translated into the caller's namespace, shared devices, a container's view, MIG, MPS, list races
and a call that hangs. Loaded through the real dlopen path ($SPENDCAP_NVML_LIBRARY)."""
import json
import os
import re
import shutil
import subprocess
import sys
import time
import unittest

from spendcap_testlib import SPENDCAP
import test_gpu
from test_gpu import FAKE_CURRENT, FAKE_OLD, within

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# A line for a pid file: the pid as the writer sees it and its PID namespace.
PID_LINE = "echo $$ $(readlink /proc/$$/ns/pid)"


def notes_with(gpu, text):
    return [n for n in gpu.get("notes", []) if text in n]


class GpuDriverTest(test_gpu.GpuRunner):
    def test_a_short_steady_job_reads_its_load_and_its_whole_energy(self):
        # The first and the last partial interval are measured: 6 s at a steady 50% is 50%, and
        # all of its 6 s of power (the stand-in used to say 40-42% and 5 of 6 seconds).
        result, status = self.gpu_run([{"segments": [{"util": 50, "power_w": 200}]}], 6)
        self.assertEqual(result.returncode, 0, result.stderr)
        gpu = status["gpu"]
        within(self, gpu["mean_utilisation"], 0.5, 0.03, what="utilisation")
        within(self, gpu["energy_joules"], 200 * status["elapsed_seconds"], 0.03, what="energy")
        # One line per line: no escaped newline before the notes or the hint.
        self.assertNotIn("\\n", result.stderr)

    def test_several_processes_of_the_run_add_up_and_a_tenant_never_dilutes(self):
        # Two processes of the run at 40% each (the fake splits the run's 80%), with their own
        # timestamps; a process outside the run at 90% on the same GPU.
        # gpu_run writes the main shell's line; the second process appends its own. Until the
        # tree walk (every --interval) sees a new process, its samples count as outside the run.
        job = "sh -c '%s >> %s; exec sleep 4' & exec sleep 4" % (PID_LINE, self.path("pids"))
        result, status = self.gpu_run(
            [{"segments": [{"util": 80, "power_w": 300}],
              "tenants": [{"pids": [4194000], "util": 90}]}], 0, job=job,
            extra_args=["--interval", "200ms"])
        self.assertEqual(result.returncode, 0, result.stderr)
        gpu = status["gpu"]
        within(self, gpu["mean_utilisation"], 0.8, 0.05, what="two processes' sum")
        self.assertTrue(gpu["shared"])
        # The case: the run at 8% next to another process at 90% is 8%, over the idle
        # guard's 5%, and is not stopped.
        policy = {"guards": {"idle_gpu": {"below_percent": 5, "for": "2s"}}}
        result, status = self.gpu_run(
            [{"segments": [{"util": 8}], "tenants": [{"pids": [4194000], "util": 90}]}], 5,
            policy=policy)
        self.assertEqual(result.returncode, 0, result.stderr)
        within(self, status["gpu"]["mean_utilisation"], 0.08, 0.1, what="not diluted")
        # Negative control: at 2% next to the same tenant it is idle, and stopped.
        result, status = self.gpu_run(
            [{"segments": [{"util": 2}], "tenants": [{"pids": [4194000], "util": 90}]}], 60,
            policy=policy)
        self.assertEqual(result.returncode, 123, result.stderr)
        self.assertEqual(status["reason"], "runaway:idle-gpu")

    def test_a_gpu_shared_with_a_second_real_spendcap_run(self):
        # Two spendcap runs on GPU 0 at once: one at 30%, the other at 60%. Each measures its own
        # share, and takes its share of the power by utilisation.
        pid_a, pid_b = self.path("pids-a"), self.path("pids-b")
        scenario = {"devices": [{"uuid": "GPU-fake-0", "segments": [{"power_w": 300}],
                                 "tenants": [{"pid_file": pid_a, "util": 30},
                                             {"pid_file": pid_b, "util": 60}]}]}
        with open(self.path("scenario.json"), "w") as f:
            json.dump(scenario, f)
        env = {"SPENDCAP_NVML_LIBRARY": FAKE_CURRENT,
               "FAKE_NVML_SCENARIO": self.path("scenario.json"), "CUDA_VISIBLE_DEVICES": "0"}
        runs = []
        for pid_file, name in ((pid_a, "a"), (pid_b, "b")):
            runs.append(self.start_spendcap(
                ["run", "--budget", "5", "--rate", "36", "--status-file",
                 self.path("status-%s.json" % name), "--", "sh", "-c",
                 "%s > %s; exec sleep 5" % (PID_LINE, pid_file)], env))
        for run in runs:
            out, err = run.communicate(timeout=60)
            self.assertEqual(run.returncode, 0, err)
        a = self.read_json("status-a.json")["gpu"]
        b = self.read_json("status-b.json")["gpu"]
        within(self, a["mean_utilisation"], 0.3, 0.08, what="run a")
        within(self, b["mean_utilisation"], 0.6, 0.08, what="run b")
        self.assertTrue(a["shared"] and b["shared"])
        within(self, a["energy_joules"] / b["energy_joules"], 0.5, 0.1, what="energy shares")

    def test_pids_in_the_callers_namespace_only(self):
        # A process the caller knows as pid 1 (its init) is busy at 90%; the job's own inner pid
        # may be 1 or 2 in its namespace. Only the caller's pids are matched: the run is at 10%.
        result, status = self.gpu_run(
            [{"segments": [{"util": 10}], "tenants": [{"pids": [1, 2], "util": 90}]}], 3)
        self.assertEqual(result.returncode, 0, result.stderr)
        within(self, status["gpu"]["mean_utilisation"], 0.1, 0.1, what="own pids only")

    def test_a_container_view(self):
        # Processes the caller cannot see keep the device busy: said, and the device is shared.
        result, status = self.gpu_run([{"segments": [{"util": 0, "power_w": 100}],
                                        "hidden_util": 50}], 3)
        self.assertEqual(result.returncode, 0, result.stderr)
        gpu = status["gpu"]
        self.assertTrue(gpu["shared"], gpu)
        self.assertTrue(notes_with(gpu, "busy with no process this run can see"), gpu)
        if not shutil.which("unshare") or os.geteuid() != 0:
            self.skipTest("needs unshare(1) and root for a PID namespace without its own /proc")
        # spendcap in a PID namespace whose /proc is not its own: its pids cannot be matched,
        # it says so and measures device-level.
        with open(self.path("scenario.json"), "w") as f:
            json.dump({"devices": [{"segments": [{"util": 40}], "pid_file": self.path("pids")}]}, f)
        env = self.spendcap_env({"SPENDCAP_NVML_LIBRARY": FAKE_CURRENT,
                                 "FAKE_NVML_SCENARIO": self.path("scenario.json"),
                                 "CUDA_VISIBLE_DEVICES": "0"})
        result = subprocess.run(
            ["unshare", "--pid", "--fork", SPENDCAP, "run", "--budget", "5", "--rate", "36",
             "--status-file", self.path("status.json"), "--", "sleep", "3"],
            env=env, cwd=self.tmp, capture_output=True, text=True, timeout=60)
        self.assertEqual(result.returncode, 0, result.stderr)
        gpu = self.read_json("status.json")["gpu"]
        self.assertTrue(notes_with(gpu, "/proc is not this process's PID namespace"), gpu)
        self.assertEqual(gpu["utilisation_source"], "device-level")
        within(self, gpu["mean_utilisation"], 0.4, 0.05, what="device-level")

    def test_mps_clients_behind_the_server_are_unmeasured(self):
        # The run's processes are MPS clients; the driver's samples carry the server's pid.
        policy = {"guards": {"idle_gpu": {"below_percent": 5, "for": "2s"}}}
        result, status = self.gpu_run([{"segments": [{"util": 0}], "mps_server_pid": 4194001}], 4,
                                      policy=policy)
        self.assertEqual(result.returncode, 0, result.stderr)  # never taken for idle
        gpu = status["gpu"]
        self.assertEqual(gpu["devices"], ["0 (GPU-fake-0)"])
        # Before the job's pid is known the device had no process of the run (0%); from then on
        # nothing is measured.
        self.assertLess(gpu.get("measured_gpu_seconds", 0), 1.5, gpu)
        self.assertTrue(notes_with(gpu, "MPS clients"), gpu)

    def test_idle_guard_without_device_samples_uses_the_utilisation_rates(self):
        # An idle job (0%: the driver has no per-process sample for it, NOT_FOUND) on a driver
        # without device samples: nvmlDeviceGetSamples missing (the old library) or answering
        # NOT_SUPPORTED. Every interval used to be unmeasured and the guard never tripped
        # ("busy time not measured", exit 0); nvmlDeviceGetUtilizationRates now measures it.
        policy = {"guards": {"idle_gpu": {"below_percent": 5, "for": "2s"}}}
        for library, device in ((FAKE_OLD, {}), (FAKE_CURRENT, {"device_samples": "not_supported"})):
            device = dict(device, segments=[{"util": 0, "power_w": 50}])
            result, status = self.gpu_run([device], 60, library=library, policy=policy)
            what = "%s %s: %s" % (library, device, result.stderr)
            self.assertEqual(result.returncode, 123, what)
            self.assertEqual(status["reason"], "runaway:idle-gpu", what)
            self.assertLess(status["elapsed_seconds"], 30, what)
            gpu = status["gpu"]
            self.assertIn("device-level", gpu["utilisation_source"], gpu)
            self.assertTrue(notes_with(gpu, "device-level utilisation"), gpu)
            self.assertIn("device-level", result.stderr)
            self.assertNotIn("busy time not measured", result.stderr)
        # Negative control: a busy job on the same drivers is measured busy and runs to its end.
        for library, device in ((FAKE_OLD, {}), (FAKE_CURRENT, {"device_samples": "not_supported"})):
            device = dict(device, segments=[{"util": 90, "power_w": 300}])
            result, status = self.gpu_run([device], 4, library=library, policy=policy)
            self.assertEqual(result.returncode, 0, result.stderr)
            within(self, status["gpu"]["mean_utilisation"], 0.9, 0.1, what="busy")

    def test_list_races_and_no_permission(self):
        # The first three fills find one more process than they were sized for: the size loop
        # keeps growing its buffer (one retry would give up).
        result, status = self.gpu_run([{"segments": [{"util": 70}], "size_race": 3}], 3)
        self.assertEqual(result.returncode, 0, result.stderr)
        within(self, status["gpu"]["mean_utilisation"], 0.7, 0.05, what="after the race")
        # NO_PERMISSION for per-process utilisation: device-level over the interval, and said.
        result, status = self.gpu_run(
            [{"segments": [{"util": 30}], "process_utilisation": "no_permission"}], 3)
        gpu = status["gpu"]
        self.assertEqual(gpu["utilisation_source"], "device-level")
        within(self, gpu["mean_utilisation"], 0.3, 0.05, what="device-level")
        self.assertTrue(notes_with(gpu, "no permission"), gpu)

    def test_a_stuck_driver_call_never_delays_a_trip_or_the_exit(self):
        # From 1 s on, one NVML call hangs for 60 s. The budget trips at about 2 s; the kill path
        # and the exit go on without waiting for the driver.
        with open(self.path("scenario.json"), "w") as f:
            json.dump({"block_after": 1, "block_seconds": 60,
                       "devices": [{"segments": [{"util": 50}], "pid_file": self.path("pids")}]},
                      f)
        env = {"SPENDCAP_NVML_LIBRARY": FAKE_CURRENT,
               "FAKE_NVML_SCENARIO": self.path("scenario.json"), "CUDA_VISIBLE_DEVICES": "0"}
        started = time.monotonic()
        result = self.run_spendcap(
            ["run", "--budget", "0.05", "--rate", "36", "--grace", "1s", "--kill-after", "1s",
             "--status-file", self.path("status.json"), "--", "sh", "-c",
             "%s > %s; exec sleep 60" % (PID_LINE, self.path("pids"))], env)
        took = time.monotonic() - started
        self.assertEqual(result.returncode, 124, result.stderr)
        self.assertLess(took, 30, "spendcap waited on the stuck NVML call")
        status = self.read_json("status.json")
        self.assertEqual(status["reason"], "budget:run")

    def test_devices_by_uuid_prefix_and_unresolved_cuda_indices(self):
        devices = [{"uuid": "GPU-1111-aaaa", "name": "NVIDIA A", "segments": [{"util": 0}],
                    "pid_file": ""},
                   {"uuid": "GPU-2222-bbbb", "name": "NVIDIA B", "segments": [{"util": 60}],
                    "pid_file": ""}]
        result, status = self.gpu_run(devices, 2, extra_env={"CUDA_VISIBLE_DEVICES": "GPU-2222"})
        self.assertEqual(status["gpu"]["devices"], ["1 (GPU-2222-bbbb)"])
        # Unlike GPUs and CUDA's default order: index 1 is not NVML's 1, and the run says so.
        result, status = self.gpu_run(devices, 1, extra_env={"CUDA_VISIBLE_DEVICES": "1"})
        self.assertFalse(status["gpu"]["measured"], status["gpu"])
        self.assertIn("not resolved", status["gpu"]["why"])
        result, status = self.gpu_run(devices, 1, extra_env={"CUDA_VISIBLE_DEVICES": "1",
                                                             "CUDA_DEVICE_ORDER": "PCI_BUS_ID"})
        self.assertEqual(status["gpu"]["devices"], ["1 (GPU-2222-bbbb)"])

    def test_the_device_check_script_parses(self):
        script = os.path.join(ROOT, "scripts", "gpu_check.sh")
        self.assertEqual(subprocess.run(["bash", "-n", script]).returncode, 0)
        with open(script) as f:
            text = f.read()
        # Its Python parts sit between "<<'PY'" and "PY" lines.
        parts = re.split(r"<<'PY'[^\n]*\n", text)[1:]
        self.assertTrue(parts, "no python parts found")
        for i, part in enumerate(parts):
            source = part.split("\nPY\n")[0]
            path = self.path("part%d.py" % i)
            with open(path, "w") as f:
                f.write(source)
            compiled = subprocess.run([sys.executable, "-m", "py_compile", path],
                                      capture_output=True, text=True)
            self.assertEqual(compiled.returncode, 0, compiled.stderr)


if __name__ == "__main__":
    unittest.main()
