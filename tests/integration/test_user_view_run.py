"""What the user sees while a job runs (issue 15, tests 1 to 4, the run side): spendcap's lines start
a line in files and pipes; Ctrl-Z on a terminal stops the job and spendcap (the shell's prompt comes
back), `fg` resumes both, and the trip comes on time while paused; Ctrl-C ends as "interrupted"; a
job that writes its checkpoint may exit by itself; the start line names the limit that binds, the
percentages are the figures' own, and no warning follows a trip; SIGUSR1, SIGUSR2 and --forward
signals reach the job's catchers."""
import json
import os
import pty
import re
import signal
import subprocess
import threading
import time
import unittest

from spendcap_testlib import (FIXTURES, SPENDCAP, LedgerTest, SpendcapTest, alive, children_of,
                              proc_state, wait_until)

FIXTURE = os.path.join(FIXTURES, "user_view.py")

# $1/s. With --grace 1s --kill-after 1s the reserve is 3 s of spend ($3); --budget 8 trips at 5 s,
# after the 50% warning at 4 s.
FAST_TRIP = ["--rate", "3600", "--budget", "8", "--grace", "1s", "--kill-after", "1s"]


def spendcap_lines_start_lines(text):
    """Whether every "spendcap:" begins a line, and how many had to be moved to one (the job's
    output before it did not end with a newline)."""
    moved = 0
    for match in re.finditer("spendcap:", text):
        at = match.start()
        if at > 0 and text[at - 1] != "\n":
            return False, moved
        if at > 1 and text[at - 2] not in "\n":
            moved += 1
    return True, moved


def half_unit(figure):
    """Half the last printed digit of "0.32": how far the amount printed may be from it."""
    return 0.5 * 10 ** -len(figure.partition(".")[2])


def check_percentages(test, text):
    """Every "N% of the ... spent: $A of $B" says N = A / B (rounded) of the amounts that print as
    A and B (cents from a cent up: each within half its last digit)."""
    figure = r"\$(\d[\d,]*(?:\.\d+)?)"
    found = re.findall(r"(\d+)%% of the .*? spent: %s of %s" % (figure, figure), text)
    for percent, spent, budget in found:
        spent, budget = spent.replace(",", ""), budget.replace(",", "")
        low = 100 * (float(spent) - half_unit(spent)) / (float(budget) + half_unit(budget))
        high = 100 * (float(spent) + half_unit(spent)) / (float(budget) - half_unit(budget))
        test.assertTrue(low - 0.5 <= int(percent) <= high + 0.5,
                        "%s%% of $%s spent of $%s" % (percent, spent, budget))
    return len(found)


class LinesStartALineTest(SpendcapTest):
    """Test 1: a tqdm-like bar writes "\\r" updates and never a newline."""

    def bar_args(self):
        return ["run"] + FAST_TRIP + ["--", "python3", FIXTURE, "bar", self.path("ready")]

    def check(self, text):
        ok, moved = spendcap_lines_start_lines(text)
        self.assertTrue(ok, "a spendcap line stuck to the bar:\n%r" % text[-2000:])
        # The control: the bar really left half-lines for spendcap's lines to stick to.
        self.assertGreater(moved, 0, "the bar never wrote before a spendcap line")
        self.assertIn("budget:run tripped", text)
        self.assertGreater(check_percentages(self, text), 0, "the 50% warning came")
        self.assertTrue(re.search(r"^spendcap: run [0-9a-f]{8} killed", text, re.M))

    def test_stderr_to_a_file(self):
        result = self.run_spendcap(self.bar_args())
        self.assertEqual(result.returncode, 124, result.stderr[-2000:])
        self.check(result.stderr)

    def test_stderr_to_a_pipe(self):
        process = self.start_spendcap(self.bar_args(), stdout=subprocess.DEVNULL)
        _, err = process.communicate(timeout=120)
        self.assertEqual(process.returncode, 124, err[-2000:])
        self.check(err)

    def test_log_file_gets_the_lines(self):
        log = self.path("spendcap.log")
        result = self.run_spendcap(["run", "--log", log, "--rate", "36", "--budget", "1", "--",
                                    "python3", "-c", "pass"])
        self.assertEqual(result.returncode, 0, result.stderr)
        with open(log) as f:
            logged = f.read()
        self.assertRegex(logged, r"(?m)^spendcap: run [0-9a-f]{8} started")
        self.assertRegex(logged, r"\nspendcap: run [0-9a-f]{8} succeeded")
        self.assertNotIn("started", result.stderr, "the lines went to the log instead")


