"""Webhook notifications (issue 9), against a real HTTP server on 127.0.0.1 started by each test:
the killed event and its signature, the Slack format, retries, a never-answering endpoint (the kill
path does not wait; the event lands in the outbox and a flush delivers it), bad URLs, and secrets
kept out of output, ledger and the job's environment."""
import hashlib
import hmac
import http.server
import json
import os
import re
import socket
import sqlite3
import threading
import time
import unittest

from spendcap_testlib import LedgerTest

HERE = os.path.dirname(os.path.abspath(__file__))
EVENT_SCHEMA = os.path.join(HERE, "..", "..", "policies", "webhook-event.schema.json")

SECRET = "whsec-0123456789abcdef"
# The job writes its environment here, then sleeps until killed.
JOB = ("import json, os, sys, time; json.dump(dict(os.environ), open(sys.argv[1], 'w')); "
       "time.sleep(60)")


class Endpoint:
    """A real HTTP server in a thread. `script` is the list of answers, one per request (the last
    one repeats): a status code, or "hang" (accept, read, never answer)."""

    def __init__(self, script=(200,), path="/hook", host="127.0.0.1"):
        self.script = list(script)
        self.requests = []
        self.release = threading.Event()
        endpoint = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                endpoint.requests.append({"path": self.path, "headers": dict(self.headers),
                                          "body": body, "at": time.time()})
                n = len(endpoint.requests) - 1
                answer = endpoint.script[min(n, len(endpoint.script) - 1)]
                if callable(answer):  # does something first, then answers what it returns
                    answer = answer()
                if answer == "hang":
                    endpoint.release.wait(60)
                    return
                self.send_response(answer)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer((host, 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = "http://%s:%d%s" % (host, self.server.server_address[1], path)

    def close(self):
        self.release.set()
        self.server.shutdown()
        self.server.server_close()

    def events(self):
        return [json.loads(r["body"]) for r in self.requests]


def signature_ok(request, secret):
    ts = request["headers"]["X-Spendcap-Timestamp"]
    expected = "sha256=" + hmac.new(secret.encode(), ts.encode() + b"." + request["body"],
                                    hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, request["headers"]["X-Spendcap-Signature"])


def closed_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class WebhookTest(LedgerTest):
    # 36/h = 0.01/s; grace 0s and kill-after 1s: a reserve of 0.02; --budget 0.04 trips at ~2 s.
    DEFAULTS = {"grace": "0s", "kill_after": "1s", "sync": "1s"}

    def endpoint(self, script=(200,), path="/hook"):
        endpoint = Endpoint(script, path)
        self.addCleanup(endpoint.close)
        return endpoint

    def policy_with(self, hook, events=("killed",)):
        if events:
            hook = dict(hook, events=list(events))
        self.write_policy({"defaults": self.DEFAULTS, "webhooks": [hook]})

    def run_killed(self, extra_args=(), extra_env=None, status="status.json"):
        return self.run_spendcap(
            ["run", "--team", "vision", "--experiment", "vit", "--rate", "36", "--budget", "0.04",
             "--status-file", self.path(status)] + list(extra_args)
            + ["--", "python3", "-c", JOB, self.path("job-env.json")], extra_env=extra_env)

    def outbox_rows(self):
        connection = sqlite3.connect("file:%s?mode=ro" % self.ledger_file(), uri=True)
        connection.row_factory = sqlite3.Row
        try:
            return [dict(r) for r in connection.execute("SELECT * FROM outbox ORDER BY id")]
        finally:
            connection.close()

    def test_1_killed_event_signed_and_secret_not_in_job(self):
        endpoint = self.endpoint()
        # The default events: the 50% warning comes first, then the one killed event.
        self.policy_with({"url_env": "HOOK_URL", "secret_env": "HOOK_SECRET"}, events=None)
        result = self.run_killed(extra_env={"HOOK_URL": endpoint.url, "HOOK_SECRET": SECRET})
        self.assertEqual(result.returncode, 124, result.stderr)
        killed = [e for e in endpoint.events() if e["event"] == "killed"]
        self.assertEqual(len(killed), 1, result.stderr)
        self.assertIn("warning", [e["event"] for e in endpoint.events()])
        event = killed[0]
        request = endpoint.requests[endpoint.events().index(event)]
        status = self.read_json("status.json")
        self.assertEqual(event["event"], "killed")
        self.assertEqual(event["run_id"], status["run_id"])
        self.assertEqual((event["team"], event["experiment"]), ("vision", "vit"))
        self.assertEqual(event["reason"], "budget:run")
        self.assertEqual(event["scope"], "run")
        self.assertEqual(event["budget"], "0.04")
        self.assertEqual(event["currency"], "USD")
        self.assertEqual(event["burn_rate_per_hour"], "36")
        self.assertEqual(event["exit_code"], 124)
        self.assertEqual(event["command"][:2], ["python3", "-c"])
        self.assertAlmostEqual(float(event["spend"]), status["spend"], places=6)
        self.assertNotIn("gpu_utilisation", event)  # not measured: absent
        self.assertRegex(event["started_at"], r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")
        self.assertRegex(event["ended_at"], r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")
        self.assertRegex(event["event_id"], r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-")
        import jsonschema
        with open(EVENT_SCHEMA) as f:
            jsonschema.validate(event, json.load(f))
        self.assertTrue(signature_ok(request, SECRET))
        self.assertFalse(signature_ok(request, "another-secret"))  # negative control
        job_env = self.read_json("job-env.json")
        self.assertNotIn("HOOK_SECRET", job_env)
        self.assertNotIn("HOOK_URL", job_env)
        self.assertNotIn(SECRET, json.dumps(job_env))

    def test_1b_killed_event_says_what_became_of_the_checkpoint(self):
        """Issue 40: the killed event carries the checkpoint's outcome and the last step the job
        reported, and validates against the schema; main's binary sent neither."""
        endpoint = self.endpoint()
        self.policy_with({"url_env": "HOOK_URL"})
        job = ("import json, os, signal, sys, time\n"
               "def done(*_):\n"
               "    open(os.environ['SPENDCAP_CHECKPOINT_DONE'], 'w').close()\n"
               "    sys.exit(0)\n"
               "signal.signal(signal.SIGUSR1, done)\n"
               "for step in range(1, 100000):\n"
               "    with open(os.environ['SPENDCAP_PROGRESS'], 'a') as f:\n"
               "        f.write(json.dumps({'step': step, 'total_steps': 1000}) + '\\n')\n"
               "    time.sleep(0.05)\n")
        # $36/h, reserve $0.07 (grace 5s + kill-after 1s + 1s): the trip comes at about 3 s.
        result = self.run_spendcap(
            ["run", "--team", "vision", "--rate", "36", "--budget", "0.1", "--grace", "5s",
             "--status-file", self.path("status.json"), "--", "python3", "-c", job],
            extra_env={"HOOK_URL": endpoint.url})
        self.assertEqual(result.returncode, 124, result.stderr)
        (event,) = [e for e in endpoint.events() if e["event"] == "killed"]
        self.assertEqual(event["checkpoint"], "written", event)
        self.assertEqual(event["command_exit_code"], 0, event)
        self.assertEqual(event["total_steps"], 1000, event)
        self.assertGreaterEqual(event["last_step"], 10, event)
        import jsonschema
        with open(EVENT_SCHEMA) as f:
            jsonschema.validate(event, json.load(f))

    def test_2_slack_text(self):
        endpoint = self.endpoint()
        self.policy_with({"url_env": "HOOK_URL", "format": "slack"})
        result = self.run_killed(extra_env={"HOOK_URL": endpoint.url})
        self.assertEqual(result.returncode, 124, result.stderr)
        self.assertEqual(len(endpoint.requests), 1, result.stderr)
        body = endpoint.events()[0]
        # Block Kit with a text fallback (issue 21); test_webhook_standards checks the escaping.
        self.assertEqual(sorted(body), ["blocks", "mrkdwn", "text"])
        status = self.read_json("status.json")
        for part in ("vision", "vit", "budget:run"):
            self.assertIn(part, body["text"])
        # Money as the terminal prints it: $0.04 (cents from a cent up), not 0.040071 USD
        # (issue 30, issue 40 item 7).
        spent = re.search(r"spent \$(\d+\.\d\d) of the run budget \$0\.04\b", body["text"])
        self.assertTrue(spent, body["text"])
        self.assertAlmostEqual(float(spent.group(1)), status["spend"], delta=0.005)
        self.assertNotIn(" USD", body["text"])

    def test_3_retries_500_then_200_and_never_400(self):
        endpoint = self.endpoint([500, 500, 200])
        self.policy_with({"url_env": "HOOK_URL", "secret_env": "HOOK_SECRET"})
        result = self.run_killed(extra_env={"HOOK_URL": endpoint.url, "HOOK_SECRET": SECRET})
        self.assertEqual(result.returncode, 124, result.stderr)
        self.assertEqual(len(endpoint.requests), 3, result.stderr)
        ids = {e["event_id"] for e in endpoint.events()}
        self.assertEqual(len(ids), 1)  # one event, delivered once after two retries
        self.assertTrue(all(signature_ok(r, SECRET) for r in endpoint.requests))
        self.assertEqual(self.outbox_rows(), [])

        rejecting = self.endpoint([400])
        result = self.run_killed(extra_env={"HOOK_URL": rejecting.url, "HOOK_SECRET": SECRET},
                                 status="status-400.json")
        self.assertEqual(result.returncode, 124, result.stderr)
        self.assertEqual(len(rejecting.requests), 1, result.stderr)
        self.assertIn("HTTP 400", result.stderr)
        self.assertIn("not retried", result.stderr)
        self.assertEqual(self.outbox_rows(), [])  # a 400 would be a 400 again

    def test_4_never_answering_endpoint_does_not_delay_the_kill(self):
        # Without webhooks first: the reference trip-to-empty time.
        self.write_policy({"defaults": self.DEFAULTS})
        result = self.run_killed(status="plain.json")
        self.assertEqual(result.returncode, 124, result.stderr)
        plain = self.read_json("plain.json")["trip_to_empty_seconds"]

        hanging = self.endpoint(["hang"])
        self.policy_with({"url_env": "HOOK_URL", "secret_env": "HOOK_SECRET"})
        env = {"HOOK_URL": hanging.url, "HOOK_SECRET": SECRET}
        process = self.start_spendcap(
            ["run", "--team", "vision", "--experiment", "vit", "--rate", "36", "--budget", "0.04",
             "--status-file", self.path("hang.json"), "--", "python3", "-c", JOB,
             self.path("job-env.json")], extra_env=env)
        self.wait_for_file("hang.json", timeout=60)
        tree_gone = time.time()
        _, err = process.communicate(timeout=60)
        exited = time.time()
        self.assertEqual(process.returncode, 124, err)
        with_hook = self.read_json("hang.json")["trip_to_empty_seconds"]
        # The kill path never waits on the webhook (timing is benchmarked; a loaded host is slack).
        self.assertLess(with_hook, plain + 1.0)
        # spendcap waits at most the delivery deadline (10 s) once the tree is gone.
        self.assertLess(exited - tree_gone, 10 + 3)
        self.assertGreaterEqual(len(hanging.requests), 1)
        rows = self.outbox_rows()
        self.assertEqual(len(rows), 1, err)
        self.assertEqual(rows[0]["destination"], "env:HOOK_URL")
        self.assertEqual(rows[0]["event"], "killed")
        listed = self.run_spendcap(["outbox", "list"])
        self.assertIn("killed", listed.stdout)
        self.assertIn("$HOOK_URL", listed.stdout)

        # A flush without the variable sends nothing; with it, delivers with a fresh timestamp.
        working = self.endpoint([200])
        flushed = self.run_spendcap(["outbox", "flush"], extra_env={"HOOK_SECRET": SECRET})
        self.assertEqual(flushed.returncode, 0, flushed.stderr)
        self.assertEqual(len(self.outbox_rows()), 1)
        before_flush = time.time()
        flushed = self.run_spendcap(["outbox", "flush"],
                                    extra_env={"HOOK_URL": working.url, "HOOK_SECRET": SECRET})
        self.assertEqual(flushed.returncode, 0, flushed.stdout + flushed.stderr)
        self.assertEqual(len(working.requests), 1)
        request = working.requests[0]
        self.assertTrue(signature_ok(request, SECRET))
        self.assertGreaterEqual(int(request["headers"]["X-Spendcap-Timestamp"]),
                                int(before_flush))
        self.assertEqual(json.loads(request["body"])["event_id"],
                         json.loads(hanging.requests[0]["body"])["event_id"])
        self.assertEqual(self.outbox_rows(), [])

    def test_5_bad_urls_give_clear_errors_and_enforcement_goes_on(self):
        self.write_policy({"defaults": self.DEFAULTS})
        url = "http://127.0.0.1:%d/hook" % closed_port()
        result = self.run_killed(["--webhook", url])
        self.assertEqual(result.returncode, 124, result.stderr)  # enforced as ever
        self.assertEqual(self.read_json("status.json")["reason"], "budget:run")
        self.assertIn("webhook http://127.0.0.1", result.stderr)
        self.assertIn("not delivered", result.stderr)
        self.assert_tree_gone()

        result = self.run_killed(["--webhook", "ftp://127.0.0.1/hook"], status="ftp.json")
        self.assertEqual(result.returncode, 125, result.stderr)
        self.assertIn("not an http:// or https:// URL", result.stderr)
        # Refused before the job started: the status file says so (issue 15: every outcome).
        self.assertEqual(self.read_json("ftp.json")["exit_code"], 125)
        self.assertIsNone(self.read_json("ftp.json")["run_id"])

        result = self.run_killed(["--webhook-env", "UNSET_HOOK"], status="unset.json")
        self.assertEqual(result.returncode, 125, result.stderr)
        self.assertIn("UNSET_HOOK", result.stderr)

    def test_6_secrets_stay_out_of_output_ledger_and_job(self):
        secret_path = "/services/T000/B000/secretpathXYZ"
        endpoint = self.endpoint([503], path=secret_path)
        self.policy_with({"url_env": "HOOK_URL", "secret_env": "HOOK_SECRET"})
        env = {"HOOK_URL": endpoint.url, "HOOK_SECRET": SECRET}
        result = self.run_killed(extra_env=env)
        self.assertEqual(result.returncode, 124, result.stderr)
        self.assertEqual(len(endpoint.requests), 3)  # 503 is retried, then spooled
        self.assertEqual(len(self.outbox_rows()), 1)
        listed = self.run_spendcap(["outbox", "list"], extra_env=env)
        flushed = self.run_spendcap(["outbox", "flush"], extra_env=env)
        self.assertEqual(flushed.returncode, 1)
        for text in (result.stdout, result.stderr, listed.stdout, listed.stderr, flushed.stdout,
                     flushed.stderr):
            self.assertNotIn(SECRET, text)
            self.assertNotIn("secretpathXYZ", text)
        with open(self.ledger_file(), "rb") as f:
            ledger = f.read()
        for suffix in ("-wal",):
            if os.path.exists(self.ledger_file() + suffix):
                with open(self.ledger_file() + suffix, "rb") as f:
                    ledger += f.read()
        self.assertIn(b"env:HOOK_URL", ledger)  # positive control: the outbox is in the file
        self.assertNotIn(SECRET.encode(), ledger)
        self.assertNotIn(b"secretpathXYZ", ledger)
        job_env = json.dumps(self.read_json("job-env.json"))
        self.assertNotIn(SECRET, job_env)
        self.assertNotIn("secretpathXYZ", job_env)


    def test_7_the_next_run_flushes_the_outbox(self):
        failing = self.endpoint([503])
        self.policy_with({"url_env": "HOOK_URL", "secret_env": "HOOK_SECRET"})
        result = self.run_killed(extra_env={"HOOK_URL": failing.url, "HOOK_SECRET": SECRET})
        self.assertEqual(result.returncode, 124, result.stderr)
        self.assertEqual(len(self.outbox_rows()), 1)
        spooled_id = json.loads(failing.requests[0]["body"])["event_id"]
        # The next run, with the variable now pointing at a working endpoint, sends it first.
        working = self.endpoint([200])
        result = self.run_killed(extra_env={"HOOK_URL": working.url, "HOOK_SECRET": SECRET},
                                 status="next.json")
        self.assertEqual(result.returncode, 124, result.stderr)
        ids = [e["event_id"] for e in working.events()]
        self.assertEqual(len(ids), 2, result.stderr)  # the spooled event, then this run's
        self.assertEqual(ids[0], spooled_id)
        self.assertTrue(all(signature_ok(r, SECRET) for r in working.requests))
        self.assertEqual(self.outbox_rows(), [])

    def test_8_refused_event_and_notify_test(self):
        endpoint = self.endpoint([200])
        self.policy_with({"url_env": "HOOK_URL"}, events=("refused",))
        env = {"HOOK_URL": endpoint.url}
        stop = self.run_spendcap(["stop", "--team", "vision", "--reason", "audit"])
        self.assertEqual(stop.returncode, 0, stop.stderr)
        result = self.run_killed(extra_env=env)
        self.assertEqual(result.returncode, 120, result.stderr)
        self.assertEqual([e["event"] for e in endpoint.events()], ["refused"], result.stderr)
        self.assertIn("stop order", endpoint.events()[0]["reason"])
        self.assertEqual(endpoint.events()[0]["exit_code"], 120)

        tested = self.run_spendcap(["notify", "test"], extra_env=env)
        self.assertEqual(tested.returncode, 0, tested.stderr)
        self.assertIn("webhook $HOOK_URL (json): delivered", tested.stdout)
        self.assertEqual(endpoint.events()[-1]["event"], "test")
        rejecting = self.endpoint([404])
        tested = self.run_spendcap(["notify", "test", "--webhook", rejecting.url], extra_env=env)
        self.assertEqual(tested.returncode, 1, tested.stderr)
        self.assertIn("not delivered: HTTP 404", tested.stdout)

    def test_9_an_owed_event_answered_2xx_is_not_sent_again_when_its_removal_fails(self):
        # Issue 33 (the fleet test, seed 33): a run delivered an owed event (2xx), then the ledger
        # stalled before the entry was removed; once the run's claim ended, the next spendcap sent
        # the same webhook-id again. Here the receiver takes the ledger's write lock before it
        # answers 200, and holds it past the lock timeout (10 s), so the removal fails.
        failing = self.endpoint([503])
        self.policy_with({"url_env": "HOOK_URL", "secret_env": "HOOK_SECRET"})
        result = self.run_killed(extra_env={"HOOK_URL": failing.url, "HOOK_SECRET": SECRET})
        self.assertEqual(result.returncode, 124, result.stderr)
        self.assertEqual(len(self.outbox_rows()), 1)
        owed_id = json.loads(failing.requests[0]["body"])["event_id"]

        held = threading.Event()

        def lock_the_ledger_then_200():
            connection = sqlite3.connect(self.ledger_file(), timeout=30, isolation_level=None,
                                         check_same_thread=False)
            connection.execute("BEGIN IMMEDIATE")

            def release():
                time.sleep(12)
                connection.execute("COMMIT")
                connection.close()
                held.set()

            threading.Thread(target=release, daemon=True).start()
            return 200

        receiver = self.endpoint([lock_the_ledger_then_200, 200])
        env = {"HOOK_URL": receiver.url, "HOOK_SECRET": SECRET}
        result = self.run_spendcap(["run", "--team", "vision", "--rate", "36", "--budget", "1",
                                    "--", "sleep", "3"], extra_env=env)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertTrue(held.is_set())  # the removal did wait out the lock
        self.assertEqual([json.loads(r["body"])["event_id"] for r in receiver.requests],
                         [owed_id])
        # Once the run's claim has ended (moved to the past here), no later spendcap sends it
        # again: delivered, it is out of the outbox.
        connection = sqlite3.connect(self.ledger_file(), timeout=30)
        with connection:
            connection.execute("UPDATE outbox SET claimed_until = 0")
        connection.close()
        flushed = self.run_spendcap(["outbox", "flush"], extra_env=env)
        self.assertEqual(flushed.returncode, 0, flushed.stdout + flushed.stderr)
        self.assertEqual(len(receiver.requests), 1, result.stderr + flushed.stdout)
        self.assertEqual(self.outbox_rows(), [])
        self.assertIn("not yet removed", result.stderr)


if __name__ == "__main__":
    unittest.main()
