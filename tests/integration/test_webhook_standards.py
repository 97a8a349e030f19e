"""Webhooks as the tools downstream expect them (issue 21, items 3 and 4), against a real HTTP
server on 127.0.0.1: every event carries Standard Webhooks' webhook-id, webhook-timestamp and
webhook-signature, verified here with the spec's own algorithm written from its text
(spec/standard-webhooks.md: the content signed is `{msg_id}.{timestamp}.{payload}`, HMAC-SHA256,
base64, prefixed "v1,", space-delimited list; a whsec_ secret is base64 after the prefix), for a
whsec_ secret and for a plain one (whose key is its raw bytes), with negative controls (another
secret, an altered body, another id or timestamp fail). And Slack: a hostile experiment name goes
out escaped, only inside plain_text objects, with mrkdwn off for the fallback."""
import base64
import hashlib
import hmac
import json
import os
import time
import unittest

from spendcap_testlib import LedgerTest
from test_webhooks import Endpoint

KEY = bytes(range(1, 33))                       # 32 random-looking bytes
WHSEC = "whsec_" + base64.b64encode(KEY).decode()
PLAIN = "plain-secret-0123456789abcdef"
HOSTILE = "<!channel> *urgent* <https://x|click>"


def headers_of(request):
    return {k.lower(): v for k, v in request["headers"].items()}


def spec_verify(key, headers, body, tolerance=300):
    """Standard Webhooks verification as the spec describes it: the three headers, a timestamp
    within the tolerance, HMAC-SHA256 of id.timestamp.body with the key, base64, compared in
    constant time against each "v1," signature of the space-delimited list."""
    msg_id, timestamp = headers.get("webhook-id"), headers.get("webhook-timestamp")
    signatures = headers.get("webhook-signature")
    if not (msg_id and timestamp and signatures):
        return False
    if abs(time.time() - int(timestamp)) > tolerance:
        return False
    signed = msg_id.encode() + b"." + timestamp.encode() + b"." + body
    expected = base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
    for signature in signatures.split(" "):
        version, _, value = signature.partition(",")
        if version == "v1" and hmac.compare_digest(value, expected):
            return True
    return False


def key_of(secret):
    """The spec's secret serialization: whsec_ + base64; other secrets: their bytes."""
    if secret.startswith("whsec_"):
        return base64.b64decode(secret[len("whsec_"):])
    return secret.encode()


class WebhookCase(LedgerTest):
    DEFAULTS = {"grace": "0s", "kill_after": "1s", "sync": "1s"}

    def endpoint(self):
        endpoint = Endpoint([200])
        self.addCleanup(endpoint.close)
        return endpoint

    def run_with(self, hook, secret, endpoint, experiment="vit"):
        self.write_policy({"defaults": self.DEFAULTS, "webhooks": [hook]})
        # The 50% warning, then killed at the budget: two events, each verified.
        return self.run_spendcap(
            ["run", "--team", "vision", "--experiment", experiment, "--project", "p&q",
             "--tag", "owner=<@U1>", "--rate", "36", "--budget", "0.04",
             "--status-file", self.path("status.json"), "--",
             "python3", "-c", "import time; time.sleep(60)"],
            extra_env={"HOOK_URL": endpoint.url, "HOOK_SECRET": secret})


