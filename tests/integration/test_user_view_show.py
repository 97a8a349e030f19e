"""`spendcap show ID [--json]`: a run's whole record (issue 30, item 4), as an ordinary user created
for the test, with real runs of the real binary on a real SQLite ledger: the command (secrets
redacted), the working directory, the last progress line and metric, the checkpoint of a run
that got its checkpoint signal, and the budget's source as recorded at admission, which a later
policy does not rewrite. Before: `show` had no command, directory, progress or checkpoint, and
derived the budget's source from the budgets as they were when `show` ran (a max_run removed
since turned "$0.50 (from max_run of team:t4)" into "- (none of its own)"). The text fits 100
columns and has no blank line in a file and through a pipe."""
import json
import os
import re
import subprocess
import unittest

from spendcap_testlib import SPENDCAP, UserLedgerTest, wait_until, why_no_ordinary_user

NO_USER = why_no_ordinary_user()

# A training loop: a progress line a step (step, total, a metric), and on SIGUSR1 its checkpoint
# ($SPENDCAP_CHECKPOINT_DONE) and a clean exit, as a job that takes spendcap's checkpoint signal.
JOB = r"""
import json, os, signal, sys, time
def checkpoint(signum, frame):
    open(os.environ["SPENDCAP_CHECKPOINT_DONE"], "w").close()
    sys.exit(0)
signal.signal(signal.SIGUSR1, checkpoint)
with open("argv-%s.json" % sys.argv[1], "w") as f:  # in its working directory
    json.dump(sys.argv, f)
steps = int(sys.argv[1])
with open(os.environ["SPENDCAP_PROGRESS"], "a") as progress:
    for step in range(1, steps + 1):
        progress.write(json.dumps({"step": step, "total_steps": 500,
                                   "metric": {"loss": round(1.0 / step, 4)}}) + "\n")
        progress.flush()
        time.sleep(0.05)
while "--forever" in sys.argv:
    time.sleep(0.1)
"""

SECRETS = ("sk-live-7f3a9c", "hf_Qw8zLm2", "HUNTER2pw", "s3cr3tvalue")

LABELS = ("user", "team", "experiment", "project", "tags", "job", "command", "directory", "host",
          "started", "ended", "duration", "exit code", "stopped by", "checkpoint", "spend",
          "budget", "pricing", "progress", "last line", "metric", "GPU")


