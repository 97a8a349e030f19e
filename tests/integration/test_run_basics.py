"""Runs that end by themselves, the job's environment and fds, and every refusal and error code
(issue 2, tests 4 and 7)."""
import json
import os
import stat
import subprocess
import unittest

from spendcap_testlib import SPENDCAP, SpendcapTest

UNDER_BUDGET = ["run", "--rate", "1", "--budget", "10", "--grace", "1s", "--kill-after", "1s"]


class ExitStatusTest(SpendcapTest):
    def test_own_exit_status_is_passed_through(self):
        for script, expected in (("exit 0", 0), ("exit 3", 3), ("kill -9 $$", 128 + 9)):
            with self.subTest(script=script):
                result = self.run_spendcap(UNDER_BUDGET + ["--status-file", self.path("s.json"),
                                                           "--", "sh", "-c", script])
                self.assertEqual(result.returncode, expected, result.stderr)
                status = self.read_json("s.json")
                self.assertFalse(status["stopped_by_spendcap"])
                self.assertEqual(status["reason"], "exited")

    def test_command_exit_124_is_not_a_budget_trip(self):
        result = self.run_spendcap(UNDER_BUDGET + ["--status-file", self.path("s.json"), "--",
                                                   "sh", "-c", "exit 124"])
        self.assertEqual(result.returncode, 124)
        status = self.read_json("s.json")
        self.assertFalse(status["stopped_by_spendcap"])
        self.assertEqual(status["command_exit_code"], 124)

    def test_inherited_fd_3_and_stdio_are_the_jobs_own(self):
        out = self.path("fd3.txt")
        stdout_file = self.path("stdout.txt")
        # fd 3 is opened by the calling shell; stdout is a regular file, not a pipe from spendcap.
        script = ('exec 3>"%s" >"%s"; exec "%s" run --rate 1 --budget 10 -- sh -c '
                  '\'echo inherited >&3; readlink /proc/self/fd/1\'') % (out, stdout_file, SPENDCAP)
        result = subprocess.run(["sh", "-c", script], env=self.spendcap_env(), cwd=self.tmp,
                                capture_output=True, text=True, timeout=60)
        self.assertEqual(result.returncode, 0, result.stderr)
        with open(out) as f:
            self.assertEqual(f.read(), "inherited\n")
        with open(stdout_file) as f:
            self.assertEqual(f.read().strip(), stdout_file)

    def test_a_closed_fd_0_to_2_is_closed_for_the_job(self):
        # As without spendcap (issue 38): spendcap fills the gap with /dev/null for itself only.
        probe = ('exec 9>"$0"; for fd in 0 1 2; do'
                 ' if [ -e /proc/self/fd/$fd ]; then echo $fd=open >&9;'
                 ' else echo $fd=closed >&9; fi; done')
        for closed in ("0", "1", "2"):
            with self.subTest(closed=closed):
                out = self.path("fds%s.txt" % closed)
                script = 'exec "$0" run --rate 1 --budget 10 -- sh -c \'%s\' "$1" %s>&-' % (
                    probe, closed)
                result = subprocess.run(["sh", "-c", script, SPENDCAP, out],
                                        env=self.spendcap_env(), cwd=self.tmp,
                                        capture_output=True, text=True, timeout=60)
                self.assertEqual(result.returncode, 0, result.stderr)
                with open(out) as f:
                    self.assertEqual(f.read().split(),
                                     ["%d=%s" % (fd, "closed" if str(fd) == closed else "open")
                                      for fd in range(3)])

    def test_job_environment(self):
        result = self.run_spendcap(
            ["run", "--team", "vision", "--experiment", "resnet", "--project", "p1", "--rate", "1",
             "--budget", "10", "--", "sh", "-c",
             'echo "$SPENDCAP_RUN_ID|$SPENDCAP_TEAM|$SPENDCAP_EXPERIMENT|$SPENDCAP_PROJECT|'
             '$SPENDCAP_BUDGET_USD|$SPENDCAP_CHECKPOINT_SIGNAL|$SPENDCAP_CHECKPOINT_DONE"'])
        self.assertEqual(result.returncode, 0, result.stderr)
        run_id, team, experiment, project, budget, sig, done = result.stdout.strip().split("|")
        self.assertRegex(run_id, r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")
        self.assertEqual((team, experiment, project, budget, sig), ("vision", "resnet", "p1", "10", "SIGUSR1"))
        self.assertTrue(done.startswith(self.path("tmp")) and done.endswith("/checkpoint-done"))

    def test_argv0_and_no_shell(self):
        # Arguments reach the command verbatim: no shell expands them.
        result = self.run_spendcap(UNDER_BUDGET + ["--", "python3", "-c",
                                                   "import sys; print(sys.argv[1:])",
                                                   "$HOME", "a b", ";rm -rf /"])
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(result.stdout.strip(), "['$HOME', 'a b', ';rm -rf /']")


class ErrorCodesTest(SpendcapTest):
    def test_127_not_found(self):
        result = self.run_spendcap(UNDER_BUDGET + ["--", "no-such-command-xyz"])
        self.assertEqual(result.returncode, 127)
        self.assertIn("no-such-command-xyz: command not found", result.stderr)

    def test_126_not_executable(self):
        script = self.path("script.sh")
        with open(script, "w") as f:
            f.write("#!/bin/sh\necho hi\n")
        os.chmod(script, stat.S_IRUSR | stat.S_IWUSR)
        # (Even root may not execute a file that has no execute bit at all.)
        result = self.run_spendcap(UNDER_BUDGET + ["--", script])
        self.assertEqual(result.returncode, 126, result.stderr)
        self.assertIn("not executable", result.stderr)

    def test_126_a_directory_is_not_a_program(self):
        """Issue 40: a directory as the command is 126, as the shell gives, and the message says
        it is a directory; main's binary hinted "chmod +x it", which cannot help."""
        os.mkdir(self.path("experiments"))
        for target in (self.tmp, "./experiments"):
            with self.subTest(target=target):
                result = self.run_spendcap(UNDER_BUDGET + ["--", target])
                self.assertEqual(result.returncode, 126, result.stderr)
                self.assertIn(target + ": a directory, not a program (give the program to run",
                              result.stderr)
                self.assertNotIn("chmod", result.stderr)
        # Found only as a directory in PATH: named so too.
        result = self.run_spendcap(UNDER_BUDGET + ["--", "experiments"],
                                   extra_env={"PATH": self.tmp + ":" + os.environ["PATH"]})
        self.assertEqual(result.returncode, 126, result.stderr)
        self.assertIn("experiments: found in PATH as a directory, not a program", result.stderr)
        self.assertNotIn("chmod", result.stderr)

    def test_125_bad_input_names_the_input(self):
        cases = [
            (["--rate", "1", "--budget", "-1"], "--budget -1"),
            (["--rate", "1", "--budget", "abc"], "--budget abc"),
            (["--rate", "1", "--budget", "nan"], "--budget nan"),
            (["--rate", "NaN", "--budget", "1"], "--rate NaN"),
            (["--rate", "1", "--budget", "1", "--grace", "5x"], "--grace 5x"),
            (["--rate", "1", "--budget", "1", "--kill-after", "-1s"], "--kill-after -1s"),
            (["--rate", "1", "--budget", "1", "--checkpoint-signal", "SIGFOO"],
             "--checkpoint-signal SIGFOO"),
            (["--rate", "1", "--budget", "1", "--tag", "novalue"], "--tag novalue"),
            (["--budget", "1"], "no burn rate"),
            (["--rate", "1", "--budget", "1", "--bogus"], "--bogus"),
        ]
        for flags, expected in cases:
            with self.subTest(flags=flags):
                result = self.run_spendcap(["run"] + flags + ["--", "true"])
                self.assertEqual(result.returncode, 125, result.stderr)
                self.assertIn(expected, result.stderr)
                self.assertTrue(result.stderr.startswith("spendcap: ") or "--bogus" in expected,
                                result.stderr)

    def test_125_missing_command(self):
        result = self.run_spendcap(["run", "--rate", "1", "--budget", "1"])
        self.assertEqual(result.returncode, 125)
        self.assertIn("command", result.stderr)

    def test_120_reserve_not_covered(self):
        # 36/h with grace 1s + kill-after 1s + 1s of reaping slack needs a 0.03 reserve.
        result = self.run_spendcap(["run", "--rate", "36", "--budget", "0.02", "--grace", "1s",
                                    "--kill-after", "1s", "--status-file", self.path("s.json"),
                                    "--", "true"])
        self.assertEqual(result.returncode, 120, result.stderr)
        self.assertIn("does not fit in the budget $0.02 (lower --grace or raise --budget)",
                      result.stderr)
        self.assertEqual(self.read_json("s.json")["status"], "refused")
        self.assertEqual(self.read_json("s.json")["reason"], "reserve-exceeds-budget")
        # The history says the reserve too, as the user reads it (issue 40: main's binary
        # recorded "refused: budget run:<uuid>", the run's own id as if another budget refused it).
        run_id = self.read_json("s.json")["run_id"]
        runs = json.loads(self.run_ok(["runs", "--json"]).stdout)
        self.assertEqual([r["reason"] for r in runs],
                         ["refused: shutdown reserve exceeds the run budget"])
        shown = self.run_ok(["show", run_id[:8]]).stdout
        self.assertIn("refused: shutdown reserve exceeds the run budget", shown)
        self.assertNotIn("run:" + run_id, shown)



class ScriptWithoutShebangTest(SpendcapTest):
    def test_runs_with_bin_sh_as_execvp_does(self):
        script = self.path("no-shebang")
        with open(script, "w") as f:
            f.write('echo "ran by sh: $1"\n')
        os.chmod(script, 0o755)
        result = self.run_spendcap(UNDER_BUDGET + ["--", script, "arg"])
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(result.stdout, "ran by sh: arg\n")


if __name__ == "__main__":
    unittest.main()
