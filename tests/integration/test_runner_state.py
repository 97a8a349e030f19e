"""The runner's state is the runner's (issue 29, items 1 and 2), with real users on the install
test_shared_runner.py makes:

- every subcommand other than `run` is a process of the service user (the runner's call): the
  caller cannot signal it (SIGSTOP included), it is out of the caller's cgroup, and only its
  filesystem uid is the caller's; so a user who stops their own `spendcap stop` delays nobody;
- a final row the ledger did not take is spooled in the runner's spool (root:GROUP 2770), which no
  user can read or replace; a row the user writes into their own spool is never replayed, and the
  replayed spend is the run's true spend (the break: a rewritten spooled row recorded $20.00 as
  $0.00 `succeeded`);
- the ledger's side files (-wal, -shm) are made by the install and stay root's, whoever's runs
  write the ledger; deleted (the owner's sqlite3 does, closing last), they come back the service
  user's with the ledger's group and mode, and runs start while the owner's sqlite3 reads.

- the setuid runner takes the caller's filesystem uid and drops every capability but the six its
  later steps use before it reads anything the caller wrote (issue 39, item 6): held by strace at
  its read of the front's environment memfd, it is root with the caller's fsuid and fsgid,
  CAP_SETUID, CAP_SETGID, CAP_SETPCAP, CAP_KILL and CAP_SYS_ADMIN effective, CAP_DAC_OVERRIDE
  permitted only, none inheritable or ambient, and the bounding set whole (the job's sudo). The
  negative control: the runner before the change (full root there) fails the same check.

Needs what test_shared_runner needs (root, useradd, setpriv, nsenter, mount namespaces); the runner's
rights case needs strace too."""
import json
import os
import platform
import random
import shutil
import subprocess
import threading
import time
import unittest

import test_ledger_trust as trust
import test_shared_runner as shared
from spendcap_testlib import wait_until


def proc_status(pid):
    fields = {}
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                key, _, value = line.partition(":")
                fields[key] = value.split()
    except FileNotFoundError:
        return None
    return fields


