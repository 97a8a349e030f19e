"""A real PyTorch training job (Debian's python3-torch) under spendcap, in its PID namespace.

It trains with a DataLoader of 2 worker processes; the budget trips; its SIGUSR1 handler saves a
checkpoint with torch.save, which torch.load reads back; nothing of the tree (workers included) is
left. Debian's modules are imported by /usr/bin/python3: the python3 first on PATH may be another.
"""
import os
import subprocess
import unittest

from spendcap_testlib import FIXTURES, SpendcapTest, processes_with_marker

DEBIAN_PYTHON = "/usr/bin/python3"


def torch_available():
    if not os.path.exists(DEBIAN_PYTHON):
        return False
    return subprocess.run([DEBIAN_PYTHON, "-c", "import torch"], capture_output=True,
                          timeout=120).returncode == 0


@unittest.skipUnless(torch_available(), "Debian's python3-torch is not installed "
                     "(scripts/setup.sh installs it)")
class TorchTrainingTest(SpendcapTest):
    def test_training_checkpoints_on_the_trip_and_leaves_no_worker(self):
        checkpoint = self.path("model.pt")
        # $36/h: the $0.30 budget trips at 25 s (grace 3 s + kill-after 1 s + 1 s of slack
        # reserved); torch's import and the workers' start take a few seconds of that, and more
        # than 10 s on a 2-core machine under a parallel build.
        result = self.run_spendcap(
            ["run", "--verbose", "--isolation", "pid", "--rate", "36", "--budget", "0.30", "--grace", "3s",
             "--kill-after", "1s", "--status-file", self.path("status.json"), "--",
             DEBIAN_PYTHON, os.path.join(FIXTURES, "torch_train.py"), checkpoint,
             self.path("ready")], timeout=180)
        self.assertEqual(result.returncode, 124, result.stderr)
        self.assertIn("isolation: pid namespace", result.stderr)
        self.assertTrue(os.path.exists(self.path("ready")),
                        "training never got going before the trip:\n" + result.stderr)
        self.assertIn("torch_train: checkpoint at step", result.stdout)
        status = self.read_json("status.json")
        self.assertEqual(status["reason"], "budget:run")
        self.assertEqual(status["isolation"], "pid")
        self.assertGreaterEqual(status["checkpoint_signalled"], 1)
        self.assertLessEqual(status["spend"], 0.30)
        # The checkpoint is real: torch.load reads it back into the same model.
        check = subprocess.run(
            [DEBIAN_PYTHON, "-c",
             "import sys, torch\n"
             "state = torch.load(sys.argv[1])\n"
             "model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(),"
             " torch.nn.Linear(32, 1))\n"
             "model.load_state_dict(state['model'])\n"
             "assert state['step'] >= 5, state['step']\n"
             "print(state['step'])\n", checkpoint], capture_output=True, text=True, timeout=120)
        self.assertEqual(check.returncode, 0, check.stderr)
        # Nothing of the tree is left: not the trainer, not its DataLoader workers.
        self.assertEqual(processes_with_marker(self.marker), [])


if __name__ == "__main__":
    unittest.main()