class Terminal:
    """A pty whose output a thread collects; the child is a session leader with it as its
    controlling terminal (pty.fork)."""

    def __init__(self, argv, env, cwd):
        self.pid, self.fd = pty.fork()
        if self.pid == 0:
            try:
                os.chdir(cwd)
                os.execvpe(argv[0], argv, env)
            finally:
                os._exit(127)
        self.output = b""
        self.lock = threading.Lock()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        while True:
            try:
                data = os.read(self.fd, 4096)
            except OSError:
                return
            if not data:
                return
            with self.lock:
                self.output += data

    def text(self):
        with self.lock:
            return self.output.decode(errors="replace")

    def send(self, data):
        os.write(self.fd, data)

    def wait_for(self, pattern, timeout, start=0):
        return wait_until(lambda: re.search(pattern, self.text()[start:]), timeout,
                          what="%r on the terminal; it shows:\n%s" % (pattern, self.text()[-1500:]))

    def close(self):
        if self.pid > 0:  # never kill(-1): that is every process the caller may signal
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            try:
                os.waitpid(self.pid, 0)
            except ChildProcessError:
                pass
            self.pid = 0
        os.close(self.fd)


class JobControlTest(SpendcapTest):
    """Test 2: Ctrl-Z, fg, and the trip while paused, with bash -i on a pty; Ctrl-C."""

    def terminal(self, argv, extra_env=None):
        env = self.spendcap_env(dict({"PS1": "PROMPT$ ", "TERM": "dumb"}, **(extra_env or {})))
        terminal = Terminal(argv, env, self.tmp)
        self.addCleanup(terminal.close)
        return terminal

    def job_pid(self):
        """The host's pid of the fixture's process (it writes its own, maybe a namespace's)."""
        self.wait_for_file("ready")

        def find():
            with open(self.path("ready")) as f:
                text = f.read()
            return self.host_pid(int(text)) if text else None
        return wait_until(find, 10, what="the job's host pid")

    def test_ctrl_z_fg_and_the_trip_while_paused(self):
        shell = self.terminal(["bash", "--norc", "--noprofile", "-i"])
        shell.wait_for(r"PROMPT\$ ", 30)
        # $1/s, reserve $3 (grace 1s + kill-after 1s + 1s); --budget 14 trips at 11 s. A
        # heartbeat every 2 s: the waker wakes spendcap 2 s before the trip.
        command = ("%s run --rate 3600 --budget 14 --grace 1s --kill-after 1s --sync 2s "
                   "--status-file %s -- python3 %s sleep %s\n"
                   % (SPENDCAP, self.path("status.json"), FIXTURE, self.path("ready")))
        shell.send(command.encode())
        started = shell.wait_for(r"spendcap: run [0-9a-f]{8} started[^\n]*trips in (\d+)s", 30)
        start_time = time.monotonic()
        self.assertEqual(started.group(1), "11")
        job = self.job_pid()
        spendcap = wait_until(lambda: [p for p in children_of(shell.pid) if alive(p)], 10,
                              what="spendcap under the shell")[0]

        mark = len(shell.text())
        shell.send(b"\x1a")  # Ctrl-Z
        shell.wait_for(r"job paused; still accruing \$3,600\.00/h", 10, mark)
        shell.wait_for(r"Stopped", 10, mark)
        shell.wait_for(r"PROMPT\$ ", 10, mark)
        wait_until(lambda: proc_state(spendcap) == "T" and proc_state(job) == "T", 10,
                   what="spendcap and the job stopped")

        mark = len(shell.text())
        shell.send(b"fg\n")
        shell.wait_for(r"job resumed", 10, mark)
        wait_until(lambda: proc_state(spendcap) in ("S", "R") and proc_state(job) in ("S", "R"),
                   10, what="spendcap and the job running again")

        mark = len(shell.text())
        shell.send(b"\x1a")
        shell.wait_for(r"Stopped", 10, mark)
        wait_until(lambda: proc_state(job) == "T", 10, what="the job stopped again")
        # Paused, the run still trips on time: spendcap wakes itself to say it and stop the job.
        shell.wait_for(r"spendcap: budget:run tripped after 11s", 30, mark)
        tripped_at = time.monotonic() - start_time
        self.assertLess(tripped_at, 11 + 8, "the trip came late while paused")
        shell.wait_for(r"spendcap: run [0-9a-f]{8} killed \(budget:run\)", 20, mark)
        status = self.read_json("status.json")
        self.assertEqual(status["reason"], "budget:run")
        self.assertEqual(status["exit_code"], 124)
        self.assert_tree_gone_but_shell(shell.pid)

    def assert_tree_gone_but_shell(self, shell_pid):
        from spendcap_testlib import processes_with_marker
        wait_until(lambda: set(processes_with_marker(self.marker)) <= {shell_pid}, 10,
                   what="every process but the shell gone")

    def test_ctrl_c_ends_as_interrupted(self):
        terminal = self.terminal([SPENDCAP, "run", "--rate", "36", "--budget", "1",
                                  "--status-file", self.path("status.json"), "--",
                                  "python3", FIXTURE, "sleep", self.path("ready")])
        terminal.wait_for(r"spendcap: run [0-9a-f]{8} started", 30)
        self.job_pid()
        terminal.send(b"\x03")  # Ctrl-C
        terminal.wait_for(r"spendcap: run [0-9a-f]{8} killed \(interrupted\) after", 20)
        status = wait_until(lambda: os.path.exists(self.path("status.json"))
                            and self.read_json("status.json"), 10, what="the status file")
        self.assertEqual(status["reason"], "interrupted")
        # The status file and the end line say what the ledger says (issue 24): killed,
        # reason interrupted.
        self.assertEqual(status["status"], "killed")
        self.assertEqual(status["command_signal"], "SIGINT")
        _, wait_status = os.waitpid(terminal.pid, 0)
        terminal.pid = 0
        # spendcap dies by SIGINT as the job did: the calling shell stops its loop.
        self.assertTrue(os.WIFSIGNALED(wait_status))
        self.assertEqual(os.WTERMSIG(wait_status), signal.SIGINT)


