"""What users see, fourth pass (issue 30, items 1 to 5), each as an ordinary user created for the
test where users run it: the projection from the job's measured pace at 1, 10 and 100 lines a
second and when the pace changes; no blank lines through a pipe; one meaning of "used" in ps,
budgets and the metrics; `show` with the whole record and `runs` with EXIT and the budget's source;
a terminal hangup handled as Ctrl-C is. Real runs of the real binary on a real SQLite ledger."""
import csv
import io
import os
import re
import select
import signal
import subprocess
import sys
import unittest

from spendcap_testlib import (FIXTURES, SPENDCAP, LedgerTest, UserLedgerTest,
                              processes_with_marker, wait_until, why_no_ordinary_user)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_user_view_run import Terminal  # noqa: E402  (the pty helper)

PROGRESS_JOB = os.path.join(FIXTURES, "progress_job.py")
USER_VIEW = os.path.join(FIXTURES, "user_view.py")
NO_USER = why_no_ordinary_user()


@unittest.skipIf(NO_USER, NO_USER or "")
class ProjectionTest(UserLedgerTest):
    """Item 1: a tqdm-like loop, one line per step. $36/h is $0.01 a second. The job stops at
    `steps` of `total` (a run cut short, as a budget would): the projection is the spend so far
    plus the steps left at the pace the lines were read at. The old projection priced the lines
    read in one sampling interval as if they came at one moment (10 lines/s: $0.01 projected at
    step 9 of 200 where the truth was $0.20)."""

    def setUp(self):
        super().setUp()
        self.write_policy({"defaults": {"grace": "0s", "kill_after": "1s"}})

    def run_loop(self, rate, steps, total, then=None, change_after=0, budget="5", extra=()):
        args = ["run", "--rate", "36", "--budget", budget, "--interval", "1s", "--status-file",
                self.path("status.json")] + list(extra) + [
                "--", "python3", PROGRESS_JOB, "--startup", "2",
                "--lines-per-second", str(rate), "--steps", str(steps),
                "--total-steps", str(total)]
        if then:
            args += ["--then-lines-per-second", str(then), "--change-after", str(change_after)]
        return self.run_spendcap(args)

    def check_projection(self, result, seconds_left, constant_pace=True):
        """The status file's projected_total against its spend + the seconds the steps left take
        at the pace they came at; the end line says the same total."""
        status = self.read_json("status.json")
        truth = status["spend"] + 0.01 * seconds_left
        projected = status["progress"]["projected_total"]
        self.assertAlmostEqual(projected, truth, delta=0.1 * truth,
                               msg="projected $%.4f, truth $%.4f\n%s" % (projected, truth,
                                                                        result.stderr))
        printed = re.findall(r"progress: .*projected (?:total )?\$([\d.]+)", result.stderr)
        self.assertTrue(printed, result.stderr)
        self.assertAlmostEqual(float(printed[-1]), projected, delta=0.006, msg=result.stderr)
        if constant_pace:
            # At one pace the total is the same from the first projection on: every line says it
            # (before: "$0.01" at step 9 of 200 where the truth was $0.20).
            for total in printed:
                self.assertAlmostEqual(float(total), truth, delta=0.1 * truth, msg=result.stderr)
        return status

    def test_one_line_a_second(self):
        result = self.run_loop(rate=1, steps=6, total=30)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.check_projection(result, seconds_left=24)

    def test_ten_lines_a_second(self):
        result = self.run_loop(rate=10, steps=60, total=300)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.check_projection(result, seconds_left=24)

    def test_a_hundred_lines_a_second(self):
        result = self.run_loop(rate=100, steps=600, total=3000)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.check_projection(result, seconds_left=24)

    def test_the_pace_changes(self):
        # 10 lines a second for 3 s, then 2 a second for 7 s: the steps left go at the new pace
        # (the average since the first line would say 2.7 a second: $0.18 short).
        result = self.run_loop(rate=10, steps=44, total=104, then=2, change_after=30)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.check_projection(result, seconds_left=30, constant_pace=False)

    # The projection's warning and --require-fit's stop are unit-tested over the fake host
    # (tests/unit/run/test_run_steps.cpp); test_guards.py's test_require_fit_stops_it is the
    # real-process case.