@unittest.skipIf(shared.WHY_NOT, shared.WHY_NOT or "")
class RunnerStateTest(trust.LedgerTrustTest):
    @property
    def spool(self):
        return os.path.join(self.ledger_dir, "spool")

    def as_user_python(self, user, code, *args):
        return self.inside(["python3", "-c", code] + list(args), user=user,
                           env=self.user_env(user))

    # ---- item 1: a user's commands are the runner's processes ----

    def test_a_users_command_is_a_process_the_user_cannot_stop(self):
        a = self.alice
        locker = self.hold_the_lock()
        command = self.start(a, [self.bin, "stop", "--user", a, "--reason", "mine"])
        # While it waits for the lock: the service user's process, the caller's filesystem uid.
        uid = int(self.inside(["id", "-u", a]).stdout)
        expected = [str(self.service_uid)] * 3 + [str(uid)]
        status = wait_until(lambda: (proc_status(command.pid) or {}).get("Uid") == expected and
                            proc_status(command.pid), 20,
                            what="the command as the service user, with the caller's fsuid")
        self.assertEqual(status["CapEff"], ["0000000000000000"])
        with open("/proc/%d/cgroup" % command.pid) as f:
            self.assertIn("/spendcap-runner", f.read())
        # Neither its user nor another can stop it.
        for user in (a, self.bob):
            kill = self.as_user_python(user, "import os, sys\ntry:\n os.kill(int(sys.argv[1]), "
                                       "19)\nexcept PermissionError:\n print('EPERM')",
                                       str(command.pid))
            self.assertEqual(kill.stdout.strip(), "EPERM", kill.stderr)
        locker.kill()
        locker.wait()
        out, err = command.communicate(timeout=60)
        self.assertEqual(command.returncode, 0, err)
        self.assertEqual(self.root_sql("SELECT count(*) FROM stop_orders WHERE scope_kind = 'user' "
                                       "AND scope_name = '%s'" % a), "1")

    def test_the_runners_commands_answer_as_the_plain_binary_does(self):
        a = self.alice
        for args in ([], ["--version"], ["help", "ps"], ["ps", "--json"]):
            shared_result = self.spendcap(a, args)
            plain = subprocess.run([shared.SPENDCAP] + args, capture_output=True, text=True,
                                   env=dict(self.user_env(a), SPENDCAP_LEDGER="sqlite:" +
                                            os.path.join(self.tmp, "plain.db")))
            self.assertEqual(shared_result.returncode, plain.returncode,
                             "%s: %s" % (args, shared_result.stderr))
            self.assertNotIn("runner's call", shared_result.stderr)
            if args != ["ps", "--json"]:
                self.assertEqual(shared_result.stdout, plain.stdout, args)
                self.assertEqual(shared_result.stderr, plain.stderr, args)

    def test_a_forged_runner_call_is_refused(self):
        a, b = self.alice, self.bob
        uid_b = self.inside(["id", "-u", b]).stdout.strip()
        for argv in ([self.bin, "--runner-call", uid_b, "stop", "--user", b],
                     [self.runner, "--runner-call", uid_b, "stop", "--user", b]):
            forged = self.inside(argv, user=a, env=self.user_env(a))
            self.assertNotEqual(forged.returncode, 0, forged.stdout)
        self.assertEqual(self.root_sql("SELECT count(*) FROM stop_orders"), "0")

    def test_a_stopped_command_delays_no_other_users_run(self):
        a, b = self.alice, self.bob
        rng = random.Random(29)
        for attempt in range(12):
            command = self.start(b, [self.bin, "stop", "--user", b, "--reason", "try"])
            time.sleep(rng.uniform(0, 0.05))  # a random moment, as the attack's
            stopped = self.as_user_python(b, "import os, sys\ntry:\n os.kill(int(sys.argv[1]), "
                                          "19)\n print('stopped')\nexcept (PermissionError, "
                                          "ProcessLookupError):\n print('refused')",
                                          str(command.pid))
            self.assertIn(stopped.stdout.strip(), ("stopped", "refused"), stopped.stderr)
            # A stop that landed hit the front before the runner's exec: it holds nothing. The
            # run fails with 125 if it waited out the 10 s busy timeout.
            run = self.spendcap(a, ["run", "--team", "open", "--budget", "1", "--", "true"])
            self.assertEqual(run.returncode, 0, "attempt %d (%s): %s" %
                             (attempt, stopped.stdout.strip(), run.stderr))
            command.kill()
            command.communicate(timeout=30)

    # ---- item 2: the spool is the runner's ----

    def test_a_spooled_row_is_the_runners_and_replayed_at_its_true_spend(self):
        a = self.alice
        run = self.start(a, [self.bin, "run", "--team", "open", "--budget", "30", "--sync", "1s",
                             "--", "sleep", "3"])
        wait_until(lambda: self.root_sql("SELECT count(*) FROM runs WHERE status = 'running'")
                   == "1", 30, what="the run in the ledger")
        locker = self.hold_the_lock()
        out, err = run.communicate(timeout=90)
        self.assertEqual(run.returncode, 0, err)
        self.assertIn("spooled in " + self.spool + "/", err)
        rows = [n for n in os.listdir(self.spool) if n.endswith(".json")]
        self.assertEqual(len(rows), 1, rows)
        row_path = os.path.join(self.spool, rows[0])
        info = os.stat(row_path)
        self.assertEqual((info.st_uid, oct(info.st_mode & 0o7777)), (self.service_uid, oct(0o640)),
                         "the spooled row is not the service user's own file")
        with open(row_path) as f:
            spooled = json.load(f)["final"]
        self.assertGreater(spooled["spend_micros"], 0)
        # Not in the user's own spool; and the user can neither read nor replace the runner's.
        own = os.path.join(self.tmp, a, "state", "spendcap", "spool")
        self.assertFalse(os.path.isdir(own) and os.listdir(own), "spooled in the user's home")
        for path in (row_path, self.spool):
            probe = self.as_user_python(a, "import os, sys\ntry:\n os.open(sys.argv[1], "
                                        "os.O_RDONLY)\n print('opened')\nexcept PermissionError:"
                                        "\n print('EACCES')", path)
            self.assertEqual(probe.stdout.strip(), "EACCES", probe.stderr)
        # The attack: a rewritten row (the last heartbeat's spend, `succeeded`) in the user's own
        # spool, where the runner used to put it.
        forged = dict(spooled, spend_micros=0, status="succeeded")
        forged_file = os.path.join(own, rows[0])
        write = self.as_user_python(a, "import json, os, sys\nos.makedirs(sys.argv[1], 0o700, "
                                    "exist_ok=True)\nos.chmod(sys.argv[1], 0o700)\nfd = os.open("
                                    "sys.argv[2], os.O_WRONLY | os.O_CREAT, 0o600)\nos.write(fd, "
                                    "sys.argv[3].encode())", own, forged_file,
                                    json.dumps({"ledger": "sqlite:" + self.ledger,
                                                "final": forged}))
        self.assertEqual(write.returncode, 0, write.stderr)
        locker.kill()
        locker.wait()
        ps = self.spendcap(a, ["ps"])
        self.assertEqual(ps.returncode, 0, ps.stderr)
        recorded = self.root_sql("SELECT status || ' ' || spend_micros FROM runs WHERE id = '%s'"
                                 % spooled["id"])
        self.assertEqual(recorded, "%s %d" % (spooled["status"], spooled["spend_micros"]))
        self.assertFalse(os.path.exists(row_path), "the runner's row was not replayed")
        self.assertTrue(os.path.exists(forged_file), "the user's own spool was read")

    def test_the_ledgers_side_files_stay_root_s(self):
        for user in self.users:
            run = self.spendcap(user, ["run", "--team", "open", "--budget", "1", "--", "true"])
            self.assertEqual(run.returncode, 0, run.stderr)
            ps = self.spendcap(user, ["ps"])
            self.assertEqual(ps.returncode, 0, ps.stderr)
        for name in ("ledger.db", "ledger.db-wal", "ledger.db-shm"):
            info = os.stat(os.path.join(self.ledger_dir, name))
            self.assertEqual((info.st_uid, oct(info.st_mode & 0o777)), (0, oct(0o660)), name)
        spool = os.stat(self.spool)
        self.assertEqual((spool.st_uid, oct(spool.st_mode & 0o7777)), (0, oct(0o2770)))

    def test_side_files_a_foreign_sqlite3_deleted_come_back_the_runners(self):
        # The owner's sqlite3 deletes both when it closes the ledger last (it keeps no WAL).
        for name in ("ledger.db-wal", "ledger.db-shm"):
            os.unlink(os.path.join(self.ledger_dir, name))
        for user in self.users:
            run = self.spendcap(user, ["run", "--team", "open", "--budget", "1", "--", "true"])
            self.assertEqual(run.returncode, 0, run.stderr)
        group = os.stat(self.ledger_dir).st_gid
        for name in ("ledger.db-wal", "ledger.db-shm"):
            info = os.stat(os.path.join(self.ledger_dir, name))
            # Not the first caller's (the supervisor's filesystem uid is the caller's).
            self.assertEqual((info.st_uid, info.st_gid, oct(info.st_mode & 0o777)),
                             (self.service_uid, group, oct(0o660)), name)

    def test_a_run_waits_out_a_side_file_still_being_made(self):
        # The moment the race leaves: a -shm another sqlite3 has created (umask 022: 0640) but not
        # yet given the ledger's mode. SQLite opens it read-only and says so only at a write.
        shm = os.path.join(self.ledger_dir, "ledger.db-shm")
        os.chmod(shm, 0o640)
        run = self.start(self.alice, [self.bin, "run", "--team", "open", "--budget", "1", "--",
                                      "true"])

        def holds_it_read_only():
            for pid in filter(str.isdigit, os.listdir("/proc")):
                try:
                    for fd in os.listdir("/proc/%s/fd" % pid):
                        if os.readlink("/proc/%s/fd/%s" % (pid, fd)) != shm:
                            continue
                        with open("/proc/%s/fdinfo/%s" % (pid, fd)) as info:
                            flags = int(info.read().split("flags:")[1].split()[0], 8)
                        if flags & os.O_ACCMODE == os.O_RDONLY:
                            return True
                except (OSError, IndexError):
                    continue
            return run.poll() is not None

        wait_until(holds_it_read_only, 8, what="the run holding the -shm read-only")
        ended = run.poll() is not None
        os.chmod(shm, 0o660)  # what the other sqlite3 does next
        out, err = run.communicate(timeout=60)
        self.assertFalse(ended, "the run ended on the read-only -shm: " + err)
        self.assertEqual(run.returncode, 0, out + err)

    def test_runs_start_while_the_owners_sqlite3_reads_the_ledger(self):
        # Each sqlite3 that closes the ledger last deletes the side files, and the next one
        # recreates them with its umask (0640) before it gives them the ledger's mode: a run that
        # opened them in between got them read-only ("attempt to write a readonly database", in
        # about 1 run in 80 here before the fix).
        done = threading.Event()
        reads = []

        def read_in_a_loop():
            while not done.is_set():
                reads.append(self.inside(["sqlite3", "-cmd", ".timeout 10000", self.ledger,
                                          "SELECT COUNT(*) FROM runs"]).returncode)

        reader = threading.Thread(target=read_in_a_loop)
        reader.start()
        failed = []
        try:
            for _ in range(40):
                for user in self.users:
                    run = self.spendcap(user, ["run", "--team", "open", "--budget", "1", "--",
                                               "true"])
                    if run.returncode != 0:
                        failed.append(run.stderr.strip())
        finally:
            done.set()
            reader.join()
        self.assertEqual(failed, [])
        self.assertGreater(len(reads), 40, "the reader hardly ran: the race was not tried")
        self.assertEqual(set(reads), {0})