class ExitWindowTest(SpendcapTest):
    """Test 3: the checkpoint written, the job exits by itself within 2 s: never sent SIGTERM."""

    def run_checkpointing_job(self, extra=()):
        # $1/s; grace 30s + kill-after 2s: reserve $33; --budget 35 trips at 2 s.
        return self.run_spendcap(["run", "--rate", "3600", "--budget", "35", "--grace", "30s",
                                  "--kill-after", "2s"] + list(extra) +
                                 ["--", "python3", FIXTURE, "checkpoint", self.path("ready"),
                                  self.path("log")])

    def log(self):
        if not os.path.exists(self.path("log")):
            return ""
        with open(self.path("log")) as f:
            return f.read()

    def test_job_finishes_after_its_checkpoint(self):
        result = self.run_checkpointing_job()
        self.assertEqual(result.returncode, 124, result.stderr)
        self.assertIn("the job wrote its checkpoint: it has 5s to exit by itself before SIGTERM",
                      result.stderr)
        self.assertIn("last line: wandb.finish() done", result.stdout)
        self.assertNotIn("SIGTERM", self.log())

    def test_without_the_window_it_is_cut_off(self):
        # The control: --exit-window 0s is the old behaviour, SIGTERM at once.
        result = self.run_checkpointing_job(["--exit-window", "0s"])
        self.assertEqual(result.returncode, 124, result.stderr)
        self.assertIn("the job wrote its checkpoint: terminating now", result.stderr)
        self.assertIn("SIGTERM", self.log())
        self.assertNotIn("last line", result.stdout)

    def test_no_catcher_says_no_checkpoint(self):
        result = self.run_spendcap(["run"] + FAST_TRIP + ["--", "python3", FIXTURE, "sleep",
                                                          self.path("ready")])
        self.assertEqual(result.returncode, 124, result.stderr)
        self.assertIn("no process catches SIGUSR1: no checkpoint was taken", result.stderr)


class TruthfulLinesTest(LedgerTest):
    """Test 4: the team's remaining budget binds before the run's own."""

    # 36/h is $0.01/s; grace 0s and kill-after 0s leave a reserve of 1 s ($0.01). Claims of 2 s
    # ($0.03 with the reserve) fit the team's $0.06, so the grant is not limited at admission, yet
    # the team trips the run at 5 s, long before its own $1 budget.
    POLICY = {
        "defaults": {"grace": "0s", "kill_after": "0s", "sync": "1s", "claim_horizon": "2s"},
        "budgets": {"team": {"nlp": {"amount": 0.06, "period": "day"}}},
    }

    def test_start_line_names_the_team_and_no_warning_after_the_trip(self):
        self.write_policy(self.POLICY)
        result = self.run_spendcap(["run", "--team", "nlp", "--rate", "36", "--budget", "1",
                                    "--status-file", self.path("status.json"), "--",
                                    "python3", "-c", "import time; time.sleep(60)"])
        self.assertEqual(result.returncode, 124, result.stderr)
        start = re.search(r"spendcap: run [0-9a-f]{8} started.*", result.stderr).group(0)
        self.assertIn("trips in 5s", start)
        self.assertIn("budget:team:nlp", start)
        self.assertNotIn("its budget trips", start, "the run budget does not bind")
        # The ledger is a detail: the start line names it under --verbose (test_words).
        self.assertNotIn("ledger", start)
        status = self.read_json("status.json")
        self.assertEqual(status["reason"], "budget:team:nlp")
        self.assertAlmostEqual(status["tripped_after_seconds"], 5, delta=1.0)
        before, _, after = result.stderr.partition("budget:team:nlp tripped")
        self.assertTrue(after, result.stderr)
        self.assertNotIn("% of the", after, "no warning after the trip")
        self.assertGreater(check_percentages(self, before), 0,
                           "a team warning came before:\n" + result.stderr)

    def test_reserve_eating_the_budget_is_said_and_a_reserve_that_does_not_fit_refused(self):
        # $36/h with the default 60 s grace and 10 s kill-after: a $0.71 reserve, 71% of $1.
        result = self.run_spendcap(["run", "--rate", "36", "--budget", "1", "--",
                                    "python3", "-c", "pass"])
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("the shutdown reserve $0.71 is 71% of the budget $1.00", result.stderr)
        result = self.run_spendcap(["run", "--rate", "36", "--budget", "0.5",
                                    "--status-file", self.path("status.json"), "--",
                                    "python3", "-c", "pass"])
        self.assertEqual(result.returncode, 120, result.stderr)
        self.assertIn("lower --grace or raise --budget", result.stderr)
        self.assertEqual(self.read_json("status.json")["reason"], "reserve-exceeds-budget")


