"""Helpers for the integration tests: they run the real spendcap binary on real process trees.

Processes are found by a marker in their environment (/proc/PID/environ), so a test sees every
process of its tree wherever it went (setsid, double fork). PID 1 on these machines does not reap:
a killed orphan may linger as a zombie, so "alive" means present and not in state Z or X.
Nothing sleeps a fixed time: wait_until polls with a bound.
With isolation (the default) the job runs in its own PID namespace: the pids a fixture reports are
the namespace's own. host_pid / read_roles turn them into the host's pids, through the NSpid line
of the marked processes' /proc/PID/status.
"""
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import unittest
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
FIXTURES = os.path.join(REPO, "tests", "fixtures")
SPENDCAP = os.environ.get("SPENDCAP_BIN") or os.path.join(REPO, "build", "spendcap")
MARKER_VARIABLE = "SPENDCAP_TEST_MARKER"


def free_port():
    """A TCP port on 127.0.0.1 that nothing listens on (a moment ago): for a server the test
    starts, or as a port where nothing answers."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(predicate, timeout, interval=0.01, what="the condition"):
    """Polls `predicate` until it returns something true; fails after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError("timed out after %.1fs waiting for %s" % (timeout, what))
        time.sleep(interval)


def proc_state(pid):
    if pid is None:
        return None
    try:
        with open("/proc/%d/stat" % pid, "rb") as f:
            text = f.read()
    except OSError:
        return None
    return chr(text[text.rindex(b")") + 2])


def alive(pid):
    return proc_state(pid) not in (None, "Z", "X")


def children_of(pid):
    """The pids whose parent is `pid` (one scan of /proc: some kernels have no children files)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open("/proc/%s/stat" % entry, "rb") as f:
                    text = f.read()
                if int(text[text.rindex(b")") + 2:].split()[1]) == pid:
                    found.append(int(entry))
            except (OSError, ValueError, IndexError):
                pass
    return found


def processes_with_marker(marker):
    """Live pids whose environment holds SPENDCAP_TEST_MARKER=marker."""
    needle = ("%s=%s" % (MARKER_VARIABLE, marker)).encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/environ" % entry, "rb") as f:
                environ = f.read().split(b"\0")
        except OSError:
            continue
        if needle in environ and alive(int(entry)):
            found.append(int(entry))
    return found


def host_pid(marker, pid):
    """The host's pid of the live marked process that is `pid` in its own PID namespace (the
    same pid without isolation); None when there is none (it is gone)."""
    for candidate in processes_with_marker(marker):
        try:
            with open("/proc/%d/status" % candidate) as f:
                for line in f:
                    if line.startswith("NSpid:") and int(line.split()[-1]) == pid:
                        return candidate
        except (OSError, ValueError):
            pass
    return None


def kill_marked(marker):
    for pid in processes_with_marker(marker):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


class SpendcapTest(unittest.TestCase):
    """A fresh home for each test: its own ledger, spool, config and TMPDIR, and a marker."""

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="spendcap-test-")
        self.marker = uuid.uuid4().hex
        self.env = {k: v for k, v in os.environ.items()
                    if not k.startswith("SPENDCAP_") or k == "SPENDCAP_BIN"}
        for name in ("data", "state", "config", "tmp"):
            os.mkdir(os.path.join(self.tmp, name))
        self.env.update({
            "XDG_DATA_HOME": os.path.join(self.tmp, "data"),
            "XDG_STATE_HOME": os.path.join(self.tmp, "state"),
            "XDG_CONFIG_HOME": os.path.join(self.tmp, "config"),
            "TMPDIR": os.path.join(self.tmp, "tmp"),
            MARKER_VARIABLE: self.marker,
        })
        self.addCleanup(self._cleanup)

    def _cleanup(self):
        kill_marked(self.marker)
        shutil.rmtree(self.tmp, ignore_errors=True)

    def path(self, name):
        return os.path.join(self.tmp, name)

    def spendcap_env(self, extra=None):
        env = dict(self.env)
        env.update(extra or {})
        return env

    def run_ok(self, args, code=0):
        """run_spendcap, asserting its exit status (0 unless `code`)."""
        result = self.run_spendcap(args)
        self.assertEqual(result.returncode, code, result.stderr)
        return result

    def run_spendcap(self, args, extra_env=None, timeout=120):
        """Runs `spendcap ARGS` to its end; returns a CompletedProcess with text stdout/stderr.
        Output goes through files, not pipes: a process that escaped the tree (the negative
        controls) would otherwise hold the pipes open and the test would wait for it."""
        out_path, err_path = self.path("spendcap.out"), self.path("spendcap.err")
        with open(out_path, "w") as out, open(err_path, "w") as err:
            completed = subprocess.run([SPENDCAP] + list(args), env=self.spendcap_env(extra_env),
                                       cwd=self.tmp, stdout=out, stderr=err, timeout=timeout)
        with open(out_path) as out, open(err_path) as err:
            completed.stdout, completed.stderr = out.read(), err.read()
        return completed

    def start_spendcap(self, args, extra_env=None, **kwargs):
        kwargs.setdefault("stdout", subprocess.PIPE)
        kwargs.setdefault("stderr", subprocess.PIPE)
        return subprocess.Popen([SPENDCAP] + list(args), env=self.spendcap_env(extra_env),
                                cwd=self.tmp, text=True, **kwargs)

    def read_json(self, name):
        with open(self.path(name)) as f:
            return json.load(f)

    def host_pid(self, pid):
        return host_pid(self.marker, pid)

    def read_roles(self, name):
        """A fixture's {role: pid} file with the host's pids (None for processes already gone)."""
        return {role: self.host_pid(pid) for role, pid in self.read_json(name).items()}

    def wait_for_file(self, name, timeout=30):
        return wait_until(lambda: os.path.exists(self.path(name)), timeout,
                          what="the file %s" % name)

    def assert_tree_gone(self, timeout=5.0):
        """Every process of the test's tree is gone (zombies do not count) within `timeout`."""
        wait_until(lambda: not processes_with_marker(self.marker), timeout,
                   what="every marked process to be gone")

    def tree_args(self, extra=()):
        return ["--", "python3", os.path.join(FIXTURES, "tree.py"), "--ready", self.path("ready"),
                "--checkpoint", self.path("checkpoint")] + list(extra)


