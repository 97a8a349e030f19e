"""Preemption (issue 13, tests 2 and 4): a SIGTERM to spendcap (the scheduler taking the node back)
or a spot termination notice from the instance metadata endpoint ends the run as `preempted`, after
the job's checkpoint; a later run with the same --job-key continues the same budget."""
import http.server
import os
import signal
import threading
import time
import unittest

from spendcap_testlib import FIXTURES, LedgerTest, wait_until


class Metadata(http.server.BaseHTTPRequestHandler):
    """Plays AWS's IMDSv2 and GCP's metadata server. The test flips `notice` to issue one."""
    protocol_version = "HTTP/1.0"
    state = None  # per server: {"notice": bool, "requests": [(method, path, headers)]}

    def log_message(self, *args):
        pass

    def answer(self, status, body=b""):
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_PUT(self):
        state = self.server.state
        state["requests"].append(("PUT", self.path, dict(self.headers)))
        if self.path == "/latest/api/token" and \
                self.headers.get("X-aws-ec2-metadata-token-ttl-seconds"):
            self.answer(200, b"token-123")
        else:
            self.answer(400)

    def do_GET(self):
        state = self.server.state
        state["requests"].append(("GET", self.path, dict(self.headers)))
        if self.path == "/latest/meta-data/spot/instance-action":
            if self.headers.get("X-aws-ec2-metadata-token") != "token-123":
                self.answer(401)
            elif state["notice"]:
                self.answer(200, b'{"action": "terminate", "time": "2026-12-01T10:30:00Z"}')
            else:
                self.answer(404)
        elif self.path == "/computeMetadata/v1/instance/preempted":
            if self.headers.get("Metadata-Flavor") != "Google":
                self.answer(403)
            else:
                self.answer(200, b"TRUE" if state["notice"] else b"FALSE")
        else:
            self.answer(404)


class MetadataServer:
    def __init__(self):
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Metadata)
        self.server.state = {"notice": False, "requests": []}
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self):
        return "http://127.0.0.1:%d" % self.server.server_address[1]

    @property
    def state(self):
        return self.server.state

    def close(self):
        self.server.shutdown()
        self.server.server_close()