class JobKeyLinesTest(LedgerTest):
    """A job key's end line gives the job's total; a later --budget that changes it is said."""

    def test_job_total_and_raised_budget(self):
        args = ["run", "--job-key", "k1", "--rate", "36", "--grace", "0s", "--kill-after", "0s"]
        first = self.run_spendcap(args + ["--budget", "1", "--", "python3", "-c", "pass"])
        self.assertEqual(first.returncode, 0, first.stderr)
        self.assertNotIn("raises", first.stderr)
        second = self.run_spendcap(args + ["--budget", "2", "--", "python3", "-c", "pass"])
        self.assertEqual(second.returncode, 0, second.stderr)
        self.assertRegex(second.stderr,
                         r"--budget \$2\.00 raises the budget of job k1 from \$1\.00")
        spends = [row["spend_micros"] / 1e6 for row in self.runs()]
        self.assertEqual(len(spends), 2)
        total = re.search(r"job k1 total \$([\d.]+) of \$2\.00", second.stderr)
        self.assertTrue(total, second.stderr)
        self.assertAlmostEqual(float(total.group(1)), sum(spends), delta=0.0002)


class ForwardedSignalsTest(SpendcapTest):
    """SIGUSR1 and SIGUSR2 to spendcap reach the job's catchers, as --forward SIGWINCH does."""

    def read_log(self):
        if not os.path.exists(self.path("log")):
            return ""
        with open(self.path("log")) as f:
            return f.read()

    def test_usr1_usr2_and_forward(self):
        process = self.start_spendcap(
            ["run", "--rate", "36", "--budget", "10", "--forward", "SIGWINCH",
             "--status-file", self.path("status.json"), "--", "python3", FIXTURE, "signals",
             self.path("ready"), self.path("log"), "SIGUSR1", "SIGUSR2", "SIGWINCH"],
            stdout=subprocess.DEVNULL)
        self.wait_for_file("ready")
        for name in ("SIGUSR1", "SIGUSR2", "SIGWINCH"):
            process.send_signal(getattr(signal, name))
            wait_until(lambda: name in self.read_log(), 10, what="%s at the job" % name)
        _, err = process.communicate(timeout=60)
        self.assertEqual(process.returncode, 0, err)
        self.assertIn("got SIGUSR1: passed on to 1 process that catches it", err)
        self.assertEqual(self.read_json("status.json")["reason"], "exited", "nothing else happened")

    def test_not_forwarded_without_the_flag(self):
        # The control: SIGWINCH is not passed on without --forward (its default is to ignore).
        process = self.start_spendcap(
            ["run", "--rate", "36", "--budget", "10", "--", "python3", FIXTURE, "signals",
             self.path("ready"), self.path("log"), "SIGWINCH", "SIGUSR2"],
            stdout=subprocess.DEVNULL)
        self.wait_for_file("ready")
        process.send_signal(signal.SIGWINCH)
        process.send_signal(signal.SIGUSR2)
        wait_until(lambda: "SIGUSR2" in self.read_log(), 10, what="SIGUSR2 at the job")
        self.assertNotIn("SIGWINCH", self.read_log())
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=60)

    def test_forward_refuses_signals_spendcap_handles(self):
        result = self.run_spendcap(["run", "--rate", "36", "--budget", "1", "--forward", "TERM",
                                    "--", "true"])
        self.assertEqual(result.returncode, 125, result.stderr)
        self.assertIn("--forward TERM", result.stderr)


if __name__ == "__main__":
    unittest.main()