class PipedOutput:
    """Item 2: `spendcap run ... 2>&1 | cat` of a quiet job and of one that leaves a half line,
    under each isolation: no blank line from spendcap, and a newline still comes first after the
    job's half line. Before: an ordinary user's runs had an empty line before every spendcap line
    (its non-dumpable guard's /proc/PID/io is root's only: the job's write count was unknown)."""

    def piped(self, job, isolation):
        command = ([SPENDCAP, "run", "--rate", "1", "--budget", "100", "--isolation", isolation,
                    "--grace", "0s", "--kill-after", "1s", "--"] + job)
        if hasattr(self, "as_user"):
            command = self.as_user(command)
        return subprocess.run(command, env=self.spendcap_env(), cwd=self.tmp,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              timeout=120)

    def test_a_quiet_job_has_no_blank_lines(self):
        for isolation in ("pid", "none"):
            result = self.piped(["sleep", "1"], isolation)
            self.assertEqual(result.returncode, 0, result.stdout)
            lines = result.stdout.split("\n")
            self.assertEqual(lines[-1], "", repr(result.stdout))
            self.assertGreaterEqual(len(lines), 3, result.stdout)
            self.assertNotIn("", lines[:-1], "%s: %r" % (isolation, result.stdout))
            self.assertTrue(all(line.startswith("spendcap: ") for line in lines[:-1]),
                            result.stdout)

    def test_a_half_line_still_gets_its_newline(self):
        for isolation in ("pid", "none"):
            result = self.piped(["python3", "-c", "import sys, time; sys.stdout.write('half'); "
                                 "sys.stdout.flush(); time.sleep(1)"], isolation)
            self.assertEqual(result.returncode, 0, result.stdout)
            self.assertIn("half\nspendcap: run ", result.stdout)
            self.assertNotIn("\n\n", result.stdout, repr(result.stdout))


class PipedOutputAsRootTest(PipedOutput, LedgerTest):
    pass


@unittest.skipIf(NO_USER, NO_USER or "")
class PipedOutputAsUserTest(PipedOutput, UserLedgerTest):
    pass


def samples(text):
    """{name: value} of a Prometheus text file's samples (one series per name here)."""
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            out[name.split("{")[0]] = float(value)
    return out