class SigtermIsPreemptionTest(LedgerTest):
    def test_sigterm_checkpoints_and_ends_the_run_preempted(self):
        process = self.start_spendcap(["run", "--rate", "1", "--budget", "10", "--grace", "5s",
                                       "--kill-after", "1s", "--status-file",
                                       self.path("status.json")] +
                                      self.tree_args(["--signal-done"]))
        self.wait_for_file("ready")
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=60)
        # spendcap re-raises the signal (DESIGN: exit by signal), as the bare job would have died.
        self.assertEqual(process.returncode, -signal.SIGTERM, stderr)
        self.assertTrue(os.path.exists(self.path("checkpoint")), "the job checkpointed:\n" + stderr)
        status = self.read_json("status.json")
        self.assertEqual(status["status"], "preempted")
        self.assertEqual(status["reason"], "signal:SIGTERM")
        rows = self.runs()
        self.assertEqual([row["status"] for row in rows], ["preempted"])
        self.assert_tree_gone(timeout=5.0)

    def test_sigint_is_a_stop_not_a_preemption(self):
        # Negative control: Ctrl-C is the user's stop; only SIGTERM means the node is taken back.
        process = self.start_spendcap(["run", "--rate", "1", "--budget", "10", "--grace", "5s",
                                       "--kill-after", "1s", "--status-file",
                                       self.path("status.json")] +
                                      self.tree_args(["--signal-done"]))
        self.wait_for_file("ready")
        process.send_signal(signal.SIGINT)
        process.communicate(timeout=60)
        self.assertEqual(process.returncode, -signal.SIGINT)
        self.assertEqual(self.read_json("status.json")["status"], "killed")
        self.assertEqual([row["status"] for row in self.runs()], ["killed"])

    def job_killed_from_outside(self, signum):
        process = self.start_spendcap(["run", "--rate", "1", "--budget", "10", "--status-file",
                                       self.path("status.json"), "--", "sh", "-c",
                                       "echo $$ > job.pid; exec sleep 60"])
        self.wait_for_file("job.pid")

        def job_pid():
            with open(self.path("job.pid")) as f:
                text = f.read().strip()
            return text and self.host_pid(int(text))
        job = wait_until(job_pid, 10, what="the job's host pid")
        os.kill(job, signum)  # as a plain scancel does: to every process of the job at once
        process.communicate(timeout=60)
        return process.returncode, self.read_json("status.json")

    def test_a_job_killed_by_an_outside_sigterm_is_preempted(self):
        rc, status = self.job_killed_from_outside(signal.SIGTERM)
        self.assertEqual(rc, 143)  # the command's own status
        self.assertEqual(status["status"], "preempted")
        self.assertEqual([row["status"] for row in self.runs()], ["preempted"])

    def test_a_job_killed_by_sigkill_failed(self):
        # Negative control: only SIGTERM is a scheduler's stop; SIGKILL (the OOM killer) is not.
        rc, status = self.job_killed_from_outside(signal.SIGKILL)
        self.assertEqual(rc, 137)
        self.assertEqual(status["status"], "failed")

    def test_a_later_run_with_the_same_job_key_continues_the_budget(self):
        # $0.10/s; the job key's budget is $1 ($0.30 of it the shutdown reserve). The first run is
        # preempted as soon as it has reported some spend.
        budget = 1.0
        args = ["run", "--rate", "360", "--budget", str(budget), "--job-key", "train-42",
                "--grace", "1s", "--kill-after", "1s", "--sync", "1s"]
        first = self.start_spendcap(args + ["--status-file", self.path("first.json")] +
                                    self.tree_args(["--signal-done"]))
        self.wait_for_file("ready")
        wait_until(lambda: any(row["spend_micros"] > 0 for row in self.runs()), 30,
                   what="the first run to report spend")
        first.send_signal(signal.SIGTERM)
        first.communicate(timeout=60)
        spent_first = self.read_json("first.json")["spend"]
        self.assertGreater(spent_first, 0)
        self.assertEqual(self.read_json("first.json")["status"], "preempted")
        # The requeued job: the same key continues what is left, then trips on the budget.
        second = self.run_spendcap(args + ["--status-file", self.path("second.json"), "--",
                                           "sleep", "60"], timeout=60)
        self.assertEqual(second.returncode, 124, second.stderr)
        spent_second = self.read_json("second.json")["spend"]
        self.assertLessEqual(spent_first + spent_second, budget + 1e-9)
        # Negative control of the claim: it had only what the first run left, not a whole budget.
        self.assertLess(spent_second, budget - spent_first + 0.005)
        self.assertEqual([row["status"] for row in self.runs()], ["preempted", "killed"])


class LedgerMigrationTest(LedgerTest):
    def test_a_schema_2_ledger_takes_preempted_rows_after_migrating(self):
        import sqlite3
        # A real schema-2 ledger: the .dump of one written by the release before preemption
        # (commit f6a2106), holding one succeeded run.
        os.makedirs(os.path.dirname(self.ledger_file()), exist_ok=True)
        with open(os.path.join(FIXTURES, "ledgers", "schema2.sql")) as f:
            dump = f.read()
        connection = sqlite3.connect(self.ledger_file(), isolation_level=None)
        connection.executescript(dump)
        connection.execute("PRAGMA journal_mode = WAL")
        self.assertEqual(connection.execute("SELECT max(version) FROM schema_version").fetchone(),
                         (2,))
        with self.assertRaises(sqlite3.IntegrityError):  # negative control: schema 2 refuses it
            connection.execute("UPDATE runs SET status = 'preempted'")
        connection.close()
        process = self.start_spendcap(["run", "--rate", "1", "--budget", "10", "--grace", "5s",
                                       "--kill-after", "1s"] + self.tree_args(["--signal-done"]))
        self.wait_for_file("ready")
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=60)
        self.assertEqual([row["status"] for row in self.runs()], ["succeeded", "preempted"], err)
        connection = sqlite3.connect(self.ledger_file())
        self.assertEqual(connection.execute("PRAGMA integrity_check").fetchall(), [("ok",)])
        self.assertIn(3, [v for (v,) in connection.execute("SELECT version FROM schema_version")])
        connection.close()


