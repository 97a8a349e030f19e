"""spendcap's lines on a pipe shared with the job (`2>&1 | tee log`, a CI log), as an ordinary user
(issue 40 item 2): no blank line before a spendcap line, whether the job's output ended with a
newline, stopped mid-line or went to a file only; no line glued to another; the job's output
whole and in order; and the job's output keeps flowing while spendcap is stopped (the relay is a
process of its own).

Negative control: with the binary before the relay (SPENDCAP_BIN=the old build) the
newline-ended and file-only cases fail (a blank line before each spendcap line after the job
wrote)."""
import os
import re
import signal
import subprocess
import threading
import unittest

from spendcap_testlib import UserLedgerTest, why_no_ordinary_user, wait_until

RUN = ["run", "--team", "t", "--experiment", "e", "--rate", "1", "--budget", "5", "--"]


def check_lines(test, text):
    """Every spendcap line starts a line, and no line is blank."""
    test.assertNotIn("\n\n", text, "a blank line:\n%r" % text)
    test.assertFalse(text.startswith("\n"), "a blank line first:\n%r" % text)
    for match in re.finditer("spendcap:", text):
        test.assertTrue(match.start() == 0 or text[match.start() - 1] == "\n",
                        "a spendcap line glued to the job's output:\n%r" % text)
    test.assertRegex(text, r"(?m)^spendcap: run [0-9a-f]{8} succeeded")


@unittest.skipIf(why_no_ordinary_user(), why_no_ordinary_user())
class PipeLinesTest(UserLedgerTest):
    def through_pipe(self, job):
        """`spendcap run -- sh -c JOB 2>&1 | cat`: stdout and stderr are one pipe."""
        process = self.start_spendcap(RUN + ["sh", "-c", job], stderr=subprocess.STDOUT)
        out, _ = process.communicate(timeout=60)
        self.assertEqual(process.returncode, 0, out)
        return out

    def test_lines_that_end_with_newlines(self):
        out = self.through_pipe("echo one; echo two >&2; echo three")
        check_lines(self, out)
        job = [line for line in out.splitlines() if not line.startswith("spendcap:")]
        self.assertEqual(job, ["one", "two", "three"], out)

    def test_output_to_a_file_only(self):
        out = self.through_pipe("echo x > %s" % self.path("job.txt"))
        check_lines(self, out)
        self.assertEqual([line for line in out.splitlines() if not line.startswith("spendcap:")],
                         [], out)

    def test_output_that_stops_mid_line(self):
        out = self.through_pipe("echo whole; printf half; printf ' err' >&2")
        check_lines(self, out)
        # The half line is ended for spendcap's line, never glued to it.
        # (The start line may come between, when the job ended before it was written.)
        self.assertRegex(out, r"half err\n(spendcap: run [0-9a-f]{8} started: .*\n)?"
                              r"spendcap: run [0-9a-f]{8} succeeded")
        self.assertIn("whole\n", out)

    def test_job_output_flows_while_spendcap_is_stopped(self):
        # 256 KiB is four times a pipe's capacity: a relay inside spendcap would block the job.
        ready, go, done, end = (self.path(n) for n in ("ready", "go", "done", "end"))
        job = ("touch {ready}; while [ ! -e {go} ]; do sleep 0.05; done; i=0; "
               "while [ $i -lt 4096 ]; do printf '%063d\\n' $i; i=$((i+1)); done; "
               "touch {done}; while [ ! -e {end} ]; do sleep 0.05; done").format(
                   ready=ready, go=go, done=done, end=end)
        process = self.start_spendcap(RUN + ["sh", "-c", job], stderr=subprocess.STDOUT)
        chunks = []
        reader = threading.Thread(target=lambda: chunks.append(process.stdout.read()))
        reader.start()
        wait_until(lambda: os.path.exists(ready), 30, what="the job to start")
        os.kill(process.pid, signal.SIGSTOP)  # setpriv execs spendcap: the same pid
        try:
            open(go, "w").close()
            wait_until(lambda: os.path.exists(done), 30,
                       what="the job to write 256 KiB while spendcap is stopped")
        finally:
            os.kill(process.pid, signal.SIGCONT)
        open(end, "w").close()
        process.wait(timeout=60)
        reader.join(timeout=60)
        out = chunks[0]
        job = [line for line in out.splitlines() if not line.startswith("spendcap:")]
        self.assertEqual(job, ["%063d" % i for i in range(4096)], "the job's output, whole")
        check_lines(self, out)


if __name__ == "__main__":
    unittest.main()
