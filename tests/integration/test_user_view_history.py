"""What a user sees, third pass (issue 24): typos named with the likely flag or command, a stray
word before `--` refused, the run history (`spendcap runs`) and short ids everywhere, `ps` with the
user and the budget share, money without exponents, spendcap's lines through a pipe without blank
lines, the crash-loop refusal saying until when and how to start again, the projection from the
training pace, the smaller items; and a new user's session through a real terminal, a pipe and a
file. Real runs of the real binary on a real SQLite ledger."""
import csv
import io
import json
import os
import re
import subprocess
import sys
import unittest

from spendcap_testlib import FIXTURES, SPENDCAP, LedgerTest, wait_until

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_user_view_run import Terminal  # noqa: E402  (the pty helper)

PROGRESS_JOB = os.path.join(FIXTURES, "progress_job.py")
TRAIN_LIKE = os.path.join(FIXTURES, "train_like.py")
ECHO_ARGS = ["python3", "-c", "import json, sys; print(json.dumps(sys.argv[1:]))"]
SLEEP = ["--", "python3", "-c", "import time; time.sleep(120)"]
# 4.617e-05, $2.2e-05, 1e+21; not the hex of a run id ("9e6", "1e-45" inside a UUID).
EXPONENT = re.compile(r"(?<![0-9a-f])\d(\.\d+)?e[-+]\d\d")


def stop_process(process):
    if process.poll() is None:
        process.kill()
    process.communicate()


def blank_line_before_spendcap(text):
    return re.search(r"(^|\n)\n+spendcap:", text) is not None


class TyposTest(LedgerTest):
    """Item 1: a misspelt flag or subcommand names the likely one; a stray word before `--` is
    refused before anything runs; the job's own arguments reach it untouched."""

    def test_a_misspelt_flag_names_the_likely_one_in_every_subcommand(self):
        for args, suggestion in [
                (["run", "--buget", "5", "--", "true"], "did you mean --budget?"),
                (["run", "--teem", "vision", "--rate", "1", "--", "true"], "did you mean --team?"),
                (["stop", "--experimnt", "x"], "did you mean --experiment?"),
                (["report", "--sinse", "30d"], "did you mean --since?"),
                (["runs", "--limt", "3"], "did you mean --limit?"),
                (["budgets", "--jsn"], "did you mean --json?")]:
            result = self.run_spendcap(args)
            self.assertEqual(result.returncode, 125, args)
            self.assertIn(suggestion, result.stderr, args)
            self.assertIn("no such flag", result.stderr)
            self.assertNotIn("not expected", result.stderr)  # CLI11's bare message is gone

    def test_a_misspelt_subcommand_names_the_likely_one(self):
        result = self.run_spendcap(["rnu", "--rate", "1", "--", "true"])
        self.assertEqual(result.returncode, 125)
        self.assertIn("did you mean `spendcap run`?", result.stderr)
        self.assertNotIn("A subcommand is required", result.stderr)
        result = self.run_spendcap(["policy", "chek", "p.json"])
        self.assertIn("did you mean `spendcap policy check`?", result.stderr)

    def test_a_stray_word_before_dash_dash_is_refused_and_nothing_runs(self):
        touched = self.path("ran")
        result = self.run_spendcap(["run", "--rate", "1", "--budget", "1", "--status-file",
                                    self.path("status.json"), "--grace", "5", "min",
                                    "--", "touch", touched])
        self.assertEqual(result.returncode, 125, result.stderr)
        self.assertIn("run min:", result.stderr)
        self.assertIn("the command goes after --", result.stderr)
        self.assertFalse(os.path.exists(touched), "the command ran")
        self.assertIn("run min:", self.read_json("status.json")["message"])
        self.assertEqual(self.runs(), [])  # nothing admitted either
        # Negative control: without the stray word the same line runs the command.
        result = self.run_spendcap(["run", "--rate", "1", "--budget", "1", "--grace", "5",
                                    "--", "touch", touched])
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertTrue(os.path.exists(touched))

    def test_the_jobs_own_arguments_reach_it_untouched(self):
        result = self.run_spendcap(["run", "--rate", "1", "--budget", "1", "--"] + ECHO_ARGS
                                   + ["--buget", "5", "--", "min", "-q"])
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(json.loads(result.stdout), ["--buget", "5", "--", "min", "-q"])


