"""Signals to spendcap (issue 2, test 5) and the terminal: the job gets the foreground group."""
import json
import os
import pty
import select
import shutil
import signal
import subprocess
import time
import unittest

from spendcap_testlib import (SPENDCAP, SpendcapTest, alive, children_of, proc_state,
                              processes_with_marker, wait_until)


class SignalToSpendcapTest(SpendcapTest):
    def test_sigterm_checkpoints_then_stops_the_tree_and_the_shell_sees_143(self):
        # The calling shell runs spendcap and reports its status as a shell would see it.
        # The job keeps running after its checkpoint: a 1 s exit window, then SIGTERM.
        script = ('"%s" run --rate 1 --budget 10 --grace 5s --kill-after 1s --exit-window 1s '
                  '--status-file "%s" %s & '
                  'echo $! > "%s"; wait $!; echo "rc=$?"') % (
                      SPENDCAP, self.path("status.json"),
                      " ".join("'%s'" % a for a in self.tree_args(["--signal-done"])),
                      self.path("spendcap.pid"))
        shell = subprocess.Popen(["sh", "-c", script], env=self.spendcap_env(), cwd=self.tmp,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.wait_for_file("ready")
        roles = self.read_roles("ready")
        with open(self.path("spendcap.pid")) as f:
            spendcap_pid = int(f.read())
        os.kill(spendcap_pid, signal.SIGTERM)
        out, err = shell.communicate(timeout=60)
        self.assertIn("rc=143", out, err)
        self.assertTrue(os.path.exists(self.path("checkpoint")), "the job got the checkpoint signal")
        status = self.read_json("status.json")
        self.assertEqual(status["reason"], "signal:SIGTERM")
        self.assertEqual(status["spendcap_signal"], "SIGTERM")
        # The job said its checkpoint was done: the grace ended early.
        self.assertLess(status["trip_to_empty_seconds"], 4.5)
        self.assert_tree_gone(timeout=2.0)
        for role, pid in roles.items():
            self.assertFalse(alive(pid), role)

    def test_second_signal_skips_the_grace(self):
        process = self.start_spendcap(["run", "--rate", "1", "--budget", "10", "--grace", "60s",
                                       "--kill-after", "1s", "--status-file",
                                       self.path("status.json")] + self.tree_args())
        self.wait_for_file("ready")
        process.send_signal(signal.SIGINT)
        self.wait_for_file("checkpoint")
        process.send_signal(signal.SIGINT)
        process.communicate(timeout=30)
        self.assertEqual(process.returncode, -signal.SIGINT)
        self.assertLess(self.read_json("status.json")["trip_to_empty_seconds"], 30)
        self.assert_tree_gone(timeout=2.0)


class UnfriendlySurroundingsTest(SpendcapTest):
    """Nothing around spendcap may stop it from enforcing the budget."""

    def test_stderr_that_nobody_reads_does_not_stall_the_trip(self):
        # The job fills the stderr pipe (64 KiB) and nobody reads it: every later write blocks.
        process = subprocess.Popen(
            [SPENDCAP, "run", "--rate", "36", "--budget", "0.06", "--grace", "1s", "--kill-after",
             "1s", "--status-file", self.path("s.json"), "--", "sh", "-c",
             "head -c 200000 /dev/zero >&2; sleep 60"],
            env=self.spendcap_env(), cwd=self.tmp, stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE)
        try:
            process.wait(timeout=30)  # never reads the pipe
        finally:
            process.kill()
            process.stderr.close()
        self.assertEqual(process.returncode, 124)
        status = self.read_json("s.json")
        self.assertEqual(status["reason"], "budget:run")
        self.assertLessEqual(status["spend"], 0.06)

    def test_sigtstp_pauses_the_job_not_spendcap(self):
        process = self.start_spendcap(["run", "--rate", "36", "--budget", "0.07", "--grace", "1s",
                                       "--kill-after", "1s", "--status-file",
                                       self.path("s.json")] + self.tree_args())
        self.wait_for_file("ready")
        main = self.read_roles("ready")["main"]
        process.send_signal(signal.SIGTSTP)
        wait_until(lambda: proc_state(main) == "T", 10, what="the job to be stopped")
        self.assertNotEqual(proc_state(process.pid), "T", "spendcap itself keeps running")
        _, stderr = process.communicate(timeout=30)
        self.assertEqual(process.returncode, 124, stderr)  # it still tripped, on time
        self.assertLessEqual(self.read_json("s.json")["spend"], 0.07)
        self.assert_tree_gone(timeout=2.0)

    def test_no_run_directory_means_nothing_in_the_ledger(self):
        result = self.run_spendcap(["run", "--rate", "1", "--budget", "1", "--", "true"],
                                   extra_env={"TMPDIR": self.path("missing")})
        self.assertEqual(result.returncode, 125)
        self.assertIn("cannot create the run directory", result.stderr)
        ps = self.run_spendcap(["ps", "--json"])
        self.assertEqual(json.loads(ps.stdout), [], "no admitted run is left holding a ceiling")


class TerminalTest(SpendcapTest):
    """On a terminal the job's group becomes the foreground group: it can read the terminal
    (no SIGTTIN), and Ctrl-C reaches the job as it would without spendcap."""

    def run_on_terminal(self, job, keys):
        master, slave = pty.openpty()

        def become_session_leader_with_terminal():
            os.setsid()
            import fcntl
            import termios
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)

        process = subprocess.Popen(
            [SPENDCAP, "run", "--rate", "1", "--budget", "10", "--quiet", "--"] + job,
            stdin=slave, stdout=slave, stderr=slave, env=self.spendcap_env(), cwd=self.tmp,
            preexec_fn=become_session_leader_with_terminal)
        os.close(slave)
        output = b""

        def read_available():
            nonlocal output
            while select.select([master], [], [], 0)[0]:
                try:
                    chunk = os.read(master, 4096)
                except OSError:
                    return True
                if not chunk:
                    return True
                output += chunk
            return False

        for expect, send in keys:
            wait_until(lambda: read_available() or expect.encode() in output, 20,
                       what="%r on the terminal (got %r)" % (expect, output))
            os.write(master, send.encode())
        process.wait(timeout=30)
        read_available()
        os.close(master)
        return process.returncode, output.decode(errors="replace")

    def test_job_reads_the_terminal(self):
        code, output = self.run_on_terminal(
            ["python3", "-c", "print('ready', flush=True); print('got', input())"],
            [("ready", "hello\n")])
        self.assertEqual(code, 0, output)
        self.assertIn("got hello", output)

    def test_ctrl_c_reaches_the_job(self):
        code, output = self.run_on_terminal(
            ["python3", "-c",
             "import time\nprint('ready', flush=True)\n"
             "try:\n time.sleep(60)\nexcept KeyboardInterrupt:\n print('interrupted', flush=True)\n"
             " raise SystemExit(7)"],
            [("ready", "\x03")])
        self.assertIn("interrupted", output)
        self.assertEqual(code, 7, output)



