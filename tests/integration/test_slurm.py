"""Slurm (issue 13, tests 1 and 2). Against a real single-node Slurm (slurm_harness.py): batch
scripts `exec spendcap run ...`, so spendcap is the batch shell; a run carries the job's Slurm tags;
`scancel --signal=TERM --batch` and a plain `scancel` end the run as preempted after the job's
checkpoint; a budget trip ends the job with 124, as `sbatch --wait` returns it. When Slurm cannot
start, those tests skip with the reason; the simulated ones (Slurm's environment, a SIGTERM as
Slurm sends it) still run."""
import json
import os
import signal
import subprocess
import textwrap
import unittest

from slurm_harness import SlurmCluster, SlurmUnavailable
from spendcap_testlib import SPENDCAP, LedgerTest, wait_until

JOB = textwrap.dedent("""\
    import os, signal, sys, time
    ready, checkpoint = sys.argv[1], sys.argv[2]
    def on_checkpoint(signum, frame):
        with open(checkpoint, "a") as f:
            f.write("checkpoint\\n")
        done = os.environ.get("SPENDCAP_CHECKPOINT_DONE")
        if done and len(sys.argv) > 3:
            open(done, "w").close()
    signal.signal(signal.SIGUSR1, on_checkpoint)
    open(ready, "w").write(os.environ.get("SLURM_JOB_ID", ""))
    while True:
        time.sleep(1)
    """)


def forward_flag_built():
    text = subprocess.run([SPENDCAP, "run", "--help"], capture_output=True, text=True).stdout
    return "--forward" in text


class SlurmEnvironmentTest(LedgerTest):
    """Test 2, simulated: Slurm's environment and its SIGTERM, without Slurm."""

    SLURM_ENV = {"SLURM_JOB_ID": "4242", "SLURM_ARRAY_JOB_ID": "4240", "SLURM_ARRAY_TASK_ID": "2",
                 "SLURM_JOB_PARTITION": "gpu", "SLURM_JOB_NAME": "sweep"}

    def test_slurm_tags_and_sigterm_preemption(self):
        with open(self.path("job.py"), "w") as f:
            f.write(JOB)
        process = self.start_spendcap(
            ["run", "--rate", "1", "--budget", "10", "--status-file", self.path("status.json"),
             "--", "python3", self.path("job.py"), self.path("ready"), self.path("checkpoint"),
             "done"], extra_env=self.SLURM_ENV)
        self.wait_for_file("ready")
        process.send_signal(signal.SIGTERM)  # Slurm's preemption, scancel, or the time limit
        process.communicate(timeout=60)
        self.assertEqual(process.returncode, -signal.SIGTERM)
        self.assertEqual(self.read_json("status.json")["status"], "preempted")
        self.assertTrue(os.path.exists(self.path("checkpoint")))
        row, = self.runs()
        self.assertEqual(row["status"], "preempted")
        tags = json.loads(row["tags"])
        self.assertEqual(tags["slurm_job_id"], "4242")
        self.assertEqual(tags["slurm_array_task_id"], "2")
        self.assertEqual(tags["slurm_partition"], "gpu")