def cgroup_v2_writable():
    """Whether spendcap can give a run its own cgroup here (as root, with cgroup v2 mounted)."""
    if os.geteuid() != 0:
        return False
    try:
        with open("/proc/self/mountinfo") as f:
            return any(" - cgroup2 " in line for line in f)
    except OSError:
        return False


class LedgerTest(SpendcapTest):
    """A test with a policy file (./spendcap.json in the test's directory) and the ledger it fills."""

    def write_policy(self, policy, name="spendcap.json"):
        with open(self.path(name), "w") as f:
            json.dump(policy, f)
        return self.path(name)

    def ledger_file(self):
        return os.path.join(self.tmp, "data", "spendcap", "ledger.db")

    def runs(self, where="1=1", params=()):
        """Rows of the ledger's runs table, as dicts (read-only: the test checks, spendcap writes).
        Empty while the ledger does not exist yet or has no tables yet (spendcap is creating it)."""
        import sqlite3
        if not os.path.exists(self.ledger_file()):
            return []
        connection = sqlite3.connect("file:%s?mode=ro" % self.ledger_file(), uri=True, timeout=30)
        connection.row_factory = sqlite3.Row
        try:
            return [dict(row) for row in connection.execute(
                "SELECT * FROM runs WHERE %s ORDER BY started_at" % where, params)]
        except sqlite3.OperationalError as error:
            if "no such table" in str(error):
                return []
            raise
        finally:
            connection.close()

    def spendcap_json(self, args):
        result = self.run_spendcap(list(args) + ["--json"])
        self.assertEqual(result.returncode, 0, result.stderr)
        return json.loads(result.stdout)