class SpotNoticeTest(LedgerTest):
    def setUp(self):
        super().setUp()
        self.metadata = MetadataServer()
        self.addCleanup(self.metadata.close)

    def run_until_notice(self, cloud, extra_args=(), extra_env=None):
        args = ["run", "--rate", "1", "--budget", "10", "--grace", "20s", "--kill-after", "1s",
                "--spot-notice", cloud, "--status-file", self.path("status.json")]
        process = self.start_spendcap(args + list(extra_args) + self.tree_args(["--signal-done"]),
                                      extra_env=extra_env)
        self.wait_for_file("ready")
        # It polls with no notice first (the job keeps running), then the notice comes.
        wait_until(lambda: len(self.metadata.state["requests"]) >= 2, 30,
                   what="the metadata endpoint to be polled")
        self.assertIsNone(process.poll(), "no notice yet: the job runs on")
        noticed_at = time.monotonic()
        self.metadata.state["notice"] = True
        out, err = process.communicate(timeout=60)
        return process.returncode, time.monotonic() - noticed_at, err

    def test_aws_notice_checkpoints_and_ends_the_run_preempted_within_the_window(self):
        rc, took, err = self.run_until_notice("aws", extra_env={
            "SPENDCAP_SPOT_METADATA_URL": self.metadata.url})
        self.assertEqual(rc, 122, err)
        self.assertIn("spot notice (aws)", err)
        self.assertTrue(os.path.exists(self.path("checkpoint")), "the job checkpointed")
        status = self.read_json("status.json")
        self.assertEqual(status["status"], "preempted")
        self.assertEqual(status["reason"], "spot-notice:aws")
        self.assertLess(took, 120, "the run ended inside AWS's two-minute window")
        self.assertEqual([row["status"] for row in self.runs()], ["preempted"])
        # IMDSv2: a token first, then every poll carries it.
        requests = self.metadata.state["requests"]
        self.assertEqual(requests[0][:2], ("PUT", "/latest/api/token"))
        gets = [r for r in requests if r[0] == "GET"]
        self.assertTrue(gets and all(r[2].get("X-aws-ec2-metadata-token") == "token-123"
                                     for r in gets))
        self.assert_tree_gone(timeout=5.0)

    def test_gcp_notice_fits_its_thirty_seconds(self):
        rc, took, err = self.run_until_notice("gcp", ["--spot-notice-url", self.metadata.url])
        self.assertEqual(rc, 122, err)
        status = self.read_json("status.json")
        self.assertEqual(status["status"], "preempted")
        self.assertEqual(status["reason"], "spot-notice:gcp")
        self.assertLess(took, 30, "the run ended inside GCP's 30 s window")
        self.assertTrue(all(r[2].get("Metadata-Flavor") == "Google"
                            for r in self.metadata.state["requests"]))

    def test_no_notice_no_stop(self):
        # Negative control: the endpoint answers "no notice" all along; the job ends by itself.
        result = self.run_spendcap(["run", "--rate", "1", "--budget", "10", "--spot-notice", "gcp",
                                    "--spot-notice-url", self.metadata.url, "--status-file",
                                    self.path("status.json"), "--", "sh", "-c",
                                    "sleep 7; exit 3"], timeout=60)
        self.assertEqual(result.returncode, 3, result.stderr)
        self.assertEqual(self.read_json("status.json")["status"], "failed")
        self.assertGreaterEqual(len(self.metadata.state["requests"]), 1)

    def test_bad_spot_notice_values_are_refused(self):
        for args in (["--spot-notice", "azure"], ["--spot-notice", "https://x/"],
                     ["--spot-notice-url", self.metadata.url],
                     ["--spot-notice", "aws", "--spot-notice-url", "ftp://x"]):
            result = self.run_spendcap(["run", "--rate", "1"] + args + ["--", "true"])
            self.assertEqual(result.returncode, 125, (args, result.stderr))
            self.assertIn("--spot-notice", result.stderr)


if __name__ == "__main__":
    unittest.main()