@unittest.skipIf(NO_USER, NO_USER or "")
class UsedTest(UserLedgerTest):
    """Item 3: one meaning of used, spend over the budget, in ps, budgets and the metrics; the
    ceilings held shown apart (HELD); a job stopped with SIGTSTP shown as paused. Before: ps said
    spent + held (a run's ceiling: "run 100% of $1.00" with $0.06 spent), the metrics' remaining
    stayed short by the ending run's ceiling, and a paused job was "running"."""

    def setUp(self):
        super().setUp()
        self.write_policy({"budgets": {"team": {"t3": {"amount": 10}}},
                           "defaults": {"grace": "0s", "kill_after": "1s"}})
        self.metrics = self.path("metrics")
        os.mkdir(self.metrics)
        os.chown(self.metrics, self.uid, self.gid)

    def test_ps_budgets_and_metrics_agree(self):
        first = self.run_spendcap(["run", "--team", "t3", "--rate", "36", "--budget", "2",
                                   "--metrics-dir", self.metrics, "--status-file",
                                   self.path("first.json"), "--", "sleep", "1"])
        self.assertEqual(first.returncode, 0, first.stderr)
        spent = self.read_json("first.json")["spend"]
        with open(os.path.join(self.metrics, "spendcap_team_t3.prom")) as f:
            gauges = samples(f.read())
        (team,) = [b for b in self.spendcap_json(["budgets"]) if b["scope"] == "team:t3"]
        # What is left once the run ended: $10 less its spend, as budgets says (not less $2).
        self.assertAlmostEqual(gauges["spendcap_team_budget_remaining_usd"], 10 - spent, places=4)
        self.assertAlmostEqual(gauges["spendcap_team_budget_remaining_usd"], team["available"],
                               places=4)

        process = self.start_spendcap(["run", "--team", "t3", "--rate", "36", "--budget", "3",
                                       "--sync", "1s", "--", "sleep", "120"],
                                      stdin=subprocess.DEVNULL)
        self.addCleanup(lambda: process.poll() is None and (process.kill(), process.wait()))
        wait_until(lambda: self.runs("status = 'running'"), 60, what="the run's ledger row")
        wait_until(lambda: self.runs("status = 'running'")[0]["spend_micros"] > 0, 30,
                   what="a heartbeat with spend")
        table = self.run_spendcap(["ps"]).stdout
        header, row = table.splitlines()[:2]
        self.assertIn("HELD", header.split())
        self.assertNotIn("CEILING", header.split())
        budgets = self.run_spendcap(["budgets"]).stdout
        (team,) = [b for b in self.spendcap_json(["budgets"]) if b["scope"] == "team:t3"]
        # The run's own $3 binds it before the team's $10 does (issue 38): ps shows that.
        share = re.search(r"run (\d+)% of \$3\.00", row)
        self.assertIsNotNone(share, table)
        used_percent = re.search(r"team:t3 .*? ([\d.]+)%", budgets)
        self.assertAlmostEqual(100 * team["used"] / 10, float(used_percent.group(1)), delta=1.0)
        (run,) = self.spendcap_json(["ps"])
        self.assertAlmostEqual(int(share.group(1)), 100 * run["spend"] / 3, delta=1.0)
        self.assertEqual(run["held"], 3.0, run)
        self.assertIn("$3.00", row.split())
        self.assertLess(run["spend"], run["held"])
        self.assertEqual(run["status"], "running")
        self.assertFalse(run["paused"])

        os.kill(process.pid, signal.SIGTSTP)  # spendcap has no terminal: it stops the job
        wait_until(lambda: self.spendcap_json(["ps"])[0]["paused"], 10, what="ps to say paused")
        self.assertRegex(self.run_spendcap(["ps"]).stdout.splitlines()[1], r"\bpaused\b")
        os.kill(process.pid, signal.SIGCONT)
        wait_until(lambda: not self.spendcap_json(["ps"])[0]["paused"], 10,
                   what="ps to say running again")
        process.terminate()
        process.communicate(timeout=60)


class HangingTerminal(Terminal):
    """A Terminal whose reader never sits in read(2): a close of the master while a read is in
    progress would not release it, and the terminal would never hang up."""

    def _read(self):
        self.closing = getattr(self, "closing", False)
        while not self.closing:
            ready, _, _ = select.select([self.fd], [], [], 0.05)
            if not ready:
                continue
            try:
                data = os.read(self.fd, 4096)
            except OSError:
                return
            if not data:
                return
            with self.lock:
                self.output += data

    def hang_up(self):
        self.closing = True
        self.reader.join(5)
        os.close(self.fd)  # the master's last reference: the kernel hangs the terminal up
        self.fd = os.open("/dev/null", os.O_RDONLY)  # for close() at the cleanup


