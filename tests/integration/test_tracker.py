"""The experiment tracker (issue 40, item 6): its run id from the job's environment at launch
becomes the run's tag `tracker` (ledger, `show`, `report --by tracker`, FOCUS Tags, webhooks'
tags); a progress line {"tracker": {...}} reaches the status file; and the job's side,
contrib/python/spendcap_job.py, under real runs: its checkpoint handler answers spendcap's trip,
its progress lines are read, it sees the run's id and budget.

Negative controls: without tracker_from_environment the run has no `tracker` tag and the report
groups it under "(none)"; test_the_helper_answers_the_checkpoint_signal fails (the run is killed
after the whole grace, no checkpoint file) when the helper's handler is not installed
(SPENDCAP_CHECKPOINT_SIGNAL=none is what a job without it looks like: see its second half).

A tracker id the job reports on the progress channel after its launch (LateTrackerTest, on SQLite,
and LateTrackerPostgresTest, as a runner role on PostgreSQL, through the server's functions)
becomes the run's tag `tracker` too: at the next heartbeat while it runs, or with the final row;
`show`, `report --by tracker` (table and JSON), FOCUS Tags and the end webhooks (finished,
killed) carry it. An id from admission (MLFLOW_RUN_ID, --tag tracker=) is kept. Negative control:
against a spendcap before this (/work/main/build/spendcap at 694c1a7) every late-tracker case but
the kept-admission one fails: the id reaches the status file only."""
import csv
import io
import json
import os
import sys
import unittest

from spendcap_testlib import FIXTURES, SPENDCAP, LedgerTest, wait_until

JOB = [sys.executable, os.path.join(FIXTURES, "tracker_job.py")]
LATE = [sys.executable, os.path.join(FIXTURES, "late_tracker_job.py")]


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