# The runner's rights after acquire (src/runner/main.cpp kRunnerCaps), as /proc shows them.
CAPS = {"CAP_DAC_OVERRIDE": 1, "CAP_KILL": 5, "CAP_SETGID": 6, "CAP_SETUID": 7, "CAP_SETPCAP": 8,
        "CAP_SYS_ADMIN": 21}
RUNNER_PERMITTED = sum(1 << bit for bit in CAPS.values())
RUNNER_EFFECTIVE = RUNNER_PERMITTED & ~(1 << CAPS["CAP_DAC_OVERRIDE"])  # only while fsuid is 0
# The memfd as /proc (and strace's -P) names it.
MEMFD = "/memfd:spendcap-environment"
PREAD64 = {"x86_64": 17, "aarch64": 67}.get(platform.machine())


def held_at_the_memfd(runner):
    """The pid of RUNNER stopped by strace on its pread64 of the front's memfd, else None."""
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            if os.readlink("/proc/%s/exe" % entry) != runner:
                continue
            with open("/proc/%s/syscall" % entry) as f:
                call = f.read().split()
            if len(call) < 2 or (PREAD64 is not None and call[0] != str(PREAD64)):
                continue
            if os.readlink("/proc/%s/fd/%d" % (entry, int(call[1], 16))).startswith(MEMFD):
                return int(entry)
        except (OSError, ValueError):
            continue
    return None


