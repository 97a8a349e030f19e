"""Secrets held by the runner (issue 19, item 3), on the real setgid install
(scripts/install-shared-runner.sh, as test_shared_runner does it: a private mount namespace with
/etc overlaid, real users created here and removed after). The locked policy's webhook names a
url_file and a secret_file, root:spendcap 0640: a user with neither variable runs, the event
arrives at a real HTTP server on 127.0.0.1 signed (Standard Webhooks, verified with the spec's
algorithm), and the secret is in no file the user can read, not in the job's environment
(/proc/PID/environ), not in any argv the user can see, not in the output, and not in the ledger
(the outbox names the file). A secret file everyone may read is refused."""
import json
import os
import unittest

from test_shared_runner import LOCKED, WHY_NOT, SharedRunnerSetup
from test_webhook_standards import key_of, spec_verify, headers_of
from test_webhooks import Endpoint
from spendcap_testlib import free_port

SECRET = "whsec_" + "c2VjcmV0LWtleS1vZi10aGUtcnVubmVyLTAxMjM0NTY3"  # base64 of 33 bytes
URL_FILE, SECRET_FILE = "/etc/spendcap/hook.url", "/etc/spendcap/hook.secret"
DOWN_FILE = "/etc/spendcap/down.url"

# The job: its own environment, what it finds of the secret in every /proc/PID/{environ,cmdline}
# it can read, and whether it can open the runner's files.
JOB = r"""
import json, os, sys
secret, out = sys.stdin.readline().strip(), sys.argv[1]
report = {"environ": open("/proc/self/environ", "rb").read().decode(errors="replace"),
          "found_in": [], "opened": []}
for pid in os.listdir("/proc"):
    if not pid.isdigit():
        continue
    for name in ("environ", "cmdline"):
        try:
            data = open("/proc/%s/%s" % (pid, name), "rb").read()
        except OSError:
            continue
        if secret.encode() in data:
            report["found_in"].append("/proc/%s/%s" % (pid, name))
for path in sys.argv[2:]:
    try:
        open(path).read(); report["opened"].append(path)
    except OSError:
        pass
json.dump(report, open(out, "w"))
"""