class RealSlurmTest(LedgerTest):
    """Test 1, against a real slurmctld + slurmd."""
    cluster = None
    reason = None

    @classmethod
    def setUpClass(cls):
        cluster = SlurmCluster()
        try:
            cluster.start()
            cls.cluster = cluster
        except SlurmUnavailable as error:
            cls.reason = str(error)

    @classmethod
    def tearDownClass(cls):
        if cls.cluster:
            cls.cluster.stop()

    def setUp(self):
        if not self.cluster:
            self.skipTest("Slurm did not start: %s" % self.reason)
        super().setUp()
        os.chmod(self.tmp, 0o755)
        with open(self.path("job.py"), "w") as f:
            f.write(JOB)
        self.ledger = self.path("ledger.db")

    def batch_script(self, spendcap_args, command):
        script = self.path("job.sh")
        with open(script, "w") as f:
            f.write("#!/bin/sh\nexec %s run --ledger %s --status-file %s %s -- %s\n" % (
                SPENDCAP, self.ledger, self.path("status.json"), " ".join(spendcap_args),
                " ".join(command)))
        os.chmod(script, 0o755)
        return script

    def submit_waiting(self, script):
        """`sbatch --wait`, running: returns (Popen, job id)."""
        sbatch = subprocess.Popen(["sbatch", "--wait", "--parsable", "-o", self.path("job.out"),
                                   script], env=self.cluster.env | self.env,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.addCleanup(lambda: sbatch.poll() is None and sbatch.kill())
        job_id = wait_until(lambda: self._read_ready(), 30, what="the job to start")
        return sbatch, job_id

    def _read_ready(self):
        try:
            with open(self.path("ready")) as f:
                return f.read() or None
        except OSError:
            return None

    def rows(self):
        import sqlite3
        connection = sqlite3.connect("file:%s?mode=ro" % self.ledger, uri=True, timeout=30)
        connection.row_factory = sqlite3.Row
        try:
            return [dict(r) for r in connection.execute("SELECT * FROM runs")]
        finally:
            connection.close()

    def job_args(self, done=True):
        return ["python3", self.path("job.py"), self.path("ready"), self.path("checkpoint")] + (
            ["done"] if done else [])

    def test_budget_trip_ends_the_job_with_124_and_the_run_carries_slurm_tags(self):
        script = self.batch_script(["--rate", "36", "--budget", "0.05", "--grace", "1s",
                                    "--kill-after", "1s"], self.job_args())
        result = subprocess.run(["sbatch", "--wait", "--parsable", "-o", self.path("job.out"),
                                 script], env=self.cluster.env | self.env, capture_output=True,
                                text=True, timeout=60)
        self.assertEqual(result.returncode, 124, result.stderr)
        job_id = result.stdout.strip()
        status = self.read_json("status.json")
        self.assertEqual(status["reason"], "budget:run")
        row, = self.rows()
        self.assertEqual(row["status"], "killed")
        self.assertEqual(json.loads(row["tags"])["slurm_job_id"], job_id)
        self.assertEqual(json.loads(row["tags"])["slurm_partition"], "test")

    def test_scancel_term_to_the_batch_shell_checkpoints_and_ends_preempted(self):
        script = self.batch_script(["--rate", "1", "--budget", "10"], self.job_args())
        sbatch, job_id = self.submit_waiting(script)
        self.cluster.run(["scancel", "--signal=TERM", "--batch", job_id])
        sbatch.communicate(timeout=60)
        wait_until(lambda: self.cluster.job_ended(job_id), 30, what="the job to end")
        self.assertTrue(os.path.exists(self.path("checkpoint")), "the job checkpointed")
        self.assertEqual(self.read_json("status.json")["status"], "preempted")
        self.assertEqual([r["status"] for r in self.rows()], ["preempted"])

    def test_plain_scancel_ends_the_run_preempted(self):
        # TERM to every process of the job at once: the job dies of it, spendcap stops the rest.
        script = self.batch_script(["--rate", "1", "--budget", "10"], self.job_args())
        sbatch, job_id = self.submit_waiting(script)
        self.cluster.run(["scancel", job_id])
        sbatch.communicate(timeout=60)
        wait_until(lambda: self.cluster.job_ended(job_id), 30, what="the job to end")
        status = self.read_json("status.json")
        self.assertEqual(status["status"], "preempted")
        # Either spendcap's own SIGTERM came first, or the job died of its SIGTERM first.
        self.assertIn(status["reason"], ("signal:SIGTERM", "exited"))
        self.assertEqual([r["status"] for r in self.rows()], ["preempted"])

    @unittest.skipUnless(forward_flag_built(), "spendcap run has no --forward on this branch")
    def test_scancel_usr1_is_a_checkpoint_request_that_does_not_stop_the_job(self):
        script = self.batch_script(["--rate", "1", "--budget", "10"], self.job_args(done=False))
        sbatch, job_id = self.submit_waiting(script)
        self.cluster.run(["scancel", "--signal=USR1", "--batch", job_id])
        wait_until(lambda: os.path.exists(self.path("checkpoint")), 30,
                   what="the job's checkpoint")
        self.assertIsNone(sbatch.poll(), "the job runs on")
        self.assertFalse(self.cluster.job_ended(job_id))
        self.cluster.run(["scancel", job_id])
        sbatch.communicate(timeout=60)


if __name__ == "__main__":
    unittest.main()
