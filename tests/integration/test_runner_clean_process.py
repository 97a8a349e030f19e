"""A clean process for the privileged runner (issue 29, item 3, breaks 1 and 6), on the real
install (scripts/install-shared-runner.sh, as test_shared_runner does it): a user's resource
limits (ulimit -f, -v, -n, -s, -u) and ignored signals (trap '' XFSZ PIPE) no longer reach the
runner's supervisor: its ledger writes and its webhook deliveries still work under them (the
webhook at a real HTTP server on 127.0.0.1), a run stopped at its budget is recorded killed with
its spend, and the job still gets the user's own limits and ignored signals, as it would without
spendcap. Before the fix, `ulimit -f 8` failed the supervisor's ledger writes (EFBIG, or SIGXFSZ
killed it) and `ulimit -v 60000` failed libcurl's mmap (the webhook lost)."""
import json
import os
import unittest

from test_shared_runner import WHY_NOT, SharedRunnerSetup
from test_webhooks import Endpoint

URL_FILE = "/etc/spendcap/hook.url"
LOCKED = {
    "locked": True,
    "ledger": "set by the install",
    "rates": {"gpu": {"a100-80gb": {"on_demand": 36.0}}},
    "defaults": {"gpu": "a100-80gb", "gpus": 1, "grace": "1s", "kill_after": "1s"},
    "budgets": {"team": {"vision": {"amount": 100, "period": "month", "max_run": 10}}},
    "webhooks": [{"url_file": URL_FILE, "events": ["finished", "killed"]}],
}

# The job: its limits and ignored signals, in a file of its own (under `ulimit -f 8`: small).
JOB = 'grep -E "^(Max |Sig(Ign|Blk))" /proc/self/limits /proc/self/status > "$0"'

# ulimit flag -> (value, the line of /proc/self/limits, the value there)
LIMITS = {
    "-f": ("8", "Max file size", "8192"),
    "-v": ("60000", "Max address space", str(60000 * 1024)),
    "-n": ("24", "Max open files", "24"),
    "-s": ("1024", "Max stack size", str(1024 * 1024)),
    "-u": ("64", "Max processes", "64"),
}
XFSZ_AND_PIPE = (1 << (25 - 1)) | (1 << (13 - 1))


def root_may_raise_hard_limits():
    """CAP_SYS_RESOURCE in this root's bounding set (many containers drop it)."""
    with open("/proc/self/status") as f:
        bounding = int([l.split()[1] for l in f if l.startswith("CapBnd:")][0], 16)
    return bool(bounding & (1 << 24))


