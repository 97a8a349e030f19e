"""The privileged shared runner against its users (issue 19, item 1): with the install from
scripts/install-shared-runner.sh, three unprivileged users' jobs, and other processes of theirs,
cannot stop, kill, freeze or outlive enforcement; the job runs as the user with the user's
environment; the paths a user names are opened with the user's rights; and the user's own ways
out (kill of the front, `timeout`, Ctrl-C) still end the run. Each attack is paired with a
negative control on the setgid-only layout (--setgid-only), where it succeeds.

Needs what test_shared_runner needs (root, useradd, setpriv, nsenter, mount namespaces), plus a
writable cgroup v2 hierarchy."""
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import unittest

import test_shared_runner as shared
from spendcap_testlib import wait_until

BUDGET = 0.08  # at $36/h: the trip comes about 5 s after the launch (reserve 3 s)
LOCKED = {
    "locked": True,
    "ledger": "set by the install",
    "rates": {"gpu": {"a100-80gb": {"on_demand": 36.0}}},
    "defaults": {"gpu": "a100-80gb", "gpus": 1, "grace": "1s", "kill_after": "1s",
                 "grace_on_signal": "1s", "kill_after_on_signal": "1s"},
    "budgets": {"team": {"vision": {"amount": 100, "period": "month", "max_run": 10}}},
}

# SIGSTOP or SIGKILL everything named spendcap it can see: its parent chain and every process of
# /proc; a TERM-ignoring setsid child first, to outlive the run if it can. Writes what it hit,
# then, if still alive well past the budget's trip, the marker.
ATTACKER = r"""
import json, os, signal, sys, time
action, marker = sys.argv[1], sys.argv[2]
NAME = "spend" + "cap"
with open("/proc/self/cmdline", "rb") as f:
    OWN = f.read()  # its own forked child has it too (the marker's path may hold the name)
if os.fork() == 0:
    os.setsid()
    for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(s, signal.SIG_IGN)
    time.sleep(3600)
    os._exit(0)

def ppid(pid):
    try:
        with open("/proc/%d/status" % pid) as f:
            return int([l.split()[1] for l in f if l.startswith("PPid:")][0])
    except (OSError, IndexError, ValueError):
        return 0

def named_spendcap(pid):
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            command = f.read()
        with open("/proc/%d/comm" % pid) as f:
            comm = f.read()
    except OSError:
        return False
    return command != OWN and (NAME.encode() in command or NAME in comm)

targets, pid = set(), os.getpid()
while pid > 1:
    pid = ppid(pid)
    if pid > 1:
        targets.add(pid)
targets |= {int(p) for p in os.listdir("/proc") if p.isdigit() and named_spendcap(int(p))}
targets.discard(os.getpid())
hits = {}
for target in sorted(targets):
    try:
        os.kill(target, getattr(signal, "SIG" + action))
        hits[target] = "signalled"
    except OSError as error:
        hits[target] = error.strerror
with open(marker + ".hits", "w") as f:
    json.dump(hits, f)
time.sleep(12)
with open(marker, "w") as f:
    f.write("outlived the budget")
time.sleep(3600)
"""

HUNTER = ATTACKER.split("targets, pid")[0].split("def ppid")[0].replace(
    "if os.fork() == 0:", "if False:") + r"""
def named_spendcap(pid):
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            command = f.read()
            return command != OWN and NAME.encode() in command
    except OSError:
        return False
hits = {}
for pid in sorted(int(p) for p in os.listdir("/proc") if p.isdigit()):
    if pid != os.getpid() and named_spendcap(pid):
        try:
            os.kill(pid, getattr(signal, "SIG" + action))
            hits[pid] = "signalled"
        except OSError as error:
            hits[pid] = error.strerror
print(json.dumps(hits))
"""

# The job's view of itself: ids, groups, capabilities, the variables the test set.
REPORTER = r"""
import json, os, sys
status = dict(l.rstrip("\n").split(":\t", 1) for l in open("/proc/self/status") if ":\t" in l)
report = {"resuid": list(os.getresuid()), "resgid": list(os.getresgid()),
          "groups": sorted(os.getgroups()), "CapEff": status["CapEff"], "CapBnd": status["CapBnd"],
          "NoNewPrivs": status["NoNewPrivs"],
          "env": {k: os.environ.get(k) for k in sys.argv[2:]}}
with open(sys.argv[1], "w") as f:
    json.dump(report, f)
"""