def can_unshare_pid():
    if os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("nsenter"):
        return False
    return subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", "true"],
                          capture_output=True).returncode == 0


@unittest.skipUnless(can_unshare_pid(), "needs root and PID namespaces")
class Pid1Test(SpendcapTest):
    """As PID 1 of a container, spendcap reaps every orphan that re-parents to it, as tini does."""

    def test_orphans_of_the_namespace_are_reaped(self):
        container = subprocess.Popen(
            ["unshare", "--pid", "--fork", "--mount-proc", SPENDCAP, "run", "--rate", "1",
             "--budget", "10", "--", "python3", "-c",
             "import os, time\nwhile not os.path.exists(%r): time.sleep(0.02)" % self.path("stop")],
            env=self.spendcap_env(), cwd=self.tmp, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True)
        spendcap_pid = wait_until(lambda: children_of(container.pid), 10, what="spendcap")[0]
        # A process enters the container and leaves an orphan behind (its parent exits at once):
        # the orphan re-parents to the namespace's PID 1, spendcap, not to the tree's guard.
        orphan_env = dict(self.spendcap_env(), ORPHAN_MARKER=self.marker)
        subprocess.run(["nsenter", "--target", str(spendcap_pid), "--pid", "--mount", "--",
                        "sh", "-c", "sleep 0.3 & exit 0"], env=orphan_env, check=True)
        orphan = wait_until(lambda: [p for p in processes_with_marker(self.marker)
                                     if comm(p) == "sleep"], 5, what="the orphan")[0]
        # Once it exits it must be reaped: gone from /proc, not left a zombie.
        wait_until(lambda: proc_state(orphan) is None, 10, what="the orphan to be reaped")
        open(self.path("stop"), "w").close()
        container.communicate(timeout=30)
        self.assertEqual(container.returncode, 0)


def comm(pid):
    try:
        with open("/proc/%d/comm" % pid) as f:
            return f.read().strip()
    except OSError:
        return None


if __name__ == "__main__":
    unittest.main()
