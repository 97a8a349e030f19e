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

    def start_node(self, node, run_id, budget, extra_env=None, extra_args=()):
        env = {"SLURMD_NODENAME": node}
        env.update(extra_env or {})
        return self.start_spendcap(
            ["run", "--run-id", run_id, "--rate", "36", "--budget", budget,
             "--status-file", self.path("%s.json" % node)] + list(extra_args) + ["--",
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

    # ---- issue 23: one node's trip stops every node ----

    def one_node_trips(self, run_id, a_args=(), a_env=None, trigger=None, policy=None):
        """Starts node-a (with `a_args`) and node-b, both with jobs that sleep 120 s, lets
        `trigger(node_a)` trip node-a (or its own flags do), and returns both status files once
        both wrappers ended. The bound: node-b's job would sleep on for minutes; it must end by
        the run's stop within 90 s."""
        self.write_policy(policy or {"defaults": dict(self.DEFAULTS, claim_horizon="1m")})
        # node-b first: node-a may trip within seconds, and its stop refuses later joiners.
        b = self.start_node("node-b", run_id, "10")
        wait_until(lambda: os.path.exists(self.path("node-b.started")), 60,
                   what="node-b's job to start")
        a = self.start_node("node-a", run_id, "10", extra_env=a_env, extra_args=a_args)
        if trigger:
            wait_until(lambda: os.path.exists(self.path("node-a.started")), 60,
                       what="node-a's job to start")
            trigger(a)
        err_a = self.finish(a)
        err_b = self.finish(b)
        a_status, b_status = self.read_json("node-a.json"), self.read_json("node-b.json")
        # node-b stopped by the run's stop order, which names node-a and what tripped it...
        self.assertEqual(b.returncode, 123, err_b)
        self.assertEqual(b_status["reason"], "stop-order", err_b)
        self.assertEqual(b_status["first_trip"], "node-a (%s)" % a_status["reason"], err_b)
        self.assertIn("first trip: node-a (%s)" % a_status["reason"], err_b)
        self.assertEqual(a_status["first_trip"], "node-a (%s)" % a_status["reason"], err_a)
        # ...placed by node-a on the run (its job key), before node-b ended: the order of events.
        rows = {r["id"]: r for r in self.runs("job_key = ?", (run_id,))}
        orders = self.stop_orders(run_id)
        self.assertEqual(len(orders), 1, orders)
        self.assertEqual(orders[0]["placed_by"], "node node-a")
        b_row = rows[b_status["run_id"]]
        self.assertGreaterEqual(b_row["finished_at"], orders[0]["placed_at"])
        self.assertLess(b_row["finished_at"] - b_row["started_at"], 90,
                        "node-b ended by the stop, not by its job")
        return a_status, b_status

    def stop_orders(self, run_id):
        import sqlite3
        connection = sqlite3.connect("file:%s?mode=ro" % self.ledger_file(), uri=True, timeout=30)
        connection.row_factory = sqlite3.Row
        try:
            return [dict(r) for r in connection.execute(
                "SELECT * FROM stop_orders WHERE scope_kind = 'job' AND scope_name = ?",
                (run_id,))]
        finally:
            connection.close()

    def test_a_runaway_guard_on_one_node_stops_every_node(self):
        a, _ = self.one_node_trips("train-stall", a_args=["--stall-after", "2s"])
        self.assertEqual(a["reason"], "runaway:stall")

    def test_a_signal_to_one_node_stops_every_node(self):
        a, _ = self.one_node_trips("train-signal",
                                   trigger=lambda node: node.send_signal(signal.SIGTERM))
        self.assertEqual(a["reason"], "signal:SIGTERM")

    def test_a_budget_on_one_node_stops_every_node(self):
        # node-a's experiment has $0.03; node-b's none: only node-a's budget trips.
        policy = {"defaults": dict(self.DEFAULTS, claim_horizon="1m"),
                  "budgets": {"experiment": {"small": {"amount": 0.03, "period": "total"}}}}
        a, _ = self.one_node_trips("train-budget", a_args=["--experiment", "small"], policy=policy)
        self.assertEqual(a["reason"], "budget:experiment:small")

    def test_a_spot_notice_on_one_node_stops_every_node(self):
        from test_preemption import MetadataServer
        metadata = MetadataServer()
        self.addCleanup(metadata.close)
        metadata.state["notice"] = False

        def notice(_node):
            metadata.state["notice"] = True
        a, _ = self.one_node_trips("train-spot", a_args=["--spot-notice", "aws"],
                                   a_env={"SPENDCAP_SPOT_METADATA_URL": metadata.url},
                                   trigger=notice)
        self.assertEqual(a["reason"], "spot-notice:aws")

    def test_ps_shows_a_multi_node_run_as_one_row_with_its_nodes(self):
        self.write_policy({"defaults": dict(self.DEFAULTS, claim_horizon="1m")})
        nodes = [self.start_node(n, "train-ps", "10") for n in ("node-a", "node-b")]
        single = self.start_node("solo", "train-solo", "10")
        try:
            for n in ("node-a", "node-b", "solo"):
                wait_until(lambda: os.path.exists(self.path("%s.started" % n)), 60,
                           what="node %s's job to start" % n)
            out = self.run_spendcap(["ps"]).stdout
            lines = out.splitlines()
            run_rows = [l for l in lines if l.startswith("train-ps")]
            self.assertEqual(len(run_rows), 1, out)
            self.assertIn("2 nodes", run_rows[0])
            at = lines.index(run_rows[0])
            self.assertEqual(sorted(l.split()[0] for l in lines[at + 1:at + 3]),
                             ["node-a", "node-b"], out)
            self.assertTrue(all(l.startswith("  ") for l in lines[at + 1:at + 3]), out)
            solo = [l for l in lines if l.startswith("train-solo")]
            self.assertEqual(len(solo), 1, out)
            self.assertIn("1 node", solo[0])
            ps = self.spendcap_json(["ps"])
            self.assertEqual(sorted(r["node"] for r in ps if r["job_key"] == "train-ps"),
                             ["node-a", "node-b"])
        finally:
            for process in nodes + [single]:
                process.send_signal(signal.SIGTERM)
                self.finish(process)

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