@unittest.skipIf(NO_USER, NO_USER or "")
class ShowWholeRecordTest(UserLedgerTest):
    def setUp(self):
        super().setUp()
        self.write_policy({"budgets": {"team": {"t4": {"amount": 10, "max_run": 0.5}}},
                           "defaults": {"grace": "5s", "kill_after": "1s"},
                           "guards": {"crash_loop": {"enabled": False}}})
        self.job = self.path("job.py")
        with open(self.job, "w") as f:
            f.write(JOB)
        os.chown(self.job, self.uid, self.gid)
        self.workdir = self.path("work dir")  # a space: the text quotes nothing it need not
        os.mkdir(self.workdir)
        os.chown(self.workdir, self.uid, self.gid)

    def run_in_workdir(self, args):
        """spendcap as the user, started in the work directory, its output through pipes."""
        args = args[:1] + ["--policy", self.path("spendcap.json")] + args[1:]
        completed = subprocess.run(self.as_user([SPENDCAP] + args), env=self.spendcap_env(),
                                   cwd=self.workdir, capture_output=True, text=True, timeout=120)
        return completed

    def show_text(self, run_id):
        """show's text to a file (run_spendcap) and through a pipe: the same, and clean."""
        to_file = self.run_spendcap(["show", run_id])
        self.assertEqual(to_file.returncode, 0, to_file.stderr)
        piped = subprocess.run(self.as_user([SPENDCAP, "show", run_id]), env=self.spendcap_env(),
                               cwd=self.tmp, capture_output=True, text=True, timeout=60)
        self.assertEqual(piped.returncode, 0, piped.stderr)
        # (A running run's duration grows between the two.)
        ticking = re.compile(r"(?m)^  duration: .*$")
        self.assertEqual(ticking.sub("", piped.stdout), ticking.sub("", to_file.stdout))
        lines = to_file.stdout.splitlines()
        for line in lines:
            self.assertTrue(line.strip(), "a blank line:\n" + to_file.stdout)
            self.assertLessEqual(len(line), 100, line)
        for label in LABELS:
            self.assertRegex(to_file.stdout, r"(?m)^  %s: " % re.escape(label), to_file.stdout)
        return to_file.stdout

    def test_token_formats_and_glued_passwords_never_reach_the_ledger(self):
        # Issue 38: bare tokens (GitHub, GitLab, Slack, sk-, hf_, AWS) and mysql/sshpass -pVALUE
        # were stored and shown to every user. The job gets them unchanged.
        tokens = {"ghp_": "ghp_" + "A1b2" * 9, "glpat-": "glpat-" + "x9Y8" * 5,
                  "xoxb-": "xoxb-1234567890-" + "Zq" * 6, "sk-": "sk-ant-api03-" + "Kp" * 12,
                  "hf_": "hf_" + "Mn" * 15, "AKIA": "AKIA" + "Q7" * 8}
        argv = ["python3", self.job, "1"] + list(tokens.values()) + [
            "mysql -uroot -pMysqlPw9 app", "sshpass", "-p", "SshPw7"]
        done = self.run_in_workdir(["run", "--team", "t4", "--rate", "36", "--status-file",
                                    self.path("done.json"), "--"] + argv)
        self.assertEqual(done.returncode, 0, done.stderr)
        with open(os.path.join(self.workdir, "argv-1.json")) as f:
            self.assertEqual(json.load(f)[1:], argv[2:], "the job's argv is its own")
        shown = self.spendcap_json(["show", self.read_json("done.json")["run_id"]])
        self.assertEqual(shown["command"],
                         ["python3", self.job, "1"] + [p + "***" for p in tokens] +
                         ["mysql -uroot -p*** app", "sshpass", "-p", "***"])
        with open(self.ledger_file(), "rb") as f:
            stored = f.read()
        for secret in list(tokens.values()) + ["MysqlPw9", "SshPw7"]:
            self.assertNotIn(secret.encode(), stored, secret)

    def test_show_gives_the_whole_record(self):
        # A run to its end: its progress and metric; no checkpoint signal.
        secret_args = ["--api-key", SECRETS[0], "--hf-token=" + SECRETS[1],
                       "https://ana:%s@data.example/shards" % SECRETS[2],
                       "WANDB_API_KEY=" + SECRETS[3], "--lr", "3e-4"]
        done = self.run_in_workdir(["run", "--team", "t4", "--rate", "36", "--status-file",
                                    self.path("done.json"), "--", "python3", self.job, "8"] +
                                   secret_args)
        self.assertEqual(done.returncode, 0, done.stderr)
        done_id = self.read_json("done.json")["run_id"]
        shown = self.spendcap_json(["show", done_id])
        self.assertEqual(shown["command"],
                         ["python3", self.job, "8", "--api-key", "***", "--hf-token=***",
                          "https://ana:***@data.example/shards", "WANDB_API_KEY=***", "--lr",
                          "3e-4"])
        self.assertEqual(shown["working_directory"], self.workdir)
        self.assertEqual(shown["progress"]["step"], 8)
        self.assertEqual(shown["progress"]["total_steps"], 500)
        self.assertEqual(json.loads(shown["progress"]["line"])["step"], 8)
        self.assertEqual(shown["metric"], {"name": "loss", "value": 0.125})
        self.assertIsNone(shown["checkpoint"])
        self.assertEqual((shown["budget"], shown["budget_source"], shown["budget_recorded"]),
                         (0.5, "max_run of team:t4", True))
        text = self.show_text(done_id)
        self.assertIn("  command:     python3 %s 8 --api-key *** --hf-token=***" % self.job, text)
        self.assertIn("  directory:   %s\n" % self.workdir, text)
        self.assertIn("  progress:    step 8 of 500\n", text)
        self.assertIn("  metric:      loss 0.125\n", text)
        self.assertIn("  budget:      $0.50 (from max_run of team:t4)\n", text)

        # A run its budget stops: the checkpoint signal, the checkpoint written, the time of both.
        # $36/h with a 5 s grace and 1 s kill-after holds a $0.07 reserve: $0.10 trips in ~3 s.
        stopped = self.run_in_workdir(["run", "--team", "t4", "--rate", "36", "--budget", "0.1",
                                       "--status-file", self.path("stopped.json"), "--",
                                       "python3", self.job, "20", "--forever"])
        self.assertEqual(stopped.returncode, 124, stopped.stderr)
        status = self.read_json("stopped.json")
        shown = self.spendcap_json(["show", status["run_id"]])
        checkpoint = shown["checkpoint"]
        self.assertEqual((checkpoint["signal"], checkpoint["signalled_processes"],
                          checkpoint["written"]), ("SIGUSR1", 1, True), checkpoint)
        self.assertAlmostEqual(checkpoint["signalled_after_seconds"],
                               status["tripped_after_seconds"], delta=0.01)
        self.assertGreaterEqual(checkpoint["written_after_seconds"],
                                checkpoint["signalled_after_seconds"])
        self.assertEqual((shown["status"], shown["reason"]), ("killed", "budget:run"))
        self.assertEqual(shown["budget_source"], "flag --budget")
        self.assertEqual(shown["progress"]["step"], 20)
        text = self.show_text(status["run_id"])
        self.assertRegex(text, r"  checkpoint:  SIGUSR1 sent to 1 process after \d+\.\ds; "
                               r"checkpoint written \d+\.\ds later\n")

        # The budget's source is the run's, recorded: the policy's max_run removed (and applied,
        # as `budgets` does on a personal ledger) leaves the run as it was admitted.
        self.write_policy({"budgets": {"team": {"t4": {"amount": 10}}},
                           "guards": {"crash_loop": {"enabled": False}}})
        budgets = self.spendcap_json(["budgets", "--json"])
        self.assertEqual([b["max_run"] for b in budgets if b["scope"] == "team:t4"], [None])
        again = self.spendcap_json(["show", done_id])
        self.assertEqual((again["budget"], again["budget_source"]), (0.5, "max_run of team:t4"))
        self.assertIn("$0.50 (from max_run of team:t4)", self.show_text(done_id))
        # The negative control: a run recorded without its source (as before schema 19) is
        # derived from today's budgets, and says so: the same run then reads "none of its own".
        self.root_sql("UPDATE runs SET budget_source = NULL, run_budget_micros = NULL "
                      "WHERE id = '%s'" % done_id)
        derived = self.spendcap_json(["show", done_id])
        self.assertEqual((derived["budget"], derived["budget_recorded"]), (None, False))
        runs = {r["id"]: r for r in self.spendcap_json(["runs"])}
        self.assertEqual(runs[status["run_id"]]["budget_source"], "flag --budget")

        # No secret reached the ledger (its file, WAL included), show, or runs.
        outputs = [json.dumps(self.spendcap_json(["show", done_id])), self.show_text(done_id),
                   self.run_spendcap(["runs", "--format", "csv"]).stdout]
        ledger_dir = os.path.dirname(self.ledger_file())
        for name in os.listdir(ledger_dir):
            with open(os.path.join(ledger_dir, name), "rb") as f:
                outputs.append(f.read().decode("latin-1"))
        self.assertGreaterEqual(len(outputs), 4)
        for secret in SECRETS:
            for output in outputs:
                self.assertNotIn(secret, output)
        # The positive control: the job itself got them (redaction is the record's, never the
        # command's), so the scan above looked for words that were there to find.
        with open(os.path.join(self.workdir, "argv-8.json")) as f:
            job_argv = json.load(f)
        for secret in SECRETS:
            self.assertTrue(any(secret in word for word in job_argv), job_argv)

    def test_a_running_run_shows_its_progress_so_far(self):
        """The heartbeats carry the last progress line and metric: `show` of a running run has
        them (before: only the final row did, so a running run showed none)."""
        running = subprocess.Popen(
            self.as_user([SPENDCAP, "run", "--policy", self.path("spendcap.json"), "--team", "t4",
                          "--rate", "36", "--sync", "1s", "--status-file",
                          self.path("running.json"), "--", "python3", self.job, "6",
                          "--forever"]),
            env=self.spendcap_env(), cwd=self.workdir, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL)
        self.addCleanup(running.kill)
        run_id = wait_until(lambda: ([r["id"] for r in self.runs()] or [None])[0], 30, interval=0.1,
                            what="the run in the ledger")
        shown = wait_until(
            lambda: (lambda s: s if s["progress"] and s["progress"]["step"] == 6 else None)(
                self.spendcap_json(["show", run_id])), 30, interval=0.2,
            what="the progress in the ledger")
        self.assertEqual(shown["status"], "running")
        self.assertIsNone(shown["finished_at"])
        self.assertEqual(shown["metric"], {"name": "loss", "value": round(1.0 / 6, 4)})
        text = self.show_text(run_id)
        self.assertIn("  progress:    step 6 of 500\n", text)
        self.assertIn("  ended:       - (still running)\n", text)
        self.assertIn("  checkpoint:  -\n", text)
        stop = self.run_spendcap(["stop", "--run", run_id[:8]])
        self.assertEqual(stop.returncode, 0, stop.stderr)
        self.assertEqual(running.wait(timeout=60), 123)  # a stop order
        self.assertEqual(self.spendcap_json(["show", run_id])["checkpoint"]["written"], True)

    def root_sql(self, statement):
        """A statement on the user's ledger, as the user (its WAL files stay the user's)."""
        edited = subprocess.run(self.as_user(["sqlite3", "-cmd", ".timeout 10000",
                                              self.ledger_file(), statement]),
                                capture_output=True, text=True, timeout=30)
        self.assertEqual(edited.returncode, 0, edited.stderr)


if __name__ == "__main__":
    unittest.main()