class MoneyColumnsTest(LedgerTest):
    """Issue 40 item 7: money in text has one rule (cents from a cent up, 4 decimals below a cent,
    6 below a hundredth of a cent) and one precision per table column: a run under a cent beside
    a run of half a dollar prints both with the decimals the smaller needs, never "$0.50" beside
    "$0.0042" or "$0.000042"."""

    MONEY = re.compile(r"\$(\d[\d,]*)\.(\d+)")

    def run_job(self, experiment, rate, seconds):
        result = self.run_spendcap(["run", "--team", "demo", "--experiment", experiment,
                                    "--rate", rate, "--budget", "5", "--grace", "0s",
                                    "--kill-after", "0s", "--", "sleep", seconds])
        self.assertEqual(result.returncode, 0, result.stderr)
        return result

    def first_amounts(self, args):
        """The first amount of money of each line below the header (SPEND in `runs`, spend in
        `report`): (whole part, decimals) pairs."""
        result = self.run_spendcap(args)
        self.assertEqual(result.returncode, 0, result.stderr)
        lines = [line for line in result.stdout.splitlines()[1:] if self.MONEY.search(line)]
        return [self.MONEY.search(line).groups() for line in lines], result.stdout

    def test_a_money_column_has_one_precision(self):
        # $1/s for half a second: half a dollar, in cents while it is alone.
        self.run_job("big", "3600", "0.5")
        (spend,), text = self.first_amounts(["runs"])
        self.assertEqual(len(spend[1]), 2, text)
        # 3.6/h is a cent in 10 s: this run spends less than a cent, shown with its digits.
        tiny = self.run_job("tiny", "3.6", "0.05")
        end = re.search(r"succeeded after \S+: spent \$0\.(\d+) of \$5\.00;", tiny.stderr)
        self.assertIsNotNone(end, tiny.stderr)
        self.assertIn(len(end.group(1)), (4, 6), tiny.stderr)
        self.assertNotEqual(set(end.group(1)), {"0"}, tiny.stderr)  # not "$0.0000"
        spends, text = self.first_amounts(["runs"])
        self.assertEqual(len(spends), 2, text)
        self.assertEqual(len({len(decimals) for _, decimals in spends}), 1, text)
        self.assertGreaterEqual(len(spends[0][1]), 4, text)
        self.assertNotEqual(set(spends[0][1]), {"0"}, text)  # the tiny run, newest first
        # BUDGET is a column of its own: $5.00 for both.
        self.assertEqual(text.count("$5.00"), 2, text)
        # The report's spend column, the total's cell included, is alike.
        spends, text = self.first_amounts(["report", "--by", "experiment"])
        self.assertEqual(len(spends), 3, text)
        self.assertEqual(len({len(decimals) for _, decimals in spends}), 1, text)
        self.assertGreaterEqual(len(spends[0][1]), 4, text)