@unittest.skipIf(NO_USER, NO_USER or "")
class HangupTest(UserLedgerTest):
    """Item 5: the terminal hangs up (the pty's master closed, as tmux kill-session or a dropped
    ssh session do) on a running job: stopped as Ctrl-C stops it, recorded `killed (hangup)`,
    never a failure (which the crash-loop guard counts). Before: `failed (exited)`, exit 129."""

    def terminal(self, argv):
        env = self.spendcap_env({"PS1": "PROMPT$ ", "TERM": "dumb"})
        terminal = HangingTerminal(self.as_user(argv), env, self.tmp)
        self.addCleanup(lambda: terminal.pid and terminal.close())
        return terminal

    def status(self):
        return wait_until(lambda: os.path.exists(self.path("status.json"))
                          and os.path.getsize(self.path("status.json"))
                          and self.read_json("status.json"), 30, what="the status file")

    def check_recorded(self):
        status = self.status()
        self.assertEqual((status["status"], status["reason"]), ("killed", "hangup"), status)
        self.assertEqual(status["exit_code"], 128 + signal.SIGHUP)
        rows = wait_until(lambda: [r for r in self.runs() if r["status"] != "running"], 30,
                          what="the final row")
        self.assertEqual((rows[0]["status"], rows[0]["reason"]), ("killed", "hangup"))
        return status

    def test_spendcap_on_the_terminal_checkpoints_then_ends_as_hangup(self):
        # spendcap leads the terminal's session (as `tmux new-session 'spendcap run ...'`): it
        # gets the SIGHUP, sends the checkpoint signal and waits the grace.
        terminal = self.terminal([SPENDCAP, "run", "--rate", "36", "--budget", "1", "--grace",
                                  "20s", "--status-file", self.path("status.json"), "--",
                                  "python3", USER_VIEW, "checkpoint", self.path("ready"),
                                  self.path("log")])
        terminal.wait_for(r"spendcap: run [0-9a-f]{8} started", 30)
        self.wait_for_file("ready")
        terminal.hang_up()
        _, wait_status = os.waitpid(terminal.pid, 0)
        terminal.pid = 0
        status = self.check_recorded()
        self.assertTrue(status["checkpoint_signalled"], status)
        self.assertTrue(os.path.exists(self.path("ready")))
        self.assertFalse(os.path.exists(self.path("log")), "the job got SIGTERM: no grace")
        # As after Ctrl-C: spendcap ends by the signal the user's side sent.
        self.assertTrue(os.WIFSIGNALED(wait_status), wait_status)
        self.assertEqual(os.WTERMSIG(wait_status), signal.SIGHUP)

    def test_an_interactive_shell_hung_up_ends_the_run_as_hangup(self):
        # bash -i on the terminal (a tmux pane): bash passes the SIGHUP on to spendcap and exits,
        # and the kernel's SIGHUP reaches the job's process group, the terminal's foreground.
        shell = self.terminal(["bash", "--norc", "--noprofile", "-i"])
        shell.wait_for(r"PROMPT\$ ", 30)
        shell.send(("%s run --rate 36 --budget 1 --status-file %s -- python3 %s sleep %s\n"
                    % (SPENDCAP, self.path("status.json"), USER_VIEW,
                       self.path("ready"))).encode())
        shell.wait_for(r"spendcap: run [0-9a-f]{8} started", 30)
        self.wait_for_file("ready")
        shell.hang_up()
        status = self.check_recorded()
        wait_until(lambda: not processes_with_marker(self.marker), 15, what="nothing left")
        # `show` says what happened (issue 40). The kernel's SIGHUP and spendcap's stop race for
        # the job: where the SIGHUP killed it (command's exit 129, most tries), `show` says so;
        # main's binary said "SIGUSR1 caught by no process" there, as if the job had lacked a
        # handler. Where spendcap's SIGTERM came first (143) the job indeed caught no SIGUSR1.
        shown = self.run_spendcap(["show", status["run_id"]])
        self.assertEqual(shown.returncode, 0, shown.stderr)
        checkpoint = " ".join(shown.stdout.split("checkpoint:")[1].split("\n  ")[0].split())
        if status["command_signal"] == "SIGHUP":
            self.assertRegex(shown.stdout, r"command's exit: +129\b")
            self.assertIn("the job died of SIGHUP (command's exit 129), not by spendcap's stop "
                          "(SIGUSR1 after", checkpoint)
            self.assertNotIn("caught by no process", shown.stdout)
        else:
            self.assertEqual(status["command_signal"], "SIGTERM", status)
            self.assertIn("SIGUSR1 caught by no process", checkpoint)


ISO = r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$"