@unittest.skipIf(WHY_NOT, WHY_NOT or "")
class RunnerSecretsTest(SharedRunnerSetup):
    locked_policy = dict(LOCKED, webhooks=[
        {"url_file": URL_FILE, "secret_file": SECRET_FILE, "events": ["finished"]},
        {"url_file": DOWN_FILE, "secret_file": SECRET_FILE, "events": ["finished"]}])

    def setUp(self):
        super().setUp()
        self.endpoint = Endpoint([200])
        self.addCleanup(self.endpoint.close)
        self.down_url = "http://127.0.0.1:%d/down-token-%s" % (free_port(), os.getpid())
        for path, text in ((URL_FILE, self.endpoint.url), (SECRET_FILE, SECRET),
                           (DOWN_FILE, self.down_url)):
            result = self.inside(["sh", "-c", 'umask 077; printf "%s\\n" "$1" > "$0" && '
                                  'chown root:spendcap "$0" && chmod 0640 "$0"', path, text])
            self.assertEqual(result.returncode, 0, result.stderr)

    def test_a_user_without_variables_runs_and_the_event_is_signed(self):
        user = self.users[0]
        out = os.path.join(self.tmp, user, "job.json")
        # The job learns the secret on its stdin, so that no argv of the test's own holds it.
        result = self.inside([self.bin, "run", "--team", "vision", "--", "python3", "-c", JOB,
                              out, URL_FILE, SECRET_FILE], user=user, env=self.user_env(user),
                             input=SECRET + "\n")
        self.assertEqual(result.returncode, 0, result.stderr)
        # Signed, and verified with the spec's algorithm; a wrong key fails (negative control).
        self.assertEqual(len(self.endpoint.requests), 1, result.stderr)
        request = self.endpoint.requests[0]
        self.assertEqual(json.loads(request["body"])["event"], "finished")
        self.assertTrue(spec_verify(key_of(SECRET), headers_of(request), request["body"]))
        self.assertFalse(spec_verify(b"not the key", headers_of(request), request["body"]))
        # The user cannot read the files, and the secret is nowhere the user or the job sees.
        for path in (URL_FILE, SECRET_FILE):
            read = self.inside(["cat", path], user=user, env=self.user_env(user))
            self.assertNotEqual(read.returncode, 0)
            self.assertIn("Permission denied", read.stderr)
        with open(out) as f:
            job = json.load(f)
        self.assertEqual(job["opened"], [])
        self.assertNotIn(SECRET, job["environ"])
        self.assertNotIn(self.endpoint.url, job["environ"])
        self.assertEqual(job["found_in"], [])
        for text in (result.stdout, result.stderr):
            self.assertNotIn(SECRET, text)
            self.assertNotIn(self.endpoint.url, text)
            self.assertNotIn("down-token", text)
        # The undeliverable webhook's event is in the outbox, named by its file only.
        rows = json.loads(self.root_sql(
            "SELECT json_group_array(json_object('destination', destination, 'secret',"
            " secret_env)) FROM outbox"))
        self.assertEqual(rows, [{"destination": "file:" + DOWN_FILE,
                                 "secret": "file:" + SECRET_FILE}], result.stderr)
        with open(self.ledger, "rb") as f:
            ledger_bytes = f.read()
        for wal in (self.ledger + "-wal",):
            if os.path.exists(wal):
                with open(wal, "rb") as f:
                    ledger_bytes += f.read()
        self.assertNotIn(SECRET.encode(), ledger_bytes)
        self.assertNotIn(b"down-token", ledger_bytes)
        # Nothing in the user's own files either.
        for root, _, files in os.walk(os.path.join(self.tmp, user)):
            for name in files:
                with open(os.path.join(root, name), "rb") as f:
                    self.assertNotIn(SECRET.encode(), f.read(), name)

    def test_a_users_layer_naming_a_runner_held_file_is_refused(self):
        # Issue 29, break 3: the user's ./spendcap.json named the runner's secret_file beside its
        # own url_env, and the runner signed events with the runner's secret for the user's URL.
        user = self.users[0]
        home = os.path.join(self.tmp, user)
        evil = Endpoint([200])
        self.addCleanup(evil.close)
        layers = {
            "secret_file": {"webhooks": [{"url_env": "EVIL", "secret_file": SECRET_FILE,
                                          "events": ["finished"]}]},
            "url_file": {"webhooks": [{"url_file": URL_FILE, "events": ["finished"]}]},
            "ledger_password_file": {"ledger_password_file": SECRET_FILE},
            # The negative control: the user's own webhook by variable runs and is sent.
            None: {"webhooks": [{"url_env": "EVIL", "events": ["finished"]}]},
        }
        for named, layer in layers.items():
            with self.subTest(named=named):
                with open(os.path.join(home, "spendcap.json"), "w") as f:
                    json.dump(layer, f)
                result = self.inside(["sh", "-c", 'cd "$0" && exec "$1" run --team vision -- true',
                                      home, self.bin], user=user,
                                     env=self.user_env(user, {"EVIL": evil.url}))
                if named is None:
                    self.assertEqual(result.returncode, 0, result.stderr)
                    self.assertEqual(len(evil.requests), 1, result.stderr)
                    self.assertNotIn("webhook-signature", {k.lower() for k in
                                                           evil.requests[0]["headers"]})
                    continue
                self.assertEqual(result.returncode, 125, result.stderr)
                self.assertIn("runner-held file", result.stderr)
                self.assertIn(named, result.stderr)
                self.assertNotIn(SECRET, result.stderr)
                self.assertEqual(evil.requests, [], "an event reached the user's server")

    def test_a_forged_front_call_is_refused(self):
        # Issue 29, break 8: any regular file passed as the environment, and a forged call's
        # other subcommands acting as the service user.
        user = self.users[0]
        env_file = os.path.join(self.tmp, user, "env")
        with open(env_file, "w") as f:
            f.write("PATH=/usr/bin:/bin\0")
        forge = r"""
import fcntl, os, subprocess, sys
runner, env_file, kind = sys.argv[1:4]
if kind == "file":
    env = os.open(env_file, os.O_RDONLY)
else:
    env = os.memfd_create("spendcap-environment", os.MFD_ALLOW_SEALING)
    os.write(env, b"PATH=/usr/bin:/bin\0")
    if kind != "unsealed":
        fcntl.fcntl(env, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW |
                    fcntl.F_SEAL_WRITE | fcntl.F_SEAL_SEAL)
r, w = os.pipe()
args = sys.argv[4:]
result = subprocess.run([runner, "--front-fds", "%d,%d" % (env, r)] + args, pass_fds=(env, r),
                        capture_output=True, text=True, timeout=30)
sys.stdout.write(result.stderr)
sys.exit(result.returncode)
"""
        cases = (("file", ["run", "--team", "vision", "--", "true"], "sealed environment memfd"),
                 ("unsealed", ["run", "--team", "vision", "--", "true"],
                  "sealed environment memfd"),
                 ("sealed", ["stop", "--team", "vision"], "the front's `run` only"),
                 ("sealed", ["ps"], "the front's `run` only"))
        for kind, args, message in cases:
            with self.subTest(kind=kind, args=args):
                result = self.inside(["python3", "-c", forge, self.runner, env_file, kind] + args,
                                     user=user, env=self.user_env(user))
                self.assertEqual(result.returncode, 125, result.stdout + result.stderr)
                self.assertIn(message, result.stdout)
        self.assertEqual(self.root_sql("SELECT count(*) FROM stop_orders"), "0")

    def test_a_secret_file_everyone_reads_is_refused(self):
        self.inside(["chmod", "0644", SECRET_FILE])
        result = self.spendcap(self.users[0], ["run", "--team", "vision", "--", "true"])
        self.assertEqual(result.returncode, 125, result.stderr)
        self.assertIn("everyone may read it", result.stderr)
        self.assertNotIn(SECRET, result.stderr)


if __name__ == "__main__":
    unittest.main()