class RunsTest(LedgerTest):
    """Item 2: `spendcap runs`, finished and running runs newest first with short ids that
    `show` and `accept` take; its filters, --json and --format csv."""

    def setUp(self):
        super().setUp()
        self.write_policy({"budgets": {"team": {"demo": {"amount": 10}, "other": {"amount": 10}}},
                           "guards": {"crash_loop": {"enabled": False}}})

    def run_one(self, team, command, budget="1"):
        result = self.run_spendcap(["run", "--team", team, "--experiment", "e1", "--rate", "36",
                                    "--budget", budget, "--grace", "0s", "--kill-after", "1s",
                                    "--"] + command)
        return result

    def test_history_newest_first_with_filters_and_short_ids(self):
        self.assertEqual(self.run_one("demo", ["true"]).returncode, 0)
        self.assertEqual(self.run_one("other", ["false"]).returncode, 1)
        tripped = self.run_one("demo", ["sleep", "30"], budget="0.05")
        self.assertEqual(tripped.returncode, 124, tripped.stderr)
        rows = self.runs()
        self.assertEqual(len(rows), 3)
        result = self.run_spendcap(["runs"])
        self.assertEqual(result.returncode, 0, result.stderr)
        lines = result.stdout.splitlines()
        header = lines[0].split()
        self.assertEqual(header[:6], ["RUN", "USER", "TEAM", "EXPERIMENT", "STATUS", "REASON"])
        self.assertIn("BUDGET", header)
        # Newest first: the trip, the failure, the success.
        self.assertTrue(lines[1].startswith(rows[2]["id"][:8]), result.stdout)
        self.assertIn("killed", lines[1])
        self.assertIn("budget:run", lines[1])
        self.assertRegex(lines[1], r"\$0\.05(?!\d)")  # BUDGET: cents, as the others' $1.00
        self.assertIn("failed", lines[2])
        self.assertIn("succeeded", lines[3])
        self.assertIsNone(EXPONENT.search(result.stdout))
        # Filters.
        only = self.run_spendcap(["runs", "--team", "other"]).stdout.splitlines()
        self.assertEqual(len(only), 2, only)
        self.assertIn("failed", only[1])
        killed = self.run_spendcap(["runs", "--status", "killed"]).stdout.splitlines()
        self.assertEqual(len(killed), 2, killed)
        limited = self.run_spendcap(["runs", "--limit", "1"]).stdout
        self.assertIn("the newest 1 shown", limited)
        none = self.run_spendcap(["runs", "--team", "nobody"])
        self.assertIn("no runs in", none.stdout)  # negative control: the filter filters
        bad = self.run_spendcap(["runs", "--status", "exploded"])
        self.assertEqual(bad.returncode, 125)
        self.assertIn("not a run status", bad.stderr)
        # JSON and csv.
        listed = self.spendcap_json(["runs"])
        self.assertEqual([r["id"] for r in listed], [r["id"] for r in reversed(rows)])
        self.assertEqual(listed[0]["status"], "killed")
        self.assertEqual(listed[0]["budget"], 0.05)
        self.assertEqual(listed[0]["short_id"], rows[2]["id"][:8])
        table = list(csv.DictReader(io.StringIO(
            self.run_spendcap(["runs", "--format", "csv"]).stdout)))
        self.assertEqual(len(table), 3)
        self.assertEqual(table[0]["id"], rows[2]["id"])
        self.assertEqual(table[0]["budget"], "0.05")
        # `show` and `accept` take the short id.
        short = listed[2]["short_id"]
        show = self.run_spendcap(["show", short])
        self.assertEqual(show.returncode, 0, show.stderr)
        self.assertIn("run " + rows[0]["id"] + ": succeeded", show.stdout)
        accept = self.run_spendcap(["accept", short, "--note", "keep"])
        self.assertEqual(accept.returncode, 0, accept.stderr)
        self.assertIn(rows[0]["id"], accept.stdout)
        unknown = "0" * 8 if not any(r["id"].startswith("0" * 8) for r in rows) else "f" * 8
        missing = self.run_spendcap(["show", unknown])
        self.assertEqual(missing.returncode, 125)
        self.assertIn("spendcap runs", missing.stderr)

    def test_a_running_run_is_listed_and_a_team_filter_hides_it(self):
        process = self.start_spendcap(["run", "--team", "demo", "--rate", "1", "--budget", "5",
                                       "--sync", "1s"] + SLEEP)
        self.addCleanup(stop_process, process)
        wait_until(lambda: self.runs("status = 'running'") or process.poll() is not None, 60,
                   what="the run's ledger row")
        result = self.run_spendcap(["runs", "--status", "running"])
        self.assertEqual(len(result.stdout.splitlines()), 2, result.stdout)
        self.assertIn("running", result.stdout)
        self.assertIn("no runs", self.run_spendcap(["runs", "--team", "other"]).stdout)


class PsTest(LedgerTest):
    """Item 3: `ps` shows whose run it is and how much of the binding budget is used."""

    def test_ps_has_user_and_budget_share(self):
        # A run budget above the team's: the team's binds (a lower one binds itself:
        # test_ps_binding).
        self.write_policy({"budgets": {"team": {"demo": {"amount": 20}}}})
        process = self.start_spendcap(["run", "--team", "demo", "--rate", "36", "--budget", "50",
                                       "--sync", "1s"] + SLEEP)
        self.addCleanup(stop_process, process)
        wait_until(lambda: self.runs("status = 'running'") or process.poll() is not None, 60,
                   what="the run's ledger row")
        result = self.run_spendcap(["ps"])
        self.assertEqual(result.returncode, 0, result.stderr)
        header, row = result.stdout.splitlines()[:2]
        self.assertIn("USER", header)
        self.assertIn("BUDGET USED", header)
        import pwd
        self.assertIn(pwd.getpwuid(os.getuid()).pw_name, row.split())
        share = re.search(r"team:demo (\d+)% of \$20\.00", row)
        self.assertIsNotNone(share, row)
        # What the team used as `budgets` says it (spend, never the ceilings held; issue 30).
        team = self.spendcap_json(["budgets"])[0]
        expected = 100 * team["used"] / 20
        self.assertAlmostEqual(int(share.group(1)), expected, delta=1.0)


