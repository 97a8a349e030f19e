"""A project's run defaults and --dry-run (issue 40, item 5): team, experiment, project, rate,
budget and grace from the policy's `defaults` (the project's spendcap.json, found up to the git
repository's root) or $SPENDCAP_* variables, flags first; --dry-run prints the terms with their
sources and the admission verdict and starts nothing; `runs` reads past a broken spendcap.json.

Negative control: before this change `defaults.team` was an unknown key (the run was refused,
125) and --dry-run was an unknown flag; test_the_project_file_is_found_up_to_the_repository_root
fails when the walk up is removed (the subdirectory run has no team and no rate)."""
import os
import subprocess
import unittest

from spendcap_testlib import SPENDCAP, LedgerTest

PROJECT = {"defaults": {"team": "vision", "experiment": "resnet", "project": "p1", "rate": 36,
                        "budget": 5, "grace": "2s"},
           "budgets": {"team": {"vision": {"amount": 100, "period": "month"}}}}


class ProjectDefaultsTest(LedgerTest):
    def run_in(self, cwd, args, extra_env=None):
        return subprocess.run([SPENDCAP] + list(args), env=self.spendcap_env(extra_env), cwd=cwd,
                              capture_output=True, text=True, timeout=120)

    def test_spendcap_run_with_only_a_command_takes_the_project_file(self):
        self.write_policy(PROJECT)
        result = self.run_spendcap(["run", "--status-file", self.path("s.json"), "--", "sh",
                                    "-c", 'echo "$SPENDCAP_TEAM $SPENDCAP_EXPERIMENT '
                                          '$SPENDCAP_PROJECT $SPENDCAP_BUDGET_USD"'])
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(result.stdout.strip(), "vision resnet p1 5")
        (row,) = self.runs()
        self.assertEqual((row["team"], row["experiment"], row["project"]),
                         ("vision", "resnet", "p1"))
        self.assertEqual(self.read_json("s.json")["rate_per_hour"], 36)

    def test_flags_beat_variables_beat_the_file(self):
        self.write_policy(PROJECT)
        result = self.run_spendcap(
            ["run", "--dry-run", "--team", "flagteam", "--", "true"],
            extra_env={"SPENDCAP_TEAM": "envteam", "SPENDCAP_EXPERIMENT": "envexp",
                       "SPENDCAP_BUDGET": "3", "SPENDCAP_GRACE": "1s"})
        self.assertEqual(result.returncode, 0, result.stderr)
        out = result.stdout
        self.assertRegex(out, r"team +flagteam +\(--team\)")
        self.assertRegex(out, r"experiment +envexp +\(SPENDCAP_EXPERIMENT\)")
        self.assertRegex(out, r"project +p1 +\(\./spendcap\.json\)")
        self.assertRegex(out, r"budget +\$3\.00 +\(SPENDCAP_BUDGET\)")
        self.assertRegex(out, r"grace +1s +\(SPENDCAP_GRACE\)")
        self.assertRegex(out, r"rate +\$36\.00/h +\(\./spendcap\.json\)")

    def test_a_bad_variable_is_named(self):
        self.write_policy(PROJECT)
        result = self.run_spendcap(["run", "--", "true"], extra_env={"SPENDCAP_BUDGET": "lots"})
        self.assertEqual(result.returncode, 125)
        self.assertIn("SPENDCAP_BUDGET lots", result.stderr)
        self.assertEqual(self.runs(), [])

    def test_an_unknown_key_in_defaults_is_refused_naming_file_and_key(self):
        self.write_policy({"defaults": {"teem": "vision"}})
        result = self.run_spendcap(["run", "--rate", "1", "--budget", "1", "--", "true"])
        self.assertEqual(result.returncode, 125)
        self.assertIn("./spendcap.json", result.stderr)
        self.assertIn('/defaults/teem: unknown key (did you mean "team"?)', result.stderr)

    def test_the_project_file_is_found_up_to_the_repository_root(self):
        repo = self.path("repo")
        sub = os.path.join(repo, "src", "deep")
        os.makedirs(sub)
        os.mkdir(os.path.join(repo, ".git"))
        self.write_policy(PROJECT, name="repo/spendcap.json")
        result = self.run_in(sub, ["run", "--dry-run", "--", "true"])
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertRegex(result.stdout, r"team +vision +\(%s\)" % os.path.join(repo, "spendcap.json"))
        # Outside a repository only the working directory counts.
        os.rmdir(os.path.join(repo, ".git"))
        result = self.run_in(sub, ["run", "--dry-run", "--", "true"])
        self.assertEqual(result.returncode, 125)
        self.assertIn("no burn rate", result.stderr)

    def test_a_zero_rate_in_the_file_is_refused_naming_the_key(self):
        # (A locked policy's rules for these keys: tests/unit/policy/test_keys.cpp.)
        self.write_policy({"defaults": {"rate": 0.0}})
        result = self.run_spendcap(["run", "--budget", "1", "--", "true"])
        self.assertEqual(result.returncode, 125)
        self.assertIn("/defaults/rate", result.stderr)