def user_tool(argv, run=None, timeout=30):
    """Runs a useradd/groupadd/usermod ARGV (through RUN, a subprocess.run-like callable; default
    subprocess.run with its output captured) until it succeeds or fails for another reason than
    a lock: another test's useradd may hold /etc/passwd's or /etc/group's lock a moment (seen
    through an /etc overlay too, whose lower layer is the host's /etc). Bounded by TIMEOUT
    seconds; returns the last CompletedProcess."""
    run = run or (lambda a: subprocess.run(a, capture_output=True, text=True))
    result = None

    def done():
        nonlocal result
        result = run(argv)
        return result.returncode == 0 or "lock" not in (result.stderr or "")

    try:
        wait_until(done, timeout, interval=0.2, what=" ".join(argv[:1]) + " without a lock")
    except AssertionError:
        pass  # the caller asserts on the result, which names the lock
    return result


def add_home_users(test, parent, prefix, count):
    """Creates COUNT ordinary users named PREFIX + a random suffix, each with its own group and a
    home under PARENT, removed at TEST's cleanup; returns their names."""
    names = []
    for _ in range(count):
        name = prefix + uuid.uuid4().hex[:12 - len(prefix)]
        home = os.path.join(parent, name)
        made = user_tool(["useradd", "--create-home", "--home-dir", home, "--user-group", name])
        test.assertEqual(made.returncode, 0, made.stderr)
        test.addCleanup(subprocess.run, ["userdel", name], capture_output=True)
        test.addCleanup(subprocess.run, ["groupdel", name], capture_output=True)
        names.append(name)
    return names


def why_no_ordinary_user():
    """None where a test can create an ordinary user and run spendcap as it (root, useradd,
    setpriv); else why not."""
    if os.geteuid() != 0:
        return "needs root to create an ordinary user"
    missing = [tool for tool in ("useradd", "userdel", "setpriv") if not shutil.which(tool)]
    return "missing tools: " + ", ".join(missing) if missing else None


class UserLedgerTest(LedgerTest):
    """A LedgerTest whose spendcap runs as an ordinary user created for the test (as the shared
    runner's tests create theirs): the test's directory, its ledger and its home are the user's.
    The test itself stays root (it reads the ledger, waits for processes)."""

    def setUp(self):
        super().setUp()
        self.user = "sc" + uuid.uuid4().hex[:10]
        made = user_tool(["useradd", "--no-create-home", "--user-group", self.user])
        self.assertEqual(made.returncode, 0, made.stderr)
        self.addCleanup(subprocess.run, ["groupdel", self.user], capture_output=True)
        self.addCleanup(subprocess.run, ["userdel", self.user], capture_output=True)
        import pwd
        entry = pwd.getpwnam(self.user)
        self.uid, self.gid = entry.pw_uid, entry.pw_gid
        os.chmod(self.tmp, 0o755)
        for root, dirs, files in os.walk(self.tmp):
            for name in [root] + [os.path.join(root, n) for n in dirs + files]:
                os.chown(name, self.uid, self.gid)
        self.env["HOME"] = self.tmp
        self.env["USER"] = self.env["LOGNAME"] = self.user
        self.env["PATH"] = "/usr/local/bin:/usr/bin:/bin"  # root's own (pyenv) are not the user's

    def as_user(self, argv):
        return ["setpriv", "--reuid", self.user, "--regid", self.user, "--init-groups", "--"] + \
            list(argv)

    def write_policy(self, policy, name="spendcap.json"):
        path = super().write_policy(policy, name)
        os.chown(path, self.uid, self.gid)
        return path

    def run_spendcap(self, args, extra_env=None, timeout=120):
        out_path, err_path = self.path("spendcap.out"), self.path("spendcap.err")
        with open(out_path, "w") as out, open(err_path, "w") as err:
            for path in (out_path, err_path):
                os.chown(path, self.uid, self.gid)
            completed = subprocess.run(self.as_user([SPENDCAP] + list(args)),
                                       env=self.spendcap_env(extra_env), cwd=self.tmp, stdout=out,
                                       stderr=err, timeout=timeout)
        with open(out_path) as out, open(err_path) as err:
            completed.stdout, completed.stderr = out.read(), err.read()
        return completed

    def start_spendcap(self, args, extra_env=None, **kwargs):
        kwargs.setdefault("stdout", subprocess.PIPE)
        kwargs.setdefault("stderr", subprocess.PIPE)
        return subprocess.Popen(self.as_user([SPENDCAP] + list(args)),
                                env=self.spendcap_env(extra_env), cwd=self.tmp, text=True,
                                **kwargs)