def user_processes(uid):
    """Live (not zombie) processes of `uid`, host-wide."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/status" % entry) as f:
                fields = dict(l.rstrip("\n").split(":\t", 1) for l in f if ":\t" in l)
        except OSError:
            continue
        if fields.get("State", "").startswith("Z"):
            continue
        if int(fields["Uid"].split()[0]) == uid:
            found.append(int(entry))
    return found


def cgroup_v2_writable():
    with open("/proc/self/mountinfo") as f:
        return any(" - cgroup2 " in line for line in f)


WHY_NOT = shared.WHY_NOT or (None if cgroup_v2_writable() else "no cgroup v2 hierarchy")


class RunnerCase(shared.SharedRunnerSetup):
    locked_policy = LOCKED
    user_count = 3

    def setUp(self):
        super().setUp()
        self.uids = {u: int(self.inside(["id", "-u", u]).stdout) for u in self.users}
        self.addCleanup(self.kill_leftovers)

    def kill_leftovers(self):
        for uid in self.uids.values():
            for pid in user_processes(uid):
                for sig in (signal.SIGCONT, signal.SIGKILL):
                    try:
                        os.kill(pid, sig)
                    except OSError:
                        pass

    def popen(self, user, args, extra=None, **kwargs):
        command = ["nsenter", "-t", str(self.holder.pid), "-m", "--", "setpriv", "--reuid", user,
                   "--regid", user, "--init-groups", self.bin] + list(args)
        process = subprocess.Popen(command, env=self.user_env(user, extra), cwd=self.tmp,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                   **kwargs)
        self.addCleanup(lambda: process.poll() is None and process.kill())
        return process

    def file(self, user, name):
        return os.path.join(self.tmp, user, name)

    def runs(self):
        rows = self.root_sql("SELECT user_name, status, reason, spend_micros, ceiling_micros "
                             "FROM runs ORDER BY started_at")
        return [r.split("|") for r in rows.splitlines() if r]

    def wait_running(self, user):
        wait_until(lambda: any(r[0] == user and r[1] == "running" for r in self.runs()), 30,
                   what="the run of " + user + " in the ledger")

    def run_args(self, status, job):
        # --verbose: the start line's details say which identity the supervisor and guard run as.
        return ["run", "--verbose", "--team", "vision", "--budget", str(BUDGET), "--status-file",
                status, "--"] + job


@unittest.skipIf(WHY_NOT, WHY_NOT or "")
class JobAttacksTest(RunnerCase):
    """A job that SIGSTOPs or SIGKILLs everything named spendcap it can see."""

    def attack(self, user, action):
        marker = self.file(user, "marker-" + action)
        status = self.file(user, "status-" + action + ".json")
        process = self.popen(user, self.run_args(status, ["python3", "-c", ATTACKER, action,
                                                          marker]))
        return process, marker, status

    def test_the_job_cannot_stop_or_kill_enforcement(self):
        for user, action in zip(self.users, ("STOP", "KILL", "STOP")):
            with self.subTest(user=user, action=action):
                process, marker, status = self.attack(user, action)
                out, err = process.communicate(timeout=60)
                self.assertEqual(process.returncode, 124, err)
                self.assertIn("supervisor and guard run as spendcap", err)
                self.assertFalse(os.path.exists(marker), "the job outlived its budget")
                with open(marker + ".hits") as f:
                    hits = json.load(f)
                self.assertNotIn("signalled", [v for k, v in hits.items() if k != "1"],
                                 "the job reached a process of spendcap: %s" % hits)
                with open(status) as f:
                    outcome = json.load(f)
                self.assertLessEqual(outcome["spend"], BUDGET)
                self.assertEqual(outcome["reason"], "budget:run")
                wait_until(lambda: not user_processes(self.uids[user]), 15,
                           what="nothing of the tree left")


@unittest.skipIf(WHY_NOT, WHY_NOT or "")
class SetgidOnlyNegativeControl(RunnerCase):
    """The same attacks on the setgid-only layout: they succeed, so the tests above can fail."""
    setgid_only = True

    def test_the_job_stops_enforcement_there(self):
        user = self.users[0]
        marker = self.file(user, "marker")
        process = self.popen(user, ["run", "--team", "vision", "--budget", str(BUDGET), "--",
                                    "python3", "-c", ATTACKER, "STOP", marker])
        wait_until(lambda: os.path.exists(marker), 40, what="the job past its budget")
        self.assertIsNone(process.poll(), "spendcap stopped the job after all")

    def test_another_process_of_the_user_stops_enforcement_there(self):
        user = self.users[0]
        process = self.popen(user, ["run", "--team", "vision", "--budget", str(BUDGET), "--",
                                    "sleep", "3600"])
        self.wait_running(user)
        hunt = self.inside(["python3", "-c", HUNTER, "STOP", "-"], user=user,
                           env=self.user_env(user))
        self.assertIn("signalled", hunt.stdout, hunt.stderr)
        time.sleep(0)  # (no wait: the check below polls)
        # Well past the trip (about 5 s), the run is still running: nothing enforces it.
        deadline = time.monotonic() + 12
        while time.monotonic() < deadline:
            self.assertEqual([r[1] for r in self.runs() if r[0] == user], ["running"])
            time.sleep(0.5)
        self.assertIsNone(process.poll())


@unittest.skipIf(WHY_NOT, WHY_NOT or "")
class OutsideAttacksTest(RunnerCase):
    """Another process of the same user, outside the tree."""

    def test_stopping_everything_named_spendcap_leaves_enforcement_running(self):
        user = self.users[1]
        status = self.file(user, "status.json")
        process = self.popen(user, self.run_args(status, ["sleep", "3600"]))
        self.wait_running(user)
        hunt = self.inside(["python3", "-c", HUNTER, "STOP", "-"], user=user,
                           env=self.user_env(user))
        hits = json.loads(hunt.stdout)
        # The user's own front stops (it is theirs); the runner's processes refuse.
        self.assertIn("Operation not permitted", hits.values(), hits)
        wait_until(lambda: [r[1] for r in self.runs() if r[0] == user] == ["killed"], 30,
                   what="the trip while the front is stopped")
        row = [r for r in self.runs() if r[0] == user][0]
        self.assertEqual(row[2], "budget:run")
        self.assertLessEqual(int(row[3]), int(BUDGET * 1e6))
        os.kill(process.pid, signal.SIGCONT)
        process.communicate(timeout=30)
        self.assertEqual(process.returncode, 124)
        wait_until(lambda: not user_processes(self.uids[user]), 15, what="nothing left")

    def test_killing_everything_named_spendcap_stops_the_run_as_the_user_may(self):
        user = self.users[2]
        status = self.file(user, "status.json")
        process = self.popen(user, self.run_args(status, ["sleep", "3600"]))
        self.wait_running(user)
        hunt = self.inside(["python3", "-c", HUNTER, "KILL", "-"], user=user,
                           env=self.user_env(user))
        self.assertIn("Operation not permitted", json.loads(hunt.stdout).values())
        process.communicate(timeout=30)
        self.assertEqual(process.returncode, -signal.SIGKILL)
        # The front's death is a SIGHUP to the run: recorded, not lost, and nothing outlives it.
        wait_until(lambda: [r[1] for r in self.runs() if r[0] == user] == ["killed"], 30,
                   what="the run stopped after its front died")
        # SIGHUP is a hangup (issue 30, item 5): ended by the user's side, as with Ctrl-C.
        self.assertEqual([r for r in self.runs() if r[0] == user][0][2], "hangup")
        wait_until(lambda: not user_processes(self.uids[user]), 15, what="nothing left")


PRELOAD_C = r"""
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
__attribute__((constructor)) static void note(void) {
    char exe[512] = {0};
    if (readlink("/proc/self/exe", exe, sizeof exe - 1) < 0) return;
    FILE *f = fopen(getenv("PRELOAD_NOTES") ? getenv("PRELOAD_NOTES") : "/dev/null", "a");
    if (f) { fprintf(f, "%d %d %s\n", (int)getuid(), (int)geteuid(), exe); fclose(f); }
}
"""


@unittest.skipIf(WHY_NOT, WHY_NOT or "")
class EnvironmentAndPathsTest(RunnerCase):
    def test_the_job_runs_as_the_user_with_the_users_environment(self):
        user = self.users[0]
        out = self.file(user, "report.json")
        extra = {"LD_LIBRARY_PATH": "/opt/cuda/lib64:/opt/conda/lib", "CUDA_HOME": "/opt/cuda",
                 "PATH": "/usr/local/bin:/usr/bin:/bin:/opt/conda/bin",
                 "GLIBC_TUNABLES": "glibc.malloc.tcache_count=0"}
        names = sorted(extra) + ["TMPDIR", "LD_PRELOAD"]
        compiler = shutil.which("cc") or shutil.which("gcc")
        notes = os.path.join(self.tmp, "preload-notes")
        if compiler:
            # A library whose constructor notes who loaded it: the runner (setuid, secure mode)
            # must not, the job must.
            source = os.path.join(self.tmp, "preload.c")
            with open(source, "w") as f:
                f.write(PRELOAD_C)
            library = os.path.join(self.tmp, "preload.so")
            subprocess.run([compiler, "-shared", "-fPIC", "-o", library, source], check=True)
            with open(notes, "w"):
                pass
            os.chmod(notes, 0o666)
            extra.update(LD_PRELOAD=library, PRELOAD_NOTES=notes)
        result = self.spendcap(user, ["run", "--team", "vision", "--budget", "1", "--",
                                      "python3", "-c", REPORTER, out] + names, extra=extra)
        self.assertEqual(result.returncode, 0, result.stderr)
        with open(out) as f:
            report = json.load(f)
        uid, gid = self.uids[user], int(self.inside(["id", "-g", user]).stdout)
        groups = sorted(int(g) for g in self.inside(["id", "-G", user]).stdout.split())
        self.assertEqual(report["resuid"], [uid] * 3)
        self.assertEqual(report["resgid"], [gid] * 3)
        self.assertEqual(report["groups"], groups)
        self.assertEqual(int(report["CapEff"], 16), 0, "the job holds capabilities")
        with open("/proc/self/status") as f:
            bounding = [l.split()[1] for l in f if l.startswith("CapBnd:")][0]
        self.assertEqual(report["CapBnd"], bounding, "the bounding set was cut (sudo breaks)")
        self.assertEqual(report["NoNewPrivs"], "0")
        expected = dict(extra, TMPDIR=self.user_env(user)["TMPDIR"])
        for name in names:
            self.assertEqual(report["env"][name], expected.get(name), name)
        if compiler:
            with open(notes) as f:
                loaded = [line.split(" ", 2) for line in f.read().splitlines()]
            self.assertFalse([l for l in loaded if l[2] == self.runner],
                             "the privileged runner loaded the caller's LD_PRELOAD: %s" % loaded)
            self.assertTrue([l for l in loaded if "python" in l[2] and l[1] == str(uid)],
                            "the job did not get LD_PRELOAD: %s" % loaded)

    def test_paths_the_user_cannot_write_are_refused_by_the_kernel(self):
        user = self.users[1]
        root_dir = os.path.join(self.tmp, "root-only")
        os.mkdir(root_dir, 0o755)
        root_file = os.path.join(root_dir, "policy.json")
        with open(root_file, "w") as f:
            json.dump({"defaults": {"grace": "1s"}}, f)
        os.chmod(root_file, 0o600)
        cases = {
            "--status-file": ["--status-file", os.path.join(root_dir, "status.json")],
            "--policy": ["--policy", root_file],
            "--log": ["--log", os.path.join(root_dir, "log")],
        }
        for name, flags in cases.items():
            with self.subTest(flag=name):
                result = self.spendcap(user, ["run", "--team", "vision", "--budget", "1"] +
                                       flags + ["--", "true"])
                self.assertEqual(result.returncode, 125, result.stderr)
                self.assertIn("Permission denied", result.stderr)
        with self.subTest(variable="TMPDIR"):
            result = self.spendcap(user, ["run", "--team", "vision", "--budget", "1", "--",
                                          "true"], extra={"TMPDIR": root_dir})
            self.assertEqual(result.returncode, 125, result.stderr)
            self.assertIn("Permission denied", result.stderr)
        self.assertEqual(sorted(os.listdir(root_dir)), ["policy.json"], "something was written")

    def test_the_progress_file_aimed_at_a_file_the_user_cannot_read_is_not_read(self):
        # The supervisor runs as the service user and reads $SPENDCAP_PROGRESS: a job that swaps it
        # for a symlink (or a hard link) to a file the user cannot read must get nothing read.
        user = self.users[1]
        root_dir = os.path.join(self.tmp, "root-progress")
        os.mkdir(root_dir, 0o755)
        secret = os.path.join(root_dir, "progress.jsonl")
        with open(secret, "w") as f:
            f.write('{"step": 4242}\n')
        os.chmod(secret, 0o600)
        job = ("import os, sys, time\n"
               "path, how = os.environ['SPENDCAP_PROGRESS'], sys.argv[2]\n"
               "if os.path.lexists(path): os.unlink(path)\n"
               "if how == 'write': open(path, 'w').write('{\"step\": 4242}\\n')\n"
               "else:\n"
               "    try: getattr(os, how)(sys.argv[1], path)\n"
               "    except OSError as e: print('refused:', e)\n"
               "time.sleep(3)\n")
        steps = {}
        for how in ("symlink", "link", "write"):  # "write": the negative control, read as usual
            status = self.file(user, "status-progress-%s.json" % how)
            result = self.spendcap(user, ["run", "--team", "vision", "--budget", "1",
                                          "--status-file", status, "--", "python3", "-c", job,
                                          secret, how])
            self.assertEqual(result.returncode, 0, result.stderr)
            with open(status) as f:
                steps[how] = json.load(f).get("progress", {}).get("step")
        self.assertEqual(steps, {"symlink": None, "link": None, "write": 4242})

    def test_the_users_policy_cannot_loosen_the_locked_one(self):
        user = self.users[2]
        looser = self.file(user, "looser.json")
        with open(looser, "w") as f:
            json.dump({"defaults": {"grace": "10m"},
                       "budgets": {"team": {"vision": {"amount": 100000, "period": "month"}}}}, f)
        for extra, flags in (({"SPENDCAP_POLICY": looser}, []), ({}, ["--policy", looser]),
                             ({}, ["--grace", "10m"]), ({}, ["--rate", "0.01"])):
            with self.subTest(extra=extra, flags=flags):
                result = self.spendcap(user, ["run", "--team", "vision", "--budget", "1"] +
                                       flags + ["--", "true"], extra=extra)
                self.assertEqual(result.returncode, 125, result.stderr)


@unittest.skipIf(WHY_NOT, WHY_NOT or "")
class UsersWaysOutTest(RunnerCase):
    def test_timeout_ends_the_run(self):
        user = self.users[0]
        started = time.monotonic()
        result = self.inside(["timeout", "5", self.bin, "run", "--team", "vision", "--budget", "5",
                              "--", "sleep", "60"], user=user, env=self.user_env(user))
        self.assertEqual(result.returncode, 124, result.stderr)
        self.assertLess(time.monotonic() - started, 30)
        self.assertNotIn("running", [r[1] for r in self.runs() if r[0] == user])
        wait_until(lambda: not user_processes(self.uids[user]), 15, what="nothing left")

    def terminal_shell(self, user):
        """An interactive bash of `user` on a new pty: (shell, master fd, expect(text), seen(text))."""
        import fcntl
        import pty
        import select
        import termios
        master, slave = pty.openpty()

        def session_with_terminal():
            os.setsid()
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)

        shell = subprocess.Popen(
            ["nsenter", "-t", str(self.holder.pid), "-m", "--", "setpriv", "--reuid", user,
             "--regid", user, "--init-groups", "bash", "--norc", "--noprofile", "-i"],
            stdin=slave, stdout=slave, stderr=slave, cwd=self.tmp,
            env=dict(self.user_env(user), PS1="$ ", TERM="dumb"),
            preexec_fn=session_with_terminal)
        os.close(slave)
        self.addCleanup(lambda: shell.poll() is None and shell.kill())
        output = b""

        def seen(text):
            nonlocal output
            while select.select([master], [], [], 0.05)[0]:
                try:
                    chunk = os.read(master, 4096)
                except OSError:
                    break
                if not chunk:
                    break
                output += chunk
            return text.encode() in output

        def expect(text):
            wait_until(lambda: seen(text), 30, what="%r on the terminal (got %r)" % (text, output))

        return shell, master, expect, seen

    def test_ctrl_c_ctrl_z_and_fg_in_a_terminal(self):
        user = self.users[1]
        shell, master, expect, seen = self.terminal_shell(user)
        os.write(master, (self.bin + " run --verbose --team vision --budget 5 -- sleep 60\n").encode())
        expect("supervisor and guard run as spendcap")
        os.write(master, b"\x1a")  # Ctrl-Z
        expect("Stopped")
        os.write(master, b"fg\n")
        expect("job resumed")
        os.write(master, b"\x03")  # Ctrl-C
        os.write(master, b"echo status=$?\n")
        expect("status=130")
        os.write(master, b"exit\n")
        shell.wait(timeout=30)
        self.assertNotIn("running", [r[1] for r in self.runs() if r[0] == user])

    def test_a_job_that_types_ctrl_z_into_its_terminal_still_ends_at_its_budget(self):
        # TIOCSTI (legacy_tiocsti on Debian 12's kernel) queues input as if typed: ^Z makes the
        # terminal send SIGTSTP to its foreground process group, a signal no uid check stops.
        # Whatever it reaches, the trip must come while everything is stopped.
        user = self.users[0]
        shell, master, expect, seen = self.terminal_shell(user)
        status = self.file(user, "status-tiocsti.json")
        typed = self.file(user, "typed")
        # It notes the ioctl's refusal; after a ^Z that reaches itself it notes nothing more.
        injector = ("import fcntl, termios, time; time.sleep(0.5); t = open('%s', 'w')\n"
                    "try: fcntl.ioctl(0, termios.TIOCSTI, b'\\x1a')\n"
                    "except OSError as e: t.write('refused: %%s' %% e)\n"
                    "t.close(); time.sleep(3600)" % typed)
        os.write(master, ("%s run --verbose --team vision --budget %s --status-file %s -- python3 -c \"%s\"\n"
                          % (self.bin, BUDGET, status, injector)).encode())
        expect("supervisor and guard run as spendcap")
        wait_until(lambda: [r[1] for r in self.runs() if r[0] == user] == ["killed"], 90,
                   what="the trip after the job typed ^Z")
        with open(typed) as f:
            refused = f.read()
        if refused:
            self.skipTest("this kernel refuses TIOCSTI (dev.tty.legacy_tiocsti = 0): " + refused)
        row = [r for r in self.runs() if r[0] == user][0]
        self.assertEqual(row[2], "budget:run")
        self.assertLessEqual(int(row[3]), int(BUDGET * 1e6))
        self.assertTrue(seen("job paused"), "the ^Z reached nothing")
        if seen("Stopped"):  # the ^Z reached the front's process group: the shell has it
            os.write(master, b"fg\n")
        os.write(master, b"echo status=$?\n")
        expect("status=124")
        os.write(master, b"exit\n")
        shell.wait(timeout=30)
        wait_until(lambda: not user_processes(self.uids[user]), 15, what="nothing left")

    def test_a_freeze_of_the_users_own_cgroup_does_not_stop_enforcement(self):
        user = self.users[2]
        with open("/proc/self/mountinfo") as f:
            mount = [l.split()[4] for l in f if " - cgroup2 " in l][0]
        own = os.path.join(mount, "spendcap-test-" + os.urandom(4).hex())
        os.mkdir(own)
        self.addCleanup(lambda: os.path.exists(own) and os.rmdir(own))
        subprocess.run(["chown", "-R", user, own], check=True)  # delegated to the user
        status = self.file(user, "status.json")
        command = ["nsenter", "-t", str(self.holder.pid), "-m", "--", "sh", "-c",
                   'echo $$ > "$0/cgroup.procs" && exec "$@"', own, "setpriv", "--reuid", user,
                   "--regid", user, "--init-groups", self.bin] + self.run_args(status,
                                                                               ["sleep", "3600"])
        process = subprocess.Popen(command, env=self.user_env(user), cwd=self.tmp,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.addCleanup(lambda: process.poll() is None and process.kill())
        self.wait_running(user)
        freeze = self.inside(["sh", "-c", 'echo 1 > "$0/cgroup.freeze"', own], user=user,
                             env=self.user_env(user))
        self.assertEqual(freeze.returncode, 0, freeze.stderr)
        wait_until(lambda: [r[1] for r in self.runs() if r[0] == user] == ["killed"], 30,
                   what="the trip while the user's cgroup is frozen")
        row = [r for r in self.runs() if r[0] == user][0]
        self.assertEqual(row[2], "budget:run")
        self.assertLessEqual(int(row[3]), int(BUDGET * 1e6))
        with open(os.path.join(own, "cgroup.freeze"), "w") as f:
            f.write("0")
        process.communicate(timeout=30)
        self.assertEqual(process.returncode, 124)


if __name__ == "__main__":
    unittest.main()