class DryRunTest(LedgerTest):
    def test_dry_run_starts_nothing_and_writes_no_ledger(self):
        self.write_policy(PROJECT)
        marker = self.path("started")
        result = self.run_spendcap(["run", "--dry-run", "--", "touch", marker])
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("verdict: would be admitted", result.stdout)
        self.assertIn("team:vision: $100.00 a month, $100.00 left", result.stdout)
        self.assertFalse(os.path.exists(marker))
        self.assertFalse(os.path.exists(self.ledger_file()))

    def test_dry_run_says_a_refusal_and_exits_120(self):
        # The team's budget cannot hold the run's shutdown reserve ($36/h x 13 s = $0.13).
        self.write_policy(dict(PROJECT, budgets={"team": {"vision": {"amount": 0.05,
                                                                      "period": "month"}}}))
        result = self.run_spendcap(["run", "--dry-run", "--", "true"])
        self.assertEqual(result.returncode, 120, result.stdout + result.stderr)
        self.assertIn("verdict: would be refused (120): team:vision has $0.05 left, less than "
                      "the shutdown reserve $0.13", result.stdout)
        self.assertFalse(os.path.exists(self.ledger_file()))
        # And a real run is refused the same way (the verdict is admission's).
        real = self.run_spendcap(["run", "--", "true"])
        self.assertEqual(real.returncode, 120, real.stderr)
        self.assertIn("team:vision", real.stderr)
        # Once the ledger exists, its figures are the ones the verdict uses.
        again = self.run_spendcap(["run", "--dry-run", "--", "true"])
        self.assertEqual(again.returncode, 120, again.stdout + again.stderr)

    def test_dry_run_sees_a_stop_order(self):
        self.write_policy(PROJECT)
        self.run_ok(["run", "--", "true"])
        self.run_ok(["stop", "--team", "vision", "--reason", "frozen"])
        result = self.run_spendcap(["run", "--dry-run", "--", "true"])
        self.assertEqual(result.returncode, 120, result.stdout + result.stderr)
        self.assertIn("a stop order for team:vision", result.stdout)


class BrokenProjectFileTest(LedgerTest):
    def test_runs_warns_and_reads_history_past_a_broken_file(self):
        self.run_ok(["run", "--rate", "1", "--budget", "1", "--team", "t", "--", "true"])
        with open(self.path("spendcap.json"), "w") as f:
            f.write('{"defaults": {"team": "x",}\n')
        result = self.run_spendcap(["runs"])
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("warning: spendcap.json: invalid policy", result.stderr)
        self.assertIn("line 1, column", result.stderr)
        self.assertIn(" t ", result.stdout)
        # A run still refuses it, naming the file and the line.
        run = self.run_spendcap(["run", "--rate", "1", "--budget", "1", "--", "true"])
        self.assertEqual(run.returncode, 125)
        self.assertIn("spendcap.json: invalid policy", run.stderr)
        self.assertIn("line 1, column", run.stderr)

    def test_every_reading_verb_warns_and_reads_past_a_broken_file(self):
        """Issue 40: not only `runs`: show, report (table and FOCUS), budgets, stop --list and
        outbox list warn once and read; main's binary refused all but `runs` (125)."""
        self.run_ok(["run", "--rate", "1", "--budget", "1", "--team", "t",
                     "--status-file", self.path("s.json"), "--", "true"])
        run_id = self.read_json("s.json")["run_id"]
        with open(self.path("spendcap.json"), "w") as f:
            f.write('{\n  // the team\n  "defaults": {"team": "x"}\n}\n')
        verbs = {"show": ["show", run_id[:8]], "report": ["report", "--by", "team"],
                 "focus": ["report", "--format", "focus"], "budgets": ["budgets"],
                 "stop --list": ["stop", "--list"], "outbox list": ["outbox", "list"]}
        for name, args in verbs.items():
            with self.subTest(verb=name):
                result = self.run_spendcap(args)
                self.assertEqual(result.returncode, 0, result.stderr)
                self.assertEqual(result.stderr.count("warning: spendcap.json: invalid policy"), 1,
                                 result.stderr)
                self.assertIn("comments are not allowed in JSON", result.stderr)
                self.assertIn("reading without ./spendcap.json", result.stderr)
        self.assertIn(run_id, self.run_ok(["show", run_id[:8]]).stdout)
        self.assertIn("t ", self.run_ok(["report", "--by", "team"]).stdout)
        # Estimate answers with the project's terms: it still refuses, as run does.
        estimate = self.run_spendcap(["estimate", "--rate", "1", "--step-time", "1s", "--steps", "10"])
        self.assertEqual(estimate.returncode, 125, estimate.stdout)
        self.assertIn("spendcap: spendcap.json: invalid policy", estimate.stderr)


if __name__ == "__main__":
    unittest.main()
