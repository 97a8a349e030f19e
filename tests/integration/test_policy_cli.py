"""Policies on the command line (issue 3, test 1): `spendcap policy check`, a run never starting on
a bad policy, and a locked system policy that files, $SPENDCAP_POLICY and flags can only tighten.

The locked-policy tests need root and mount namespaces: /etc is overlaid, in a private mount
namespace only, with a directory holding spendcap/policy.json, so the real /etc/spendcap path is
exercised and the machine's /etc is never written."""
import json
import os
import shutil
import subprocess
import unittest

from spendcap_testlib import REPO, SPENDCAP, FIXTURES, LedgerTest

BAD = os.path.join(FIXTURES, "policies", "bad")


def can_overlay_etc():
    if os.geteuid() != 0 or not shutil.which("unshare"):
        return False
    probe = subprocess.run(["unshare", "--mount", "--propagation", "private", "true"],
                           capture_output=True)
    return probe.returncode == 0


class PolicyCheckTest(LedgerTest):
    def test_examples_are_valid(self):
        examples = [os.path.join(REPO, "policies", name)
                    for name in ("lab.json", "shared-runner.json")]
        result = self.run_spendcap(["policy", "check"] + examples)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(result.stdout.count(": ok"), 2)

    def test_every_bad_policy_names_its_json_path(self):
        with open(os.path.join(BAD, "EXPECTED.txt")) as f:
            expected = [line.rstrip("\n").split("\t") for line in f if line.strip()]
        self.assertGreater(len(expected), 10)
        for name, path, message in expected:
            with self.subTest(file=name):
                result = self.run_spendcap(["policy", "check", os.path.join(BAD, name)])
                self.assertEqual(result.returncode, 125, result.stdout)
                lines = [line.strip() for line in result.stderr.splitlines()]
                self.assertTrue(any(line.startswith(path + ":") and message in line
                                    for line in lines), result.stderr)

    def test_a_bad_policy_never_starts_the_job(self):
        marker = self.path("job-ran")
        for name in ("negative-amount.json", "unknown-key.json", "bad-period.json"):
            with self.subTest(file=name):
                result = self.run_spendcap(["run", "--policy", os.path.join(BAD, name), "--rate",
                                            "1", "--budget", "1", "--", "touch", marker])
                self.assertEqual(result.returncode, 125, result.stderr)
                self.assertIn(name, result.stderr)
                self.assertFalse(os.path.exists(marker))

    def test_unknown_gpu_type_on_the_command_line(self):
        self.write_policy({"rates": {"gpu": {"a100-80gb": {"on_demand": 4.1}}}})
        result = self.run_spendcap(["run", "--gpu", "h100", "--budget", "1", "--", "true"])
        self.assertEqual(result.returncode, 125)
        # The flag and its value, not "invalid policy": the file itself is fine (issue 24).
        self.assertIn("--gpu h100: unknown GPU type \"h100\"", result.stderr)
        self.assertNotIn("invalid policy", result.stderr)
        self.assertIn("a100-80gb", result.stderr)

    def test_rate_from_gpu_type_count_and_max_run_lowering(self):
        self.write_policy({
            "rates": {"gpu": {"a100-80gb": {"on_demand": 4.0, "spot": 1.5}},
                      "instance": {"cpu-8": {"on_demand": 0.8, "spot": 0.5}}},
            "budgets": {"team": {"vision": {"amount": 100, "period": "month", "max_run": 2}}}})
        result = self.run_spendcap(["run", "--team", "vision", "--gpu", "a100-80gb", "--gpus", "2",
                                    "--instance", "cpu-8", "--instances", "2", "--pricing", "spot",
                                    "--budget", "50", "--status-file", self.path("s.json"), "--",
                                    "true"])
        self.assertEqual(result.returncode, 0, result.stderr)
        status = self.read_json("s.json")
        self.assertEqual(status["rate_per_hour"], 2 * (2 * 1.5 + 0.5))  # instances x (gpus x gpu + instance)
        self.assertEqual(status["budget"], 2)  # lowered to the team's max_run, and said so
        self.assertIn("lowered to $2.00", result.stderr)

    def test_gpu_count_from_cuda_visible_devices(self):
        self.write_policy({"rates": {"gpu": {"a100-80gb": {"on_demand": 4.0}}}})
        result = self.run_spendcap(["run", "--gpu", "a100-80gb", "--budget", "5", "--status-file",
                                    self.path("s.json"), "--", "true"],
                                   extra_env={"CUDA_VISIBLE_DEVICES": "0,1,2"})
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(self.read_json("s.json")["rate_per_hour"], 12.0)


