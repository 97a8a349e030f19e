"""Bad inputs (issue 7): every one is answered with a message naming what failed, exit 125 where
spendcap refuses, and nothing already recorded in the ledger changes. Arguments that are not UTF-8
reach the job untouched; what spendcap prints to a terminal has its control characters escaped."""
import json
import os
import signal
import sqlite3
import stat
import subprocess
import sys
import time

from spendcap_testlib import SPENDCAP, LedgerTest, wait_until

UNDER_BUDGET = ["run", "--rate", "1", "--budget", "10"]


class BadInputTest(LedgerTest):
    def run_bytes(self, args, timeout=60):
        """spendcap ARGS (bytes allowed) with stdout and stderr as bytes."""
        out_path, err_path = self.path("spendcap.out"), self.path("spendcap.err")
        with open(out_path, "wb") as out, open(err_path, "wb") as err:
            completed = subprocess.run([os.fsencode(SPENDCAP)] + [os.fsencode(a) for a in args],
                                       env=self.spendcap_env(), cwd=self.tmp, stdout=out,
                                       stderr=err, timeout=timeout)
        with open(out_path, "rb") as out, open(err_path, "rb") as err:
            completed.stdout, completed.stderr = out.read(), err.read()
        return completed

    def recorded(self):
        """The ledger's runs, to compare before and after a refusal."""
        return self.runs()

    def first_run(self):
        result = self.run_spendcap(UNDER_BUDGET + ["--team", "earlier", "--", "true"])
        self.assertEqual(result.returncode, 0, result.stderr)
        return self.recorded()

    def start_waiting_job(self, args):
        """A run whose job waits (bounded) for the file `release`; returns once it has started."""
        started, release = self.path("started"), self.path("release")
        job = ("import os, sys, time\n"
               "open(sys.argv[1], 'w').close()\n"
               "deadline = time.monotonic() + 60\n"
               "while not os.path.exists(sys.argv[2]) and time.monotonic() < deadline:\n"
               "    time.sleep(0.02)\n")
        process = self.start_spendcap(UNDER_BUDGET + list(args) +
                                      ["--", "python3", "-c", job, started, release],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.addCleanup(process.kill)
        self.wait_for_file("started")
        wait_until(lambda: any(r["status"] == "running" for r in self.runs()), 30,
                   what="the running row")
        return process, release


class NotUtf8Test(BadInputTest):
    def test_arguments_and_tag_values_that_are_not_utf8_reach_the_job_untouched(self):
        out = self.path("argv.bin")
        job = "import sys; open(sys.argv[1], 'wb').write(sys.argv[2].encode('utf-8', 'surrogateescape'))"
        raw = b"caf\xe9-\xff\xfe"
        result = self.run_bytes(UNDER_BUDGET + [b"--tag", b"note=" + raw, "--status-file",
                                                self.path("s.json"), "--", "python3", "-c", job,
                                                out, raw])
        self.assertEqual(result.returncode, 0, result.stderr)
        with open(out, "rb") as f:
            self.assertEqual(f.read(), raw)
        # JSON must be UTF-8: each byte that is not becomes U+FFFD.
        status = self.read_json("s.json")
        self.assertEqual(status["status"], "succeeded")
        row = self.runs()[0]
        command = json.loads(row["command"])
        self.assertEqual(command[-1], "caf\ufffd-\ufffd\ufffd")
        self.assertEqual(json.loads(row["tags"])["note"], "caf\ufffd-\ufffd\ufffd")

    def test_names_with_bad_bytes_or_control_characters_are_refused(self):
        before = self.first_run()
        ran = self.path("ran")
        cases = [(["--team", b"vis\xffion"], b"--team", b"not valid UTF-8"),
                 (["--experiment", "a\x1b[2Jb"], b"--experiment", b"holds a control character"),
                 (["--project", "p\tq"], b"--project", b"holds a control character"),
                 (["--tag", b"k\xfe=v"], b"--tag", b"not valid UTF-8")]
        for flags, flag, why in cases:
            with self.subTest(flag=flag):
                result = self.run_bytes(UNDER_BUDGET + flags + ["--", "touch", ran])
                self.assertEqual(result.returncode, 125, result.stderr)
                self.assertIn(flag, result.stderr)
                self.assertIn(why, result.stderr)
                self.assertNotIn(b"\x1b", result.stderr)  # the name is quoted escaped
                self.assertFalse(os.path.exists(ran))
        self.assertEqual(self.recorded(), before)

    def test_ps_json_survives_a_row_that_is_not_utf8(self):
        process, release = self.start_waiting_job(["--team", "vision"])
        # A row written by another (older, or hand-edited) client: bytes that are not UTF-8.
        connection = sqlite3.connect(self.ledger_file(), timeout=30)
        with connection:
            connection.execute("UPDATE runs SET experiment = CAST(? AS TEXT)", (b"exp\xff",))
        connection.close()
        result = self.run_bytes(["ps", "--json"])
        self.assertEqual(result.returncode, 0, result.stderr)
        rows = json.loads(result.stdout.decode("utf-8"))
        self.assertEqual(rows[0]["experiment"], "exp\ufffd")
        open(release, "w").close()
        self.assertEqual(process.wait(timeout=30), 0)


class TerminalEscapesTest(BadInputTest):
    def test_ps_and_budgets_escape_control_characters_from_other_rows(self):
        process, release = self.start_waiting_job(["--team", "vision"])
        hostile = "\x1b]0;pwned\x07\x1b[2J\x9b"
        connection = sqlite3.connect(self.ledger_file(), timeout=30)
        with connection:
            connection.execute("UPDATE runs SET team = ?, host = ?", (hostile, hostile))
        connection.close()
        result = self.run_bytes(["ps"])
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertNotIn(b"\x1b", result.stdout)
        self.assertNotIn(b"\x07", result.stdout)
        self.assertNotIn("\x9b".encode(), result.stdout)
        self.assertIn(b"\\e]0;pwned\\x07", result.stdout)
        open(release, "w").close()
        self.assertEqual(process.wait(timeout=30), 0)

    def test_stop_reason_and_scope_are_escaped(self):
        result = self.run_bytes(["stop", "--team", "a\x1b[2J", "--reason", "x"])
        self.assertEqual(result.returncode, 125)
        self.assertIn(b"--team a\\e[2J: holds a control character", result.stderr)


class NonRegularFilesTest(BadInputTest):
    def test_a_fifo_policy_is_refused_at_once(self):
        fifo = self.path("policy.fifo")
        os.mkfifo(fifo)
        for args in (["policy", "check", fifo],
                     ["run", "--policy", fifo, "--rate", "1", "--budget", "1", "--", "true"]):
            with self.subTest(args=args[0]):
                result = self.run_spendcap(args, timeout=30)
                self.assertEqual(result.returncode, 125, result.stderr)
                self.assertIn(fifo + ": is a FIFO, not a regular file", result.stderr)

    def test_a_device_policy_is_refused(self):
        result = self.run_spendcap(["policy", "check", "/dev/zero"], timeout=30)
        self.assertEqual(result.returncode, 125, result.stderr)
        self.assertIn("/dev/zero: is a character device, not a regular file", result.stderr)

    def test_a_stop_signal_ends_a_wait_on_a_locked_ledger(self):
        before = self.first_run()
        ran = self.path("ran")
        holder = sqlite3.connect(self.ledger_file(), timeout=30, isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")  # the write lock, held until rollback
        try:
            process = self.start_spendcap(UNDER_BUDGET + ["--", "touch", ran])

            def setup_blocks_sigterm():
                try:
                    with open("/proc/%d/status" % process.pid) as f:
                        for line in f:
                            if line.startswith("SigBlk:"):
                                return int(line.split()[1], 16) & (1 << (signal.SIGTERM - 1))
                except OSError:
                    return False
                return False

            wait_until(setup_blocks_sigterm, 30, what="spendcap to block its stop signals")
            sent = time.monotonic()
            process.send_signal(signal.SIGTERM)
            # The lock timeout is 10 s: the wait must end well before it.
            _, stderr = process.communicate(timeout=8)
            self.assertLess(time.monotonic() - sent, 8)
            self.assertEqual(process.returncode, -signal.SIGTERM, stderr)
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        self.assertFalse(os.path.exists(ran))
        self.assertEqual(self.recorded(), before)


class NumbersTest(BadInputTest):
    def test_a_reserve_that_would_overflow_is_refused_naming_the_flags(self):
        before = self.first_run()
        ran = self.path("ran")
        result = self.run_spendcap(["run", "--rate", "1000000000000", "--grace", "5000h",
                                    "--budget", "10", "--", "touch", ran])
        self.assertEqual(result.returncode, 125, result.stderr)
        self.assertIn("spendcap: --rate 1000000000000 --grace 5000h: ", result.stderr)
        self.assertIn("beyond the largest amount", result.stderr)
        self.assertFalse(os.path.exists(ran))
        self.assertEqual(self.recorded(), before)

    def test_durations_take_each_unit_once_largest_first(self):
        before = self.first_run()
        for text, why in (("1h1h", "gives the unit h twice"),
                          ("5m1h", "gives h after the smaller unit m")):
            with self.subTest(grace=text):
                result = self.run_spendcap(UNDER_BUDGET + ["--grace", text, "--", "true"])
                self.assertEqual(result.returncode, 125, result.stderr)
                self.assertIn("--grace %s: %s" % (text, why), result.stderr)
        result = self.run_spendcap(UNDER_BUDGET + ["--grace", "1h30m", "--", "true"])
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(len(self.recorded()), len(before) + 1)

    def test_a_json_number_out_of_range_names_the_file_and_path(self):
        policy = self.path("huge.json")
        with open(policy, "w") as f:
            f.write('{"rates": {"gpu": {"a100": {"on_demand": 1e999}}}}')
        result = self.run_spendcap(["policy", "check", policy])
        self.assertEqual(result.returncode, 125, result.stderr)
        self.assertIn(policy, result.stderr)
        self.assertIn("/rates/gpu/a100/on_demand: number overflow", result.stderr)
        self.assertNotIn("internal error", result.stderr)


class CheckpointSignalTest(BadInputTest):
    def test_a_signal_ignored_by_default_is_warned_about(self):
        result = self.run_spendcap(UNDER_BUDGET + ["--checkpoint-signal", "SIGWINCH", "--", "true"])
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("checkpoint signal SIGWINCH: ignored by default", result.stderr)


class StatusFileSymlinkTest(BadInputTest):
    def test_a_symlink_at_the_status_path_is_replaced_not_followed(self):
        victim = self.path("victim")
        with open(victim, "w") as f:
            f.write("precious")
        status = self.path("s.json")
        os.symlink(victim, status)
        result = self.run_spendcap(UNDER_BUDGET + ["--status-file", status, "--", "true"])
        self.assertEqual(result.returncode, 0, result.stderr)
        with open(victim) as f:
            self.assertEqual(f.read(), "precious")
        self.assertFalse(os.path.islink(status))
        self.assertEqual(self.read_json("s.json")["status"], "succeeded")

    def test_symlinks_planted_at_temporary_names_are_never_used(self):
        # The writer's temporaries are .<name>.tmp-<random>, opened O_CREAT|O_EXCL|O_NOFOLLOW: a
        # planted name is never opened through. Plant many, and check every target is untouched.
        victim = self.path("victim")
        with open(victim, "w") as f:
            f.write("precious")
        planted = []
        for i in range(64):
            name = self.path(".s.json.tmp-planted%02d" % i)
            os.symlink(victim, name)
            planted.append(name)
        os.symlink(victim, self.path(".s.json.tmp-"))
        result = self.run_spendcap(UNDER_BUDGET + ["--status-file", self.path("s.json"), "--",
                                                   "true"])
        self.assertEqual(result.returncode, 0, result.stderr)
        with open(victim) as f:
            self.assertEqual(f.read(), "precious")
        for name in planted:
            self.assertTrue(os.path.islink(name))
        self.assertEqual(self.read_json("s.json")["status"], "succeeded")
        leftovers = [n for n in os.listdir(self.tmp)
                     if n.startswith(".s.json.tmp-") and not os.path.islink(self.path(n))]
        self.assertEqual(leftovers, [])


if __name__ == "__main__":
    import unittest
    unittest.main()


class CorruptLedgerTest(BadInputTest):
    """A corrupt ledger is an error for every command, never an empty answer."""

    def test_every_command_refuses_a_corrupt_ledger(self):
        self.first_run()
        path = self.ledger_file()
        with sqlite3.connect(path) as db:  # everything into the main file, then damage it
            db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        with open(path, "r+b") as f:
            f.seek(4096)  # past the header page: the schema and runs pages
            f.write(b"garbage" * 2000)
        for suffix in ("-wal", "-shm"):
            if os.path.exists(path + suffix):
                os.unlink(path + suffix)
        for args in (["ps"], ["ps", "--json"], ["budgets"], ["stop", "--team", "earlier"],
                     UNDER_BUDGET + ["--", "true"]):
            with self.subTest(args=args):
                result = self.run_spendcap(args)
                self.assertEqual(result.returncode, 125, result.stdout + result.stderr)
                self.assertIn("malformed", result.stderr)
                self.assertNotIn("no running or lost runs", result.stdout)


class KeysWithoutEffectTest(BadInputTest):
    """Nothing accepted that does nothing: a key that is validated but not acted on yet is said."""

    # The stall and idle-GPU guards and measured billing act now (issues 10 and 8).
    POLICY = {"guards": {"idle_gpu": {"for": "20m"}}, "metrics_dir": "/tmp",
              "defaults": {"billing": "measured"}}

    def test_policy_check_and_the_run_say_which_keys_do_nothing_yet(self):
        self.write_policy(self.POLICY)
        check = self.run_spendcap(["policy", "check", self.path("spendcap.json")])
        self.assertEqual(check.returncode, 0, check.stderr)
        self.assertIn("/metrics_dir: has no effect yet", check.stdout)
        for key in ("/guards/idle_gpu", "/defaults/billing"):
            self.assertNotIn(key + ":", check.stdout)
        run = self.run_spendcap(UNDER_BUDGET + ["--", "true"])
        self.assertEqual(run.returncode, 0, run.stderr)
        self.assertIn("spendcap: policy /metrics_dir: has no effect yet", run.stderr)
        self.assertNotIn("/defaults/billing", run.stderr)

    def test_a_policy_of_working_keys_gets_no_such_line(self):
        self.write_policy({"defaults": {"grace": "30s", "billing": "allocated"}})
        check = self.run_spendcap(["policy", "check", self.path("spendcap.json")])
        self.assertEqual(check.returncode, 0, check.stderr)
        self.assertNotIn("no effect", check.stdout)
