"""The experiment tracker (issue 40, item 6): its run id from the job's environment at launch
becomes the run's tag `tracker` (ledger, `show`, `report --by tracker`, FOCUS Tags, webhooks'
tags); a progress line {"tracker": {...}} reaches the status file; and the job's side,
contrib/python/spendcap_job.py, under real runs: its checkpoint handler answers spendcap's trip,
its progress lines are read, it sees the run's id and budget.

Negative controls: without tracker_from_environment the run has no `tracker` tag and the report
groups it under "(none)"; test_the_helper_answers_the_checkpoint_signal fails (the run is killed
after the whole grace, no checkpoint file) when the helper's handler is not installed
(SPENDCAP_CHECKPOINT_SIGNAL=none is what a job without it looks like: see its second half)."""
import csv
import io
import json
import os
import sys
import unittest

from spendcap_testlib import FIXTURES, SPENDCAP, LedgerTest

JOB = [sys.executable, os.path.join(FIXTURES, "tracker_job.py")]


class TrackerTest(LedgerTest):
    def test_the_tracker_id_in_the_environment_is_recorded_and_reported(self):
        result = self.run_spendcap(["run", "--rate", "1", "--budget", "1", "--team", "t", "--",
                                    "true"], extra_env={"MLFLOW_RUN_ID": "0a1b2c3d"})
        self.assertEqual(result.returncode, 0, result.stderr)
        (row,) = self.runs()
        self.assertEqual(json.loads(row["tags"]).get("tracker"), "mlflow:0a1b2c3d")
        show = self.run_spendcap(["show", row["id"][:8]])
        self.assertIn("tracker=mlflow:0a1b2c3d", show.stdout)
        report = self.run_spendcap(["report", "--by", "tracker"])
        self.assertEqual(report.returncode, 0, report.stderr)
        self.assertRegex(report.stdout, r"(?m)^tag:tracker .*\n(.*\n)*mlflow:0a1b2c3d +1 ")
        focus = self.run_spendcap(["report", "--format", "focus"])
        (line,) = list(csv.DictReader(io.StringIO(focus.stdout)))
        self.assertEqual(json.loads(line["Tags"]).get("spendcap/tracker"), "mlflow:0a1b2c3d")

    def test_the_webhook_event_carries_the_tracker_id(self):
        from test_webhooks import Endpoint
        endpoint = Endpoint((200,))
        self.addCleanup(endpoint.close)
        self.write_policy({"webhooks": [{"url_env": "HOOK_URL", "events": ["finished"]}]})
        result = self.run_spendcap(["run", "--rate", "1", "--budget", "1", "--", "true"],
                                   extra_env={"HOOK_URL": endpoint.url, "WANDB_RUN_ID": "w-42"})
        self.assertEqual(result.returncode, 0, result.stderr)
        (event,) = endpoint.events()
        self.assertEqual(event["event"], "finished")
        self.assertEqual(event["tags"].get("tracker"), "wandb:w-42")

    def test_a_run_without_a_tracker_has_no_tag(self):
        self.run_ok(["run", "--rate", "1", "--budget", "1", "--", "true"])
        (row,) = self.runs()
        self.assertNotIn("tracker", json.loads(row["tags"] or "{}"))

    def test_an_invalid_tracker_id_is_not_recorded(self):
        result = self.run_spendcap(["run", "--rate", "1", "--budget", "1", "--", "true"],
                                   extra_env={"WANDB_RUN_ID": "has space"})
        self.assertEqual(result.returncode, 0, result.stderr)
        (row,) = self.runs()
        self.assertNotIn("tracker", json.loads(row["tags"] or "{}"))

    def test_the_helper_reports_progress_and_the_tracker_id(self):
        info, checkpoint = self.path("info.json"), self.path("ckpt")
        result = self.run_spendcap(
            ["run", "--rate", "1", "--budget", "2", "--status-file", self.path("s.json"), "--"]
            + JOB + ["--info", info, "--checkpoint", checkpoint, "--tracker", "wandb=run-7",
                     "--seconds", "1", "--spendcap", SPENDCAP])
        self.assertEqual(result.returncode, 0, result.stderr)
        status = self.read_json("s.json")
        self.assertEqual(status["progress"]["tracker"], "wandb:run-7")
        self.assertGreater(status["progress"]["good_lines"], 1)
        self.assertEqual(status["progress"]["bad_lines"], 0)
        seen = self.read_json("info.json")
        left = seen.pop("left_usd")
        self.assertEqual(seen, {"under_spendcap": True, "run_id": status["run_id"],
                                "budget_usd": 2.0, "status": "running"})
        # Read from the ledger while the run ran: what was left then, at least what is left now.
        self.assertIsNotNone(left)
        self.assertTrue(2.0 - status["spend"] <= left <= 2.0, (left, status["spend"]))

    def test_the_helper_answers_the_checkpoint_signal(self):
        # $1/s with a 20 s grace: the reserve ($21) leaves $4 of a $25 budget, so it trips after
        # about 4 s; the helper's handler checkpoints and says so, ending the grace at once.
        info, checkpoint = self.path("info.json"), self.path("ckpt")
        args = ["run", "--rate", "3600", "--budget", "25", "--grace", "20s", "--kill-after",
                "1s", "--status-file", self.path("s.json"), "--"] + JOB + [
                    "--info", info, "--checkpoint", checkpoint, "--seconds", "60"]
        result = self.run_spendcap(args)
        self.assertEqual(result.returncode, 124, result.stderr)
        status = self.read_json("s.json")
        self.assertTrue(status["checkpoint_signalled"])
        self.assertTrue(os.path.exists(checkpoint))
        # The grace ended when the job exited, long before its 20 s.
        self.assertLess(status["trip_to_empty_seconds"], 10)
        # Control: the same job told that no checkpoint signal comes installs no handler.
        os.remove(checkpoint)
        result = self.run_spendcap(args[:1] + ["--checkpoint-signal", "none"] + args[1:])
        self.assertEqual(result.returncode, 124, result.stderr)
        self.assertFalse(os.path.exists(checkpoint))

    def test_the_helper_is_a_no_op_outside_spendcap(self):
        import subprocess
        env = {k: v for k, v in os.environ.items() if not k.startswith("SPENDCAP_")}
        info, checkpoint = self.path("info.json"), self.path("ckpt")
        done = subprocess.run(JOB + ["--info", info, "--checkpoint", checkpoint, "--seconds",
                                     "0.3", "--tracker", "mlflow=x"], env=env, timeout=60)
        self.assertEqual(done.returncode, 0)
        self.assertEqual(self.read_json("info.json"),
                         {"under_spendcap": False, "run_id": None, "budget_usd": None,
                          "status": None, "left_usd": None})


if __name__ == "__main__":
    unittest.main()
