"""Multi-node runs (issue 13, test 3): wrappers that join one run id (`--run-id`, one per node as
`srun spendcap run ...` starts them) on a shared ledger. Each is its own ledger row with its own
ceiling; the run's --budget holds across all of them; `spendcap stop --job ID` stops every one."""
import os
import signal
import subprocess
import unittest

from spendcap_testlib import LedgerTest, wait_until

# The job says it started, then sleeps until stopped.
SLEEPER = "import sys, time; open(sys.argv[1], 'w').close(); time.sleep(120)"


class MultiNodeTest(LedgerTest):
    # 36/h = 0.01/s; a ceiling claimed 2 s ahead; reserve 0.01 (grace 0s, kill-after 1s).
    DEFAULTS = {"grace": "0s", "kill_after": "1s", "sync": "1s", "claim_horizon": "2s"}

    def start_node(self, node, run_id, budget, extra_env=None):
        env = {"SLURMD_NODENAME": node}
        env.update(extra_env or {})
        return self.start_spendcap(
            ["run", "--run-id", run_id, "--rate", "36", "--budget", budget,
             "--status-file", self.path("%s.json" % node), "--",
             "python3", "-c", SLEEPER, self.path("%s.started" % node)],
            extra_env=env, stdout=subprocess.DEVNULL)

    def finish(self, process):
        try:
            _, err = process.communicate(timeout=90)
        except subprocess.TimeoutExpired:
            process.kill()
            raise
        return err

    def test_the_run_budget_holds_across_both_nodes(self):
        self.write_policy({"defaults": self.DEFAULTS})
        nodes = [self.start_node(n, "train-7", "0.12") for n in ("node-a", "node-b")]
        errors = [self.finish(p) for p in nodes]
        for process, err in zip(nodes, errors):
            self.assertEqual(process.returncode, 124, err)  # each node tripped the run's budget
        rows = self.runs("job_key = ?", ("train-7",))
        self.assertEqual(len(rows), 2)
        self.assertEqual(sorted(r["id"] for r in rows),
                         sorted(self.read_json("%s.json" % n)["run_id"]
                                for n in ("node-a", "node-b")))
        spends = [self.read_json("%s.json" % n)["spend"] for n in ("node-a", "node-b")]
        # Both nodes ran and spent (one budget shared, not one node refused)...
        self.assertTrue(all(s > 0.01 for s in spends), spends)
        # ...and together they stayed within the run's one budget, not one budget per node
        # (a small margin for the last interval's rounding).
        self.assertLessEqual(sum(spends), 0.12 + 0.005, spends)
        tags = [r["tags"] for r in rows]
        self.assertTrue(any("node-a" in t for t in tags) and any("node-b" in t for t in tags),
                        tags)

    def test_a_stop_on_the_run_stops_every_node(self):
        self.write_policy({"defaults": dict(self.DEFAULTS, claim_horizon="1m")})
        nodes = {n: self.start_node(n, "train-8", "10") for n in ("node-a", "node-b")}
        # A third wrapper on another run id: the negative control, which the stop must not reach.
        other = self.start_node("node-c", "train-9", "10")
        for n in ("node-a", "node-b", "node-c"):
            wait_until(lambda: os.path.exists(self.path("%s.started" % n)), 60,
                       what="node %s's job to start" % n)
        ps = self.spendcap_json(["ps"])
        ps_runs = ps if isinstance(ps, list) else ps.get("runs", [])
        self.assertEqual(sorted(r.get("job_key") for r in ps_runs
                                if r.get("job_key") == "train-8"), ["train-8", "train-8"], ps)

        result = self.run_spendcap(["stop", "--job", "train-8", "--reason", "node-a diverged"])
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("2 running wrappers", result.stdout)
        for node, process in nodes.items():
            err = self.finish(process)
            self.assertEqual(process.returncode, 123, err)
            self.assertEqual(self.read_json("%s.json" % node)["reason"], "stop-order")
        self.assertIsNone(other.poll())  # the other run goes on
        other.send_signal(signal.SIGTERM)
        self.finish(other)
        # A new wrapper joining the stopped run is refused until the order is cleared.
        refused = self.run_spendcap(["run", "--run-id", "train-8", "--rate", "36", "--budget", "10",
                                     "--", "true"])
        self.assertEqual(refused.returncode, 120, refused.stderr)

    def test_run_id_errors(self):
        self.write_policy({"defaults": self.DEFAULTS})
        result = self.run_spendcap(["run", "--run-id", "slurm", "--rate", "1", "--budget", "1",
                                    "--", "true"])
        self.assertEqual(result.returncode, 125, result.stderr)
        self.assertIn("SLURM_JOB_ID", result.stderr)
        result = self.run_spendcap(["run", "--run-id", "a", "--job-key", "b", "--rate", "1",
                                    "--budget", "1", "--", "true"])
        self.assertEqual(result.returncode, 125, result.stderr)
        self.assertIn("--job-key b", result.stderr)
        # Under Slurm, `--run-id slurm` is the job and step every task of one srun shares.
        result = self.run_spendcap(
            ["run", "--run-id", "slurm", "--rate", "1", "--budget", "1",
             "--status-file", self.path("slurm.json"), "--", "true"],
            extra_env={"SLURM_JOB_ID": "4242", "SLURM_STEP_ID": "0"})
        self.assertEqual(result.returncode, 0, result.stderr)
        rows = self.runs("id = ?", (self.read_json("slurm.json")["run_id"],))
        self.assertEqual(rows[0]["job_key"], "slurm-4242.0")


if __name__ == "__main__":
    unittest.main()