@unittest.skipIf(NO_USER, NO_USER or "")
class WholeRecordTest(UserLedgerTest):
    """Item 4: `show ID [--json]` gives the run's record (as the ledger keeps it: user,
    team, experiment, project, tags, host, times, exit code, reason, spend, budget and its source,
    pricing, GPU); `runs` an EXIT column and where the
    budget came from (a policy's max_run is not "-": "$0.50 (max_run of team:t4)"); its csv and
    json of the same types. Before:
    `show` printed three lines, `runs` had no exit code and "-" as a max_run budget, and csv said
    duration 0 where json said 0.342, a date string where json said epoch seconds."""

    def setUp(self):
        super().setUp()
        self.write_policy({"budgets": {"team": {"t4": {"amount": 10, "max_run": 0.5}}},
                           "defaults": {"grace": "0s", "kill_after": "1s"},
                           "guards": {"crash_loop": {"enabled": False}}})

    def test_show_and_runs(self):
        command = ["python3", PROGRESS_JOB, "--lines-per-second", "10", "--steps", "10",
                   "--total-steps", "100"]
        first = self.run_spendcap(["run", "--team", "t4", "--experiment", "e4", "--project", "p4",
                                   "--tag", "lr=3e-4", "--rate", "36", "--status-file",
                                   self.path("first.json"), "--"] + command)
        self.assertEqual(first.returncode, 0, first.stderr)
        failed = self.run_spendcap(["run", "--team", "t4", "--rate", "36", "--budget", "0.3",
                                    "--", "python3", "-c", "import sys; sys.exit(3)"])
        self.assertEqual(failed.returncode, 3, failed.stderr)
        first_id = self.read_json("first.json")["run_id"]
        ids = [r["id"] for r in self.runs()]
        self.assertEqual(ids[0], first_id)

        shown = self.spendcap_json(["show", first_id[:8]])
        status = self.read_json("first.json")
        import socket
        expected = {"id": first_id, "status": "succeeded", "reason": "exited", "user": self.user,
                    "uid": self.uid, "team": "t4", "experiment": "e4", "project": "p4",
                    "tags": {"lr": "3e-4"}, "host": socket.gethostname(), "exit_code": 0,
                    "budget": 0.5, "budget_source": "max_run of team:t4", "currency": "USD",
                    "rate_per_hour": 36}
        for key, value in expected.items():
            self.assertEqual(shown[key], value, key)
        self.assertAlmostEqual(shown["spend"], status["spend"], places=6)
        self.assertRegex(shown["started_at"], ISO)
        self.assertRegex(shown["finished_at"], ISO)
        self.assertGreater(shown["duration_seconds"], 0.5)
        self.assertIn("pricing", shown)
        self.assertIn("gpu", shown)
        text = self.run_spendcap(["show", first_id[:8]]).stdout
        for line in (r"run %s: succeeded \(exited\)" % first_id, r"user: +%s" % self.user,
                     r"team: +t4", r"experiment: +e4", r"project: +p4", r"tags: +lr=3e-4",
                     r"exit code: +0", r"budget: +\$0\.50(00)? \(from max_run of team:t4\)",
                     r"started: +\d{4}-", r"duration: +\d"):
            self.assertRegex(text, line, text)
        failed_run = self.spendcap_json(["show", ids[1]])
        self.assertEqual((failed_run["exit_code"], failed_run["budget_source"]),
                         (3, "flag --budget"))

        table = self.run_spendcap(["runs"]).stdout.splitlines()
        header = re.split(r"\s{2,}", table[0])
        self.assertIn("EXIT", header)
        row = [line for line in table if line.startswith(first_id[:8])][0]
        self.assertRegex(row, r"\$0\.50(00)? \(max_run of team:t4\)")
        self.assertRegex([line for line in table if line.startswith(ids[1][:8])][0],
                         r"\bfailed\s+exited\s+3\b")
        listed = {r["id"]: r for r in self.spendcap_json(["runs"])}
        rows = {r["id"]: r for r in csv.DictReader(io.StringIO(
            self.run_spendcap(["runs", "--format", "csv"]).stdout))}
        for run_id in ids:
            j, c = listed[run_id], rows[run_id]
            self.assertRegex(j["started_at"], ISO)
            self.assertEqual(j["started_at"], c["started_at"])
            self.assertEqual(j["finished_at"], c["finished_at"])
            self.assertIsInstance(j["duration_seconds"], (int, float))
            self.assertAlmostEqual(j["duration_seconds"], float(c["duration_seconds"]), places=3)
            self.assertEqual(str(j["exit_code"]), c["exit_code"])
            self.assertEqual(j["budget_source"], c["budget_source"])
        self.assertEqual(listed[first_id]["budget"], 0.5)


if __name__ == "__main__":
    unittest.main()