class MoneyAndProjectionTest(LedgerTest):
    """Items 4 and 7: per-step costs in fixed-point (never an exponent), and a projection that
    does not count the job's start-up as training."""

    def setUp(self):
        super().setUp()
        self.write_policy({"defaults": {"grace": "0s", "kill_after": "1s"}})

    def test_tiny_unit_costs_are_fixed_point(self):
        # $0.036/h and 100 steps a second: $0.0000001 a step, 32 units a step.
        result = self.run_spendcap(["run", "--rate", "0.036", "--budget", "1", "--interval",
                                    "200ms", "--status-file", self.path("status.json"), "--",
                                    sys.executable, PROGRESS_JOB, "--steps-per-second", "100",
                                    "--seconds", "2"])
        self.assertEqual(result.returncode, 0, result.stderr)
        # The status file too: its numbers are plain decimals, the same values.
        with open(self.path("status.json")) as f:
            text = f.read()
        numbers_only = re.sub(r'"(\\.|[^"\\])*"', '""', text)  # strings (ids) left out
        self.assertNotRegex(numbers_only, r"\d[eE][-+]?\d", text)
        self.assertGreater(json.loads(text)["progress"]["cost_per_step"], 0)
        self.assertIn("/step", result.stderr)
        self.assertIsNone(EXPONENT.search(result.stderr), result.stderr)
        per_step = re.findall(r"\$(0\.\d+)/step", result.stderr)
        self.assertTrue(per_step, result.stderr)
        self.assertGreater(float(per_step[-1]), 0)  # not "$0.0000": the digits are there

    def test_start_up_is_not_counted_as_training(self):
        # 36/h, 10 steps a second, 1000 steps: $1.00 of training, after 3 s ($0.03) of imports.
        # The old projection (spend / step x total) said $0.031 / 1 x 1000 = $31 at the first
        # line, over the $5 budget; the pace between lines says about $1.03.
        result = self.run_spendcap(["run", "--rate", "36", "--budget", "5", "--interval",
                                    "200ms", "--status-file", self.path("status.json"), "--",
                                    sys.executable, PROGRESS_JOB, "--startup", "3",
                                    "--seconds", "3"])
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertNotIn("will not fit", result.stderr)
        total = self.read_json("status.json")["progress"]["projected_total"]
        self.assertGreater(total, 0.8)
        self.assertLess(total, 2.0)

    def test_a_run_that_will_not_fit_is_still_warned_about(self):
        # Negative control: the same job under $0.50 is warned about (about $1.03 projected).
        result = self.run_spendcap(["run", "--rate", "36", "--budget", "0.5", "--interval",
                                    "200ms", "--", sys.executable, PROGRESS_JOB, "--startup", "1",
                                    "--seconds", "3"])
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("will not fit its budget", result.stderr)


class PipeTest(LedgerTest):
    """Item 5: through a pipe, no blank line before a spendcap line that spendcap knows starts a
    line; a newline still comes first after the job's half line."""

    def through_pipe(self, command):
        process = subprocess.run([SPENDCAP, "run", "--rate", "36", "--budget", "1", "--grace",
                                  "0s", "--kill-after", "1s", "--"] + command,
                                 env=self.spendcap_env(), cwd=self.tmp, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True, timeout=120)
        return process

    def test_a_silent_job_gets_no_blank_lines(self):
        result = self.through_pipe(["true"])
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertTrue(result.stderr.startswith("spendcap: run "), repr(result.stderr[:80]))
        self.assertFalse(blank_line_before_spendcap(result.stderr), repr(result.stderr))

    def test_a_half_line_still_gets_its_newline(self):
        result = self.through_pipe(["python3", "-c",
                                    "import sys; sys.stderr.write('half'); sys.stderr.flush()"])
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("half\nspendcap: run ", result.stderr)
        for line in result.stderr.splitlines():
            self.assertTrue(line.startswith("spendcap:") or line in ("half", ""), line)


