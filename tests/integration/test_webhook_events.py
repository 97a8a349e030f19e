"""Webhook events beyond a budget kill (issues 9, 10, 13), against a real HTTP server on
127.0.0.1: a crash-loop refusal sends `refused` once per window however often the job knocks, and
a run that a scheduler's SIGTERM preempts sends `preempted` (not `killed`), only where asked."""
import json
import os
import signal
import unittest

from spendcap_testlib import LedgerTest, wait_until
from test_webhooks import EVENT_SCHEMA, Endpoint

# The job says it started, then sleeps until stopped.
SLEEPER = "import sys, time; open(sys.argv[1], 'w').close(); time.sleep(60)"


class WebhookEventsTest(LedgerTest):
    DEFAULTS = {"grace": "0s", "kill_after": "1s", "sync": "1s"}

    def endpoint(self):
        endpoint = Endpoint((200,))
        self.addCleanup(endpoint.close)
        return endpoint

    def test_crash_loop_refusal_sends_one_refused_event_per_window(self):
        endpoint = self.endpoint()
        self.write_policy({"defaults": self.DEFAULTS,
                           "guards": {"crash_loop": {"max_failures": 2, "window": "10m"}},
                           "webhooks": [{"url_env": "HOOK_URL", "events": ["refused", "finished"]}]})
        env = {"HOOK_URL": endpoint.url}
        failing = ["run", "--team", "vision", "--experiment", "vit", "--rate", "1", "--budget", "5",
                   "--", "python3", "-c", "raise SystemExit(3)"]
        for _ in range(2):
            result = self.run_spendcap(failing, extra_env=env)
            self.assertEqual(result.returncode, 3, result.stderr)
        # Two failures: the `finished` events of the two failed runs came (the hook works).
        self.assertEqual([e["event"] for e in endpoint.events()], ["finished", "finished"])
        for _ in range(3):
            result = self.run_spendcap(failing, extra_env=env)
            self.assertEqual(result.returncode, 120, result.stderr)
            self.assertIn("crash-loop", result.stderr)
        refused = [e for e in endpoint.events() if e["event"] == "refused"]
        self.assertEqual(len(refused), 1, [e["event"] for e in endpoint.events()])
        self.assertEqual(refused[0]["reason"], "runaway:crash-loop")
        self.assertEqual(refused[0]["exit_code"], 120)
        self.assertEqual((refused[0]["team"], refused[0]["experiment"]), ("vision", "vit"))
        # Each knock is a refused row in the ledger; only the first one sent the event.
        rows = self.runs("status = 'refused'")
        self.assertEqual(len(rows), 3)
        self.assertEqual(refused[0]["run_id"], sorted(rows, key=lambda r: r["started_at"])[0]["id"])

    def preempt(self, events):
        endpoint = self.endpoint()
        hook = {"url_env": "HOOK_URL"}
        if events:
            hook["events"] = events
        self.write_policy({"defaults": self.DEFAULTS, "webhooks": [hook]})
        started = self.path("started")
        process = self.start_spendcap(
            ["run", "--rate", "36", "--budget", "10", "--status-file", self.path("status.json"),
             "--", "python3", "-c", SLEEPER, started], extra_env={"HOOK_URL": endpoint.url})
        wait_until(lambda: os.path.exists(started), 30, what="the job to start")
        process.send_signal(signal.SIGTERM)  # what Slurm's scancel and the kubelet send
        _, err = process.communicate(timeout=60)
        self.assertEqual(process.returncode, -signal.SIGTERM, err)
        self.assertEqual(self.read_json("status.json")["status"], "preempted")
        return endpoint, err

    def test_sigterm_preemption_sends_one_preempted_event(self):
        endpoint, err = self.preempt(["preempted", "killed", "finished"])
        events = [e["event"] for e in endpoint.events()]
        self.assertEqual(events, ["preempted"], err)  # not killed, not finished besides
        event = endpoint.events()[0]
        self.assertEqual(event["run_id"], self.read_json("status.json")["run_id"])
        self.assertIn("ended_at", event)
        import jsonschema
        with open(EVENT_SCHEMA) as f:
            jsonschema.validate(event, json.load(f))

    def test_preempted_is_not_in_the_default_events(self):
        # Negative control: the default set (warning, killed, refused, lost) sends nothing for a
        # preemption.
        endpoint, err = self.preempt(None)
        self.assertEqual(endpoint.events(), [], err)


if __name__ == "__main__":
    unittest.main()