class StandardWebhooksTest(WebhookCase):
    def check_every_event_verifies(self, secret):
        endpoint = self.endpoint()
        result = self.run_with({"url_env": "HOOK_URL", "secret_env": "HOOK_SECRET",
                                "events": ["warning", "killed"]}, secret, endpoint)
        self.assertEqual(result.returncode, 124, result.stderr)
        self.assertEqual(sorted(e["event"] for e in endpoint.events()), ["killed", "warning"],
                         result.stderr)
        key = key_of(secret)
        for request in endpoint.requests:
            headers, body = headers_of(request), request["body"]
            event = json.loads(body)
            self.assertEqual(headers["webhook-id"], event["event_id"])
            self.assertRegex(headers["webhook-timestamp"], r"^\d+$")
            self.assertRegex(headers["webhook-signature"], r"^v1,[A-Za-z0-9+/]+={0,2}$")
            self.assertTrue(spec_verify(key, headers, body), headers)
            # Today's headers stay beside them.
            self.assertIn("x-spendcap-signature", headers)
            # Negative controls: the check can fail.
            self.assertFalse(spec_verify(b"another key", headers, body))
            self.assertFalse(spec_verify(key, headers, body + b" "))
            self.assertFalse(spec_verify(key, dict(headers, **{"webhook-id": "x"}), body))
            self.assertFalse(spec_verify(
                key, dict(headers, **{"webhook-timestamp": str(int(headers["webhook-timestamp"])
                                                               + 1)}), body))
            self.assertFalse(spec_verify(key, {k: v for k, v in headers.items()
                                               if k != "webhook-id"}, body))
        return endpoint, key

    def test_whsec_secret_key_is_its_base64(self):
        endpoint, key = self.check_every_event_verifies(WHSEC)
        # The whsec_ string's own bytes are not the key (the reference libraries decode it).
        request = endpoint.requests[0]
        self.assertFalse(spec_verify(WHSEC.encode(), headers_of(request), request["body"]))

    def test_plain_secret_key_is_its_bytes(self):
        endpoint, key = self.check_every_event_verifies(PLAIN)
        # The reference libraries take it as "whsec_" + base64 of those bytes.
        self.assertEqual(key_of("whsec_" + base64.b64encode(PLAIN.encode()).decode()), key)

    def test_a_whsec_secret_that_is_not_base64_is_refused(self):
        endpoint = self.endpoint()
        result = self.run_with({"url_env": "HOOK_URL", "secret_env": "HOOK_SECRET"},
                               "whsec_not*base64", endpoint)
        self.assertEqual(result.returncode, 125, result.stderr)
        self.assertIn("not base64", result.stderr)
        self.assertNotIn("not*base64", result.stderr)  # the secret is not echoed
        self.assertEqual(endpoint.requests, [])

    def test_unsigned_events_still_carry_id_and_timestamp(self):
        endpoint = self.endpoint()
        result = self.run_with({"url_env": "HOOK_URL", "events": ["killed"]}, "", endpoint)
        self.assertEqual(result.returncode, 124, result.stderr)
        self.assertEqual(len(endpoint.requests), 1, result.stderr)
        headers = headers_of(endpoint.requests[0])
        self.assertEqual(headers["webhook-id"], endpoint.events()[0]["event_id"])
        self.assertNotIn("webhook-signature", headers)


def texts_outside_plain_text(node, out):
    if isinstance(node, dict):
        if isinstance(node.get("text"), str) and node.get("type") != "plain_text":
            out.append(node["text"])
        for value in node.values():
            texts_outside_plain_text(value, out)
    elif isinstance(node, list):
        for value in node:
            texts_outside_plain_text(value, out)
    return out


def slack_safe(message):
    """Why `message` is unsafe for Slack ("" when safe): raw <, > or an unescaped & anywhere; user
    text outside plain_text objects other than a fallback `text` read with mrkdwn off."""
    body = json.dumps(message, ensure_ascii=False)
    for raw in ("<", ">"):
        if raw in body:
            return "raw %r" % raw
    for text in texts_outside_plain_text(message, []):
        if text is not message.get("text") or message.get("mrkdwn") is not False:
            return "text outside plain_text with mrkdwn on: %r" % text
    return ""


class SlackTest(WebhookCase):
    def test_hostile_names_are_escaped_in_plain_text(self):
        endpoint = self.endpoint()
        result = self.run_with({"url_env": "HOOK_URL", "format": "slack", "events": ["killed"]},
                               "", endpoint, experiment=HOSTILE)
        self.assertEqual(result.returncode, 124, result.stderr)
        self.assertEqual(len(endpoint.requests), 1, result.stderr)
        message = endpoint.events()[0]
        self.assertEqual(slack_safe(message), "")
        body = json.dumps(message, ensure_ascii=False)
        self.assertIn("&lt;!channel&gt; *urgent* &lt;https://x|click&gt;", body)
        self.assertIn("p&amp;q", body)
        self.assertIn("&lt;@U1&gt;", body)
        # A message a person acts on: who, team, spend of which budget, why, where.
        status = self.read_json("status.json")
        for part in ("User: ", "Team: vision", "of the run budget $0.04", "Why: killed (budget:run)",
                     "host ", status["run_id"]):
            self.assertIn(part, body)
        self.assertEqual([b["type"] for b in message["blocks"]][:2], ["header", "section"])
        self.assertIn("vision", message["text"])
        # Negative control: the message as it went out before issue 21 is caught.
        self.assertNotEqual(slack_safe({"text": "spendcap: run 1 killed (team vision, experiment "
                                                + HOSTILE + ")"}), "")
        self.assertNotEqual(slack_safe({"text": "a", "mrkdwn": False, "blocks": [
            {"type": "section", "text": {"type": "mrkdwn", "text": "*urgent*"}}]}), "")


if __name__ == "__main__":
    unittest.main()