class CrashLoopTest(LedgerTest):
    """Item 6: the refusal says until when and how to start again; --clear-crash-loop starts the
    fixed command, recorded in the ledger; a success resets the count."""

    def setUp(self):
        super().setUp()
        self.write_policy({"guards": {"crash_loop": {"max_failures": 2, "window": "10m"}}})

    def attempt(self, *extra):
        return self.run_spendcap(["run", "--rate", "1", "--budget", "1"] + list(extra)
                                 + ["--", "sh", "-c", 'test -e fixed || exit 3'])

    def test_refusal_until_when_and_clearing(self):
        self.assertEqual(self.attempt().returncode, 3)
        self.assertEqual(self.attempt().returncode, 3)
        refused = self.attempt()
        self.assertEqual(refused.returncode, 120, refused.stderr)
        self.assertRegex(refused.stderr, r"refused until \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC")
        self.assertIn("--clear-crash-loop", refused.stderr)
        # The fix, then the explicit start.
        open(self.path("fixed"), "w").close()
        cleared = self.attempt("--clear-crash-loop")
        self.assertEqual(cleared.returncode, 0, cleared.stderr)
        self.assertIn("crash-loop guard cleared by", cleared.stderr)
        tags = [json.loads(row["tags"]) for row in self.runs("status = 'succeeded'")]
        self.assertEqual(len(tags), 1)
        self.assertIn("crash_loop_cleared", tags[0])
        # The success reset the count: a new failure is not refused.
        os.unlink(self.path("fixed"))
        self.assertEqual(self.attempt().returncode, 3)
        self.assertEqual(self.attempt().returncode, 3)
        self.assertEqual(self.attempt().returncode, 120)  # negative control: it still counts


class SmallerItemsTest(LedgerTest):
    """Item 8: estimate's flags, 50k steps, a bad --gpu named as the flag, --title with --quiet,
    a spent stop order, budgets --policy saying what it wrote."""

    def test_estimate_budget_flag_and_steps_suffixes(self):
        result = self.run_spendcap(["estimate", "--budget", "20"])
        self.assertEqual(result.returncode, 125)
        self.assertIn("estimate --budget: no such flag", result.stderr)
        self.assertNotIn("20 --budget", result.stderr)
        result = self.run_spendcap(["estimate", "--step-time", "1s", "--steps", "50k", "--rate",
                                    "36", "--json"])
        self.assertEqual(result.returncode, 0, result.stderr)
        # 50000 steps of 1 s at $36/h.
        self.assertAlmostEqual(json.loads(result.stdout)["cost"], 500.0)
        result = self.run_spendcap(["estimate", "--step-time", "1s", "--steps", "5x", "--rate",
                                    "36"])
        self.assertEqual(result.returncode, 125)  # negative control: a bad count is refused

    def test_a_bad_gpu_names_the_flag_and_the_known_types(self):
        policy = self.write_policy({"rates": {"gpu": {"a100-80gb": {"on_demand": 4.1}}}},
                                   "p-ok.json")
        result = self.run_spendcap(["run", "--policy", policy, "--gpu", "a100", "--budget", "1",
                                    "--", "true"])
        self.assertEqual(result.returncode, 125)
        self.assertIn("--gpu a100:", result.stderr)
        self.assertIn("a100-80gb", result.stderr)
        self.assertNotIn("invalid policy", result.stderr)
        check = self.run_spendcap(["policy", "check", policy])
        self.assertEqual(check.returncode, 0, check.stderr)

    def test_title_with_quiet_is_refused(self):
        result = self.run_spendcap(["run", "--rate", "1", "--budget", "1", "--title", "--quiet",
                                    "--", "true"])
        self.assertEqual(result.returncode, 125)
        self.assertIn("--title", result.stderr)
        self.assertIn("--quiet", result.stderr)

    def test_a_stop_order_on_a_finished_run_is_not_listed(self):
        process = self.start_spendcap(["run", "--rate", "1", "--budget", "5", "--sync", "1s"]
                                      + SLEEP)
        self.addCleanup(stop_process, process)
        wait_until(lambda: self.runs("status = 'running'") or process.poll() is not None, 60,
                   what="the run's ledger row")
        run_id = self.runs()[0]["id"]
        self.assertEqual(self.run_spendcap(["stop", "--run", run_id[:8]]).returncode, 0)
        self.assertEqual(self.run_spendcap(["stop", "--team", "t1"]).returncode, 0)
        process.communicate(timeout=60)
        self.assertEqual(process.returncode, 123)
        listed = self.run_spendcap(["stop", "--list"]).stdout
        self.assertNotIn("run:" + run_id[:8], listed)
        self.assertIn("team:t1", listed)  # negative control: a scope's order stays

    def test_budgets_policy_says_it_applied_the_budgets(self):
        policy = self.write_policy({"budgets": {"team": {"t9": {"amount": 7}}}}, "other.json")
        result = self.run_spendcap(["budgets", "--policy", policy])
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("applied the policy's 1 budget to your own ledger", result.stderr)
        again = self.run_spendcap(["budgets", "--policy", policy])
        self.assertNotIn("applied", again.stderr)  # nothing new to say the second time