@unittest.skipUnless(can_overlay_etc(), "needs root and mount namespaces")
class LockedPolicyTest(LedgerTest):
    LOCKED = {
        "locked": True,
        "ledger": "LEDGER",
        "rates": {"gpu": {"a100-80gb": {"on_demand": 4.0}}},
        "defaults": {"gpu": "a100-80gb", "gpus": 2, "grace": "60s", "kill_after": "10s"},
        "budgets": {"team": {"vision": {"amount": 100, "period": "month", "max_run": 10}}},
    }

    def setUp(self):
        super().setUp()
        self.upper = self.path("etc-upper")
        os.makedirs(os.path.join(self.upper, "spendcap"))
        os.makedirs(self.path("etc-work"))
        os.chmod(self.tmp, 0o755)
        self.policy_file = os.path.join(self.upper, "spendcap", "policy.json")
        locked = dict(self.LOCKED, ledger="sqlite:" + self.ledger_file())
        with open(self.policy_file, "w") as f:
            json.dump(locked, f)
        os.chmod(self.policy_file, 0o644)
        os.chmod(os.path.join(self.upper, "spendcap"), 0o755)

    def run_locked(self, args, extra_env=None):
        script = ('mount -t overlay overlay -o lowerdir=/etc,upperdir="$0",workdir="$1" /etc '
                  '&& shift && exec "$@"')
        env = self.spendcap_env(extra_env)
        return subprocess.run(
            ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, self.upper,
             self.path("etc-work"), SPENDCAP] + list(args),
            env=env, cwd=self.tmp, capture_output=True, text=True, timeout=60)

    def assert_refused(self, result, *needles):
        self.assertEqual(result.returncode, 125, result.stderr)
        for needle in needles:
            self.assertIn(needle, result.stderr)
        self.assertFalse(os.path.exists(self.path("job-ran")), "the job must not start")

    def job(self):
        return ["--", "touch", self.path("job-ran")]

    def test_flags_cannot_loosen_it(self):
        for flags, needle in ((["--grace", "120s"], "--grace"),
                              (["--kill-after", "1m"], "--kill-after"),
                              (["--checkpoint-signal", "none"], "--checkpoint-signal"),
                              (["--mode", "warn"], "--mode"),
                              (["--ledger", self.path("other.db")], "--ledger"),
                              (["--gpus", "1"], "--gpus"),
                              (["--rate", "0.5"], "--rate")):
            with self.subTest(flags=flags):
                result = self.run_locked(["run", "--team", "vision"] + flags + self.job())
                self.assert_refused(result, needle, "locked")

    def test_a_refusal_says_its_detail_once(self):
        # Issue 30, item 10: one violation, said once (it used to follow, again, under the line).
        result = self.run_locked(["run", "--team", "vision", "--grace", "120s"] + self.job())
        self.assert_refused(result, "--grace", "locked")
        self.assertEqual(result.stderr.count("120s is longer than the locked 60s"), 1,
                         result.stderr)
        # Several: counted in the line, each listed once under it.
        result = self.run_locked(["run", "--team", "vision", "--grace", "120s", "--kill-after",
                                  "1m"] + self.job())
        self.assert_refused(result, "in 2 keys")
        self.assertEqual(result.stderr.count("120s is longer than the locked 60s"), 1,
                         result.stderr)
        self.assertEqual(result.stderr.count("1m is longer than the locked 10s"), 1, result.stderr)

    def test_the_no_team_refusal_suggests_only_the_users_teams(self):
        # root is in the group root, not in the group daemon: only vision is offered.
        locked = dict(self.LOCKED, ledger="sqlite:" + self.ledger_file(), budgets={"team": {
            "vision": {"amount": 100, "period": "month", "members": {"unix_groups": ["root"]}},
            "payroll": {"amount": 100, "period": "month",
                        "members": {"unix_groups": ["daemon"]}}}})
        with open(self.policy_file, "w") as f:
            json.dump(locked, f)
        result = self.run_locked(["run"] + self.job())
        self.assert_refused(result, "charges every run to one of its budgets", "--team vision")
        self.assertNotIn("payroll", result.stderr)

    def test_user_policy_and_environment_cannot_loosen_it(self):
        looser = {"budgets": {"team": {"vision": {"amount": 1000, "period": "month"}}}}
        self.write_policy(looser)  # ./spendcap.json
        result = self.run_locked(["run", "--team", "vision"] + self.job())
        self.assert_refused(result, "spendcap.json", "/budgets/team/vision/amount")
        os.remove(self.path("spendcap.json"))
        env_file = self.write_policy({"defaults": {"grace": "10m"}}, name="env-policy.json")
        result = self.run_locked(["run", "--team", "vision"] + self.job(),
                                 extra_env={"SPENDCAP_POLICY": env_file})
        self.assert_refused(result, "$SPENDCAP_POLICY", "/defaults/grace")

    def test_every_run_is_charged_to_a_locked_budget(self):
        for flags in ([], ["--team", "made-up"], ["--experiment", "x"]):
            with self.subTest(flags=flags):
                result = self.run_locked(["run", "--budget", "100000"] + flags + self.job())
                self.assert_refused(result, "charges every run to one of its budgets",
                                    "--team vision")

    def test_the_environment_cannot_choose_the_ledger(self):
        result = self.run_locked(["run", "--team", "vision", "--status-file",
                                  self.path("s.json")] + self.job(),
                                 extra_env={"XDG_DATA_HOME": self.path("elsewhere")})
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.path("elsewhere"), "spendcap")))
        self.assertEqual(len(self.runs()), 1, "recorded in the locked policy's ledger")

    def test_user_policy_budgets_are_not_applied_to_a_locked_ledger(self):
        self.write_policy({"budgets": {"team": {"vision": {"amount": 1, "period": "month"}}}})
        result = self.run_locked(["run", "--team", "vision"] + self.job())
        self.assertEqual(result.returncode, 0, result.stderr)
        budgets = self.spendcap_json(["budgets", "--ledger", self.ledger_file()])
        self.assertNotIn(1.0, [b["budget"] for b in budgets if b["scope"] == "team:vision"])

    def test_test_switches_are_refused(self):
        result = self.run_locked(["run", "--team", "vision"] + self.job(),
                                 extra_env={"SPENDCAP_TEST_SWITCHES": "no-cgroup"})
        self.assert_refused(result, "SPENDCAP_TEST_SWITCHES")

    def test_it_can_be_tightened(self):
        self.write_policy({"budgets": {"team": {"vision": {"amount": 50, "period": "month"}}}})
        result = self.run_locked(["run", "--team", "vision", "--grace", "5s", "--gpus", "4",
                                  "--status-file", self.path("s.json")] + self.job())
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertTrue(os.path.exists(self.path("job-ran")))
        self.assertEqual(self.read_json("s.json")["rate_per_hour"], 16.0)  # 4 x 4.0

    def test_a_policy_others_can_write_is_refused(self):
        os.chmod(self.policy_file, 0o666)
        result = self.run_locked(["run", "--team", "vision"] + self.job())
        self.assert_refused(result, "/etc/spendcap/policy.json")


if __name__ == "__main__":
    unittest.main()