class LateTracker:
    """The cases of a tracker id reported after the launch, on the ledger ledger_args() names."""

    def ledger_args(self):
        return []

    def spendcap(self, args, extra_env=None):
        """A command other than `run` (whose flags end at its `--`) on the case's ledger."""
        return self.run_spendcap(list(args) + self.ledger_args(), extra_env=extra_env)

    def endpoint(self, events):
        from test_webhooks import Endpoint
        endpoint = Endpoint((200,))
        self.addCleanup(endpoint.close)
        self.write_policy({"webhooks": [{"url_env": "HOOK_URL", "events": events}]})
        return endpoint

    def run_args(self, extra):
        return (["run", "--team", "vision", "--rate", "1", "--budget", "1", "--status-file",
                 self.path("s.json")] + list(extra) + self.ledger_args() + ["--"])

    def show(self, run_id):
        shown = self.spendcap(["show", run_id, "--json"])
        self.assertEqual(shown.returncode, 0, shown.stderr)
        return json.loads(shown.stdout)

    def assert_reported(self, run_id, tracker):
        """`show`, `report --by tracker` (table and JSON) and FOCUS's Tags carry `tracker`."""
        self.assertEqual(self.show(run_id)["tags"].get("tracker"), tracker)
        shown = self.spendcap(["show", run_id[:8]])
        self.assertIn("tracker=" + tracker, shown.stdout)
        report = self.spendcap(["report", "--by", "tracker"])
        self.assertEqual(report.returncode, 0, report.stderr)
        self.assertRegex(report.stdout, r"(?m)^tag:tracker .*\n(.*\n)*%s +1 " % tracker)
        report = self.spendcap(["report", "--by", "tracker", "--format", "json"])
        self.assertEqual(report.returncode, 0, report.stderr)
        groups = {g["group"]["tag:tracker"]: g["runs"] for g in json.loads(report.stdout)["groups"]}
        self.assertEqual(groups.get(tracker), 1, groups)
        focus = self.spendcap(["report", "--format", "focus"])
        self.assertEqual(focus.returncode, 0, focus.stderr)
        (line,) = [row for row in csv.DictReader(io.StringIO(focus.stdout))
                   if row["ResourceId"] == run_id]
        self.assertEqual(json.loads(line["Tags"]).get("spendcap/tracker"), tracker)

    def running_run_id(self):
        """The id of the one run the ledger lists as running, once it does (bounded wait)."""
        listed = []

        def running():
            result = self.spendcap(["runs", "--status", "running", "--json"])
            listed[:] = json.loads(result.stdout) if result.returncode == 0 else []
            return bool(listed)
        wait_until(running, 30, interval=0.1, what="the run running in the ledger")
        return listed[0]["id"]

    def test_an_id_reported_while_running_reaches_the_ledger_at_a_heartbeat(self):
        endpoint = self.endpoint(["finished"])
        tell, done = self.path("tell"), self.path("done")
        spendcap = self.start_spendcap(
            self.run_args(["--sync", "1s"]) + LATE + ["--tracker", "wandb=late-7", "--tell",
                                                      tell, "--done", done],
            extra_env={"HOOK_URL": endpoint.url})
        self.addCleanup(lambda: spendcap.poll() is None and spendcap.kill())
        run_id = self.running_run_id()
        self.assertNotIn("tracker", self.show(run_id)["tags"])  # launched without one
        open(tell, "w").close()
        # Still running: a heartbeat (every second) took it from the progress channel.
        wait_until(lambda: self.show(run_id)["tags"].get("tracker") == "wandb:late-7", 30,
                   interval=0.2, what="the tag tracker while the run runs")
        self.assertEqual(self.show(run_id)["status"], "running")
        open(done, "w").close()
        out, err = spendcap.communicate(timeout=60)
        self.assertEqual(spendcap.returncode, 0, err)
        self.assertEqual(self.read_json("s.json")["progress"]["tracker"], "wandb:late-7")
        self.assert_reported(run_id, "wandb:late-7")
        wait_until(lambda: endpoint.events(), 10, what="the finished webhook")
        (event,) = endpoint.events()
        self.assertEqual(event["event"], "finished")
        self.assertEqual(event["tags"].get("tracker"), "wandb:late-7")

    def test_an_id_reported_just_before_the_end_comes_with_the_final_row(self):
        # No heartbeat between the line and the end (a minute's sync): the final row carries it.
        endpoint = self.endpoint(["finished"])
        result = self.run_spendcap(self.run_args(["--sync", "60s"]) + LATE
                               + ["--tracker", "mlflow=m-0a1b", "--after", "0.3"],
                               extra_env={"HOOK_URL": endpoint.url})
        self.assertEqual(result.returncode, 0, result.stderr)
        run_id = self.read_json("s.json")["run_id"]
        self.assert_reported(run_id, "mlflow:m-0a1b")
        (event,) = endpoint.events()
        self.assertEqual(event["tags"].get("tracker"), "mlflow:m-0a1b")

    def test_the_killed_webhook_carries_an_id_reported_after_the_launch(self):
        # $1/s, a 2 s reserve (0 s grace, 1 s kill-after, 1 s slack) of a $4 budget: it trips
        # after about 2 s, the id reported at 0.3 s; the job waits for a file that never comes.
        endpoint = self.endpoint(["killed"])
        result = self.run_spendcap(
            ["run", "--team", "vision", "--rate", "3600", "--budget", "4", "--grace", "0s",
             "--kill-after", "1s", "--status-file", self.path("s.json")] + self.ledger_args()
            + ["--"] + LATE + ["--tracker", "wandb=late-k", "--after", "0.3", "--done",
                               self.path("never")],
            extra_env={"HOOK_URL": endpoint.url})
        self.assertEqual(result.returncode, 124, result.stderr)
        (event,) = endpoint.events()
        self.assertEqual(event["event"], "killed")
        self.assertEqual(event["tags"].get("tracker"), "wandb:late-k")
        self.assert_reported(self.read_json("s.json")["run_id"], "wandb:late-k")

    def test_an_id_from_admission_is_kept(self):
        # MLFLOW_RUN_ID at launch is the tag; a different id on the progress channel later reaches
        # the status file only (the ledger and the webhook keep the launch's).
        endpoint = self.endpoint(["finished"])
        result = self.run_spendcap(self.run_args(["--sync", "1s"]) + LATE
                               + ["--tracker", "wandb=late-7", "--after", "1.5"],
                               extra_env={"HOOK_URL": endpoint.url, "MLFLOW_RUN_ID": "env-1"})
        self.assertEqual(result.returncode, 0, result.stderr)
        status = self.read_json("s.json")
        self.assertEqual(status["progress"]["tracker"], "wandb:late-7")
        self.assertEqual(self.show(status["run_id"])["tags"].get("tracker"), "mlflow:env-1")
        (event,) = endpoint.events()
        self.assertEqual(event["tags"].get("tracker"), "mlflow:env-1")