@unittest.skipIf(shared.WHY_NOT, shared.WHY_NOT or "")
@unittest.skipUnless(shutil.which("strace"), "needs strace (it holds the runner at the memfd)")
class RunnerRightsTest(shared.SharedRunnerSetup):
    # ---- issue 39, item 6: the runner's rights from its first step ----

    def test_the_runner_reads_the_memfd_with_the_callers_fsuid_and_six_capabilities(self):
        user = self.users[0]
        uid = self.inside(["id", "-u", user]).stdout.strip()
        gid = self.inside(["id", "-g", user]).stdout.strip()
        # strace (root, so the runner's setuid bit holds) delays every pread64 of the memfd by 3 s:
        # the runner's, then the supervisor's. The run itself goes on as without it.
        run = subprocess.Popen(
            ["nsenter", "-t", str(self.holder.pid), "-m", "--", "strace", "-f", "-qq", "-o",
             "/dev/null", "-u", user, "-P", MEMFD, "-e", "trace=pread64", "-e",
             "inject=pread64:delay_enter=3000000", self.bin, "run", "--team", "vision",
             "--budget", "1", "--", "true"],
            env=self.user_env(user), cwd=self.tmp, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True)
        self.addCleanup(lambda: run.poll() is None and run.kill())
        pid = wait_until(lambda: held_at_the_memfd(self.runner) or run.poll() is not None, 30,
                         what="the runner held at its read of the memfd")
        if run.poll() is not None:
            self.fail("the run ended before the runner read the memfd: " + run.communicate()[1])
        status = proc_status(pid)
        self.assertIsNotNone(status, "the held runner is gone")
        # Root's uids (the runner's steps need them), the caller's filesystem uid and gid.
        self.assertEqual(status["Uid"], ["0", "0", "0", uid])
        self.assertEqual(status["Gid"][3], gid)
        self.assertEqual(int(status["CapPrm"][0], 16), RUNNER_PERMITTED,
                         "permitted %s, not %s" % (status["CapPrm"][0], hex(RUNNER_PERMITTED)))
        self.assertEqual(int(status["CapEff"][0], 16), RUNNER_EFFECTIVE,
                         "effective %s, not %s" % (status["CapEff"][0], hex(RUNNER_EFFECTIVE)))
        self.assertEqual(int(status["CapInh"][0], 16), 0)
        self.assertEqual(int(status["CapAmb"][0], 16), 0)
        with open("/proc/self/status") as f:
            bounding = [line.split()[1] for line in f if line.startswith("CapBnd:")][0]
        self.assertEqual(status["CapBnd"][0], bounding, "the bounding set was cut (the job's sudo)")
        out, err = run.communicate(timeout=120)
        self.assertEqual(run.returncode, 0, err)


# The inherited cases run in test_ledger_trust.py: here only this file's own.
for _name in [n for n in vars(trust.LedgerTrustTest) if n.startswith("test_")]:
    setattr(RunnerStateTest, _name, None)


if __name__ == "__main__":
    unittest.main()