class NewUserTest(LedgerTest):
    """Item 9: the README quick start, a typo, a trip, `runs`, `show` by short id and `ps`,
    through a real terminal, a pipe and a file, checked as a person reads them."""

    QUICK = ["run", "--team", "demo", "--experiment", "quickstart", "--rate", "36", "--budget",
             "0.10", "--grace", "1s", "--kill-after", "1s", "--", "python3", TRAIN_LIKE,
             "--step-seconds", "0.2"]

    def test_terminal(self):
        terminal = Terminal([SPENDCAP] + self.QUICK, self.spendcap_env({"TERM": "dumb"}),
                            self.tmp)
        self.addCleanup(terminal.close)
        terminal.wait_for(r"spendcap: run [0-9a-f]{8} started", 60)
        terminal.wait_for(r"spendcap: run [0-9a-f]{8} killed \(budget:run\)", 60)
        _, status = os.waitpid(terminal.pid, 0)
        terminal.pid = 0
        self.assertEqual(os.WEXITSTATUS(status), 124)
        self.assertIsNone(EXPONENT.search(terminal.text()))
        typo = Terminal([SPENDCAP, "run", "--buget", "5", "--", "true"], self.spendcap_env(),
                        self.tmp)
        self.addCleanup(typo.close)
        typo.wait_for(r"did you mean --budget\?", 30)
        runs = Terminal([SPENDCAP, "runs"], self.spendcap_env(), self.tmp)
        self.addCleanup(runs.close)
        runs.wait_for(r"killed\s+budget:run", 30)

    def test_pipe_and_file(self):
        # Through a pipe (stdout and stderr), as `spendcap run ... 2>&1 | tee` would.
        piped = subprocess.run([SPENDCAP] + self.QUICK, env=self.spendcap_env(), cwd=self.tmp,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               timeout=120)
        self.assertEqual(piped.returncode, 124, piped.stdout)
        self.assertIsNone(EXPONENT.search(piped.stdout))
        self.assertTrue(piped.stdout.startswith("spendcap: run "), piped.stdout[:200])
        # Into a file, as Slurm's .out: no blank line before a spendcap line.
        with open(self.path("train.log"), "w") as log:
            filed = subprocess.run([SPENDCAP] + self.QUICK, env=self.spendcap_env(), cwd=self.tmp,
                                   stdout=log, stderr=log, timeout=120)
        self.assertEqual(filed.returncode, 124)
        with open(self.path("train.log")) as f:
            text = f.read()
        self.assertFalse(blank_line_before_spendcap(text), text)
        self.assertNotIn("\n\n", text)
        self.assertIsNone(EXPONENT.search(text))
        # The history: both trips, newest first; `show` by the short id it prints; `ps` empty.
        runs = self.run_spendcap(["runs"])
        lines = runs.stdout.splitlines()
        self.assertEqual(len(lines), 3, runs.stdout)
        self.assertRegex(lines[1], r"^[0-9a-f]{8,}\s+\S+\s+demo\s+quickstart\s+killed\s+budget:run")
        short = lines[1].split()[0]
        show = self.run_spendcap(["show", short])
        self.assertEqual(show.returncode, 0, show.stderr)
        self.assertIn(": killed (budget:run)", show.stdout)
        self.assertIn("no running or lost runs", self.run_spendcap(["ps"]).stdout)


if __name__ == "__main__":
    unittest.main()