class LateTrackerTest(LateTracker, LedgerTest):
    pass


PG_URL = os.environ.get("SPENDCAP_TEST_PG_URL")


@unittest.skipUnless(PG_URL, "no PostgreSQL test server: SPENDCAP_TEST_PG_URL is unset "
                     "(scripts/pg-test-server.sh start; eval \"$(scripts/pg-test-server.sh env)\")")
class LateTrackerPostgresTest(LateTracker, LedgerTest):
    """As a runner role (a member of spendcap_runner, not the ledger's owner): the tag is set
    through the server's functions (spendcap_heartbeat, spendcap_finish, spendcap_set_tracker)."""

    def setUp(self):
        super().setUp()
        import uuid
        from test_postgres_ledger import ledger_url, psql
        suffix = uuid.uuid4().hex[:10]
        schema, owner, runner = "trk_" + suffix, "own_" + suffix, "ana_" + suffix
        self.schema, self.runner, self.other = schema, runner, "bob_" + suffix
        psql("DO $$ BEGIN CREATE ROLE spendcap_runner NOLOGIN; "
             "EXCEPTION WHEN duplicate_object THEN NULL; END $$")
        psql("CREATE ROLE %s LOGIN; CREATE ROLE %s LOGIN IN ROLE spendcap_runner; "
             "CREATE ROLE %s LOGIN IN ROLE spendcap_runner; CREATE SCHEMA %s AUTHORIZATION %s"
             % (owner, runner, self.other, schema, owner))
        self.addCleanup(psql, "DROP SCHEMA %s CASCADE; DROP OWNED BY %s; DROP OWNED BY %s; "
                        "DROP ROLE %s; DROP ROLE %s; DROP ROLE %s"
                        % (schema, runner, self.other, runner, self.other, owner), check=False)
        self.url = ledger_url(schema, runner)
        policy = self.write_policy({"budgets": {"team": {"vision": {"amount": 100,
                                                                    "period": "month"}}}},
                                   name="budgets.json")
        applied = self.run_spendcap(["budgets", "apply", policy, "--ledger",
                                     ledger_url(schema, owner)])
        self.assertEqual(applied.returncode, 0, applied.stderr)

    def ledger_args(self):
        return ["--ledger", self.url]

    def test_a_runner_sets_the_tag_only_on_its_own_unfinished_run(self):
        """psql in a runner's hands: another role's run, a final run, an id past 256 bytes or with
        a space are refused; its own running run takes an id, its other tags kept."""
        from test_postgres_ledger import psql
        done = self.path("done")
        spendcap = self.start_spendcap(
            self.run_args(["--tag", "lr=3e-4"]) + LATE + ["--tracker", "wandb=w", "--tell", done,
                                                          "--done", done])
        self.addCleanup(lambda: spendcap.poll() is None and spendcap.kill())
        run_id = self.running_run_id()
        call = "SELECT %s.spendcap_set_tracker('%s', '%%s')" % (self.schema, run_id)

        def refused(user, tracker):
            completed = psql(call % tracker, user=user, check=False)
            self.assertNotEqual(completed.returncode, 0, "%s set %r" % (user, tracker))
            return completed.stderr
        self.assertIn("was admitted by", refused(self.other, "x:y"))
        self.assertIn("printable ASCII", refused(self.runner, "x:" + "y" * 255))
        self.assertIn("printable ASCII", refused(self.runner, "x:has space"))
        psql(call % "mlflow:by-hand", user=self.runner)
        self.assertEqual(self.show(run_id)["tags"], {"lr": "3e-4", "tracker": "mlflow:by-hand"})
        open(done, "w").close()
        spendcap.communicate(timeout=60)
        self.assertEqual(spendcap.returncode, 0)
        # The final row took the progress channel's; the row is final now.
        self.assertEqual(self.show(run_id)["tags"], {"lr": "3e-4", "tracker": "wandb:w"})
        self.assertIn("is final", refused(self.runner, "x:y"))


if __name__ == "__main__":
    unittest.main()
