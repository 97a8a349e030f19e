"""What spendcap says, in words a user reads (issue 30, item 10): a short start line (the rest
under --verbose), no respawn-guard detector line for every ordinary user, a command behind a PATH
directory the user cannot search is "not found" (127) as the shell says, bare `show` asks for a
run, `run --policy` lists every error of the file as `policy check` does and `policy check` does
not suggest itself, `estimate --json` money rounded, and --tokens 1T. The locked-policy words are
in test_policy_cli.py."""
import json
import os
import pwd
import re
import shutil
import subprocess
import unittest

from spendcap_testlib import SPENDCAP, LedgerTest

START = re.compile(r"(?m)^spendcap: (run [0-9a-f]{8} started.*)$")


def nobody_can_run_spendcap():
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        return False
    try:
        pwd.getpwnam("nobody")
    except KeyError:
        return False
    return True


class WordsTest(LedgerTest):
    def start_line(self, stderr):
        match = START.search(stderr)
        self.assertTrue(match, stderr)
        return match.group(1)

    def test_start_line_is_short_and_verbose_says_the_rest(self):
        self.write_policy({"budgets": {"team": {"computer-vision-research": {
            "amount": 1000, "period": "month"}}}})
        args = ["run", "--team", "computer-vision-research", "--experiment",
                "resnet50-ablation-lr-sweep-2026-12", "--rate", "36", "--budget", "5"]
        result = self.run_spendcap(args + ["--", "true"])
        self.assertEqual(result.returncode, 0, result.stderr)
        line = self.start_line(result.stderr)
        self.assertLessEqual(len("spendcap: " + line), 100, line)
        self.assertRegex(line, r"^run [0-9a-f]{8} started: burn \$36\.00/h, budget \$5\.00; "
                               r"trips in \w+ at \$\d+\.\d+$")
        for detail in ("reserve", "isolation", "ledger", "team"):
            self.assertNotIn(detail, line)
        self.assertNotIn("respawn-loop guard", result.stderr)
        # --verbose: the whole of it, and the respawn-loop guard's detector.
        result = self.run_spendcap(args + ["--verbose", "--", "true"])
        self.assertEqual(result.returncode, 0, result.stderr)
        line = self.start_line(result.stderr)
        for detail in ("team computer-vision-research", "reserve $", "isolation: ", "; ledger "):
            self.assertIn(detail, line)
        self.assertIn("respawn-loop guard: ", result.stderr)

    @unittest.skipUnless(nobody_can_run_spendcap(), "needs root to become nobody, and setpriv")
    def test_an_ordinary_user_sees_no_fallback_line_and_path_search_is_the_shells(self):
        nobody = pwd.getpwnam("nobody")
        home = self.path("nobody")
        for name in ("", "data", "state", "config", "tmp"):
            os.mkdir(os.path.join(home, name))
            os.chown(os.path.join(home, name), nobody.pw_uid, nobody.pw_gid)
        os.chmod(self.tmp, 0o755)
        # A PATH directory nobody cannot search, holding a program of that name; the real one
        # later on PATH is found, and one that is nowhere else is "not found", 127, as in sh.
        locked = self.path("locked-bin")
        os.mkdir(locked, 0o700)
        for program in ("true", "only-here"):
            with open(os.path.join(locked, program), "w") as f:
                f.write("#!/bin/sh\nexit 0\n")
            os.chmod(os.path.join(locked, program), 0o755)
        env = dict(self.spendcap_env({
            "HOME": home, "XDG_DATA_HOME": os.path.join(home, "data"),
            "XDG_STATE_HOME": os.path.join(home, "state"),
            "XDG_CONFIG_HOME": os.path.join(home, "config"), "TMPDIR": os.path.join(home, "tmp")}),
            PATH=locked + ":/usr/bin:/bin")

        def as_nobody(args):
            return subprocess.run(
                ["setpriv", "--reuid=nobody", "--regid=%d" % nobody.pw_gid, "--clear-groups"] +
                args, env=env, cwd=home, capture_output=True, text=True, timeout=60)

        result = as_nobody([SPENDCAP, "run", "--rate", "1", "--budget", "100", "--", "true"])
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertNotIn("respawn-loop guard", result.stderr)
        self.assertNotIn("fallback", result.stderr)
        self.assertEqual(len(START.findall(result.stderr)), 1, result.stderr)
        shell = as_nobody(["sh", "-c", "only-here"])
        self.assertEqual(shell.returncode, 127, shell.stderr)  # the shell's answer
        result = as_nobody([SPENDCAP, "run", "--rate", "1", "--budget", "100", "--",
                            "only-here"])
        self.assertEqual(result.returncode, 127, result.stderr)
        self.assertIn("not found", result.stderr)
        self.assertNotIn("not executable", result.stderr)
        # Negative control: a file that is there but not executable is still 126.
        plain = os.path.join(home, "plain")
        with open(plain, "w") as f:
            f.write("#!/bin/sh\n")
        os.chmod(plain, 0o644)
        result = as_nobody([SPENDCAP, "run", "--rate", "1", "--budget", "100", "--", plain])
        self.assertEqual(result.returncode, 126, result.stderr)

    def test_bare_show_asks_for_a_run(self):
        result = self.run_spendcap(["show"])
        self.assertEqual(result.returncode, 125, result.stderr)
        self.assertNotIn("is required", result.stderr)
        self.assertIn("which run?", result.stderr)
        self.assertIn("spendcap runs", result.stderr)

    def test_run_policy_lists_every_error_as_policy_check_does(self):
        # Three errors of keys, and one that only the whole policy shows (a GPU type it does not
        # price): `run --policy` used to list the first three.
        bad = self.write_policy({
            "mode": "sometimes",
            "defaults": {"grace": "soon", "gpu": "h100"},
            "budgets": {"team": {"vision": {"amount": -5, "period": "month"}}},
        }, name="bad.json")
        check = self.run_spendcap(["policy", "check", bad])
        self.assertEqual(check.returncode, 125, check.stderr)
        listed = [line.strip() for line in check.stderr.splitlines() if line.startswith("  ")]
        self.assertEqual(len(listed), 4, check.stderr)
        self.assertIn("invalid policy (4 errors)", check.stderr)
        # policy check does not suggest running policy check.
        self.assertNotIn("spendcap policy check", check.stderr)
        run = self.run_spendcap(["run", "--policy", bad, "--rate", "1", "--budget", "1", "--",
                                 "true"])
        self.assertEqual(run.returncode, 125, run.stderr)
        run_listed = [line.strip() for line in run.stderr.splitlines() if line.startswith("  ")]
        self.assertEqual(sorted(run_listed), sorted(listed), run.stderr)

    def test_estimate_json_money_is_rounded_and_counts_take_t(self):
        result = self.run_spendcap(["estimate", "--rate", "2.50", "--step-time", "1s", "--steps",
                                    "60000", "--json"])
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn('"cost": 41.666667', result.stdout)
        self.assertNotIn("41.66666666", result.stdout)
        result = self.run_spendcap(["estimate", "--params", "1B", "--tokens", "1T",
                                    "--peak-tflops", "750", "--rate", "2", "--json"])
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertAlmostEqual(json.loads(result.stdout)["flops"], 6e21, delta=1e9)


if __name__ == "__main__":
    unittest.main()