@unittest.skipIf(WHY_NOT, WHY_NOT or "")
class RunnerCleanProcessTest(SharedRunnerSetup):
    locked_policy = LOCKED

    def setUp(self):
        super().setUp()
        self.endpoint = Endpoint([200])
        self.addCleanup(self.endpoint.close)
        result = self.inside(["sh", "-c", 'printf "%s\\n" "$1" > "$0" && chown root:spendcap "$0"'
                              ' && chmod 0640 "$0"', URL_FILE, self.endpoint.url])
        self.assertEqual(result.returncode, 0, result.stderr)

    def run_under(self, user, limits, args):
        """`spendcap run ARGS` from bash after `ulimit LIMITS` and `trap '' XFSZ PIPE`."""
        script = "trap '' XFSZ PIPE; ulimit %s || exit 99; exec \"$0\" run \"$@\"" % limits
        return self.inside(["bash", "-c", script, self.bin] + args, user=user,
                           env=self.user_env(user))

    def job_view(self, path):
        view = {"ignored": 0}
        with open(path) as f:
            for line in f:
                line = line.split(":", 1)[1] if line.startswith("/proc/") else line
                if line.startswith("SigIgn:"):
                    view["ignored"] = int(line.split()[1], 16)
                elif line.startswith("Max "):
                    name = line[:26].strip()
                    view[name] = line[26:].split()[0]
        return view

    def last_run(self):
        return json.loads(self.root_sql(
            "SELECT json_object('status', status, 'spend', spend_micros, 'user', user_name)"
            " FROM runs ORDER BY started_at DESC LIMIT 1"))

    def test_each_limit_and_ignored_signal_leaves_the_runner_working_and_reaches_the_job(self):
        user = self.users[0]
        for flag, (value, line, shown) in LIMITS.items():
            with self.subTest(limit=flag):
                before = len(self.endpoint.requests)
                out = os.path.join(self.tmp, user, "job%s.txt" % flag)
                result = self.run_under(user, "-S %s %s" % (flag, value),
                                        ["--team", "vision", "--", "sh", "-c", JOB, out])
                self.assertEqual(result.returncode, 0, result.stderr)
                view = self.job_view(out)
                self.assertEqual(view[line], shown, "the job has not the user's limit")
                self.assertEqual(view["ignored"] & XFSZ_AND_PIPE, XFSZ_AND_PIPE,
                                 "the job does not ignore what the user ignored")
                run = self.last_run()
                self.assertEqual((run["status"], run["user"]), ("succeeded", user))
                self.assertEqual([e["event"] for e in self.endpoint.events()[before:]],
                                 ["finished"], result.stderr)
        self.assertEqual(self.root_sql("SELECT count(*) FROM outbox"), "0")

    def test_a_closed_fd_0_to_2_reaches_the_job_closed(self):
        # Issue 38: `spendcap run ... <&-` ended 125 (`--front-fds: not a descriptor: "0"`): the
        # front's memfd took the closed fd's number. Now the job sees what it would without
        # spendcap: that fd closed, the others as they were.
        user = self.users[0]
        probe = ('exec 9>"$0"; for fd in 0 1 2; do'
                 ' if [ -e /proc/self/fd/$fd ]; then echo $fd=open >&9;'
                 ' else echo $fd=closed >&9; fi; done')
        for closed in ("0", "1", "2"):
            with self.subTest(closed=closed):
                out = os.path.join(self.tmp, user, "fds%s.txt" % closed)
                script = 'exec "$0" run --team vision -- sh -c \'%s\' "$1" %s>&-' % (probe, closed)
                result = self.inside(["bash", "-c", script, self.bin, out], user=user,
                                     env=self.user_env(user))
                self.assertEqual(result.returncode, 0, result.stderr)
                with open(out) as f:
                    seen = f.read().split()
                self.assertEqual(seen, ["%d=%s" % (fd, "closed" if str(fd) == closed else "open")
                                        for fd in range(3)], result.stderr)
                self.assertEqual(self.last_run()["status"], "succeeded")

    def test_a_lowered_hard_limit_is_raised_or_the_run_refused(self):
        # bash's `ulimit -f 8` lowers the hard limit too: root raises it again where it holds
        # CAP_SYS_RESOURCE; where it does not, the run is refused before anything is written.
        user = self.users[0]
        out = os.path.join(self.tmp, user, "hard.txt")
        result = self.run_under(user, "-f 8", ["--team", "vision", "--", "sh", "-c", JOB, out])
        if root_may_raise_hard_limits():
            self.assertEqual(result.returncode, 0, result.stderr)
            self.assertEqual(self.job_view(out)["Max file size"], "8192")
            self.assertEqual(self.last_run()["status"], "succeeded")
        else:
            self.assertEqual(result.returncode, 125, result.stderr)
            self.assertIn("the hard RLIMIT_FSIZE is 8192", result.stderr)
            self.assertIn("ulimit -S", result.stderr)
            self.assertEqual(self.root_sql("SELECT count(*) FROM runs"), "0")
            self.assertEqual(self.endpoint.requests, [])

    def test_a_run_stopped_at_its_budget_under_a_file_size_limit_is_recorded_with_its_spend(self):
        # The first break: under `ulimit -f` the supervisor's final row failed and was spooled.
        user = self.users[0]
        result = self.run_under(user, "-S -f 8", ["--team", "vision", "--budget", "0.06", "--",
                                               "sleep", "60"])
        self.assertEqual(result.returncode, 124, result.stderr)
        run = self.last_run()
        self.assertEqual(run["status"], "killed", result.stderr)
        self.assertGreaterEqual(run["spend"], 25000, "the spend recorded is below the true one")
        self.assertIn("killed", [e["event"] for e in self.endpoint.events()], result.stderr)
        spool = os.path.join(self.tmp, user, "state", "spendcap", "spool")
        self.assertFalse(os.path.isdir(spool) and os.listdir(spool), "a row was spooled")


if __name__ == "__main__":
    unittest.main()
