"""The shared runner (issue 7, item 2; issue 19, item 1): scripts/install-shared-runner.sh installs
the front (plain 0755) and the setuid runner, the service user `spendcap`, a ledger directory
root:spendcap 2770 and a locked policy naming it; two real users who are not in the group run jobs
within the team budget, yet neither they (sqlite3), nor their jobs, nor `budgets apply`, nor
`stop --clear` on the other's order can rewrite the ledger, and a budget row raised in the ledger
does not raise the amount in force. (test_shared_runner_attacks.py: what the privileged runner
adds, against the setgid-only layout as the negative control.)

Needs root, useradd, sqlite3, setpriv, nsenter and mount namespaces: /etc is overlaid in a private
mount namespace (held by one process, entered with nsenter), so the group and the locked policy
never reach the machine's /etc; the binary and the ledger live in the test's directory."""
import json
import os
import shutil
import subprocess
import tempfile
import unittest
import uuid

from spendcap_testlib import REPO, SPENDCAP, user_tool, wait_until

INSTALL = os.path.join(REPO, "scripts", "install-shared-runner.sh")
TOOLS = ("unshare", "nsenter", "setpriv", "useradd", "userdel", "sqlite3", "python3")


def why_not_here():
    if os.geteuid() != 0:
        return "needs root (useradd, setgid install, mount namespaces)"
    missing = [tool for tool in TOOLS if not shutil.which(tool)]
    if missing:
        return "missing tools: " + ", ".join(missing)
    probe = subprocess.run(["unshare", "--mount", "--propagation", "private", "true"],
                           capture_output=True)
    if probe.returncode != 0:
        return "no mount namespaces here: " + probe.stderr.decode().strip()
    return None


WHY_NOT = why_not_here()

LOCKED = {
    "locked": True,
    "ledger": "set by the install",
    "rates": {"gpu": {"a100-80gb": {"on_demand": 4.0}}},
    "defaults": {"gpu": "a100-80gb", "gpus": 1, "grace": "5s", "kill_after": "2s"},
    "budgets": {"team": {"vision": {"amount": 100, "period": "month", "max_run": 10}}},
}

# The job: what it can reach of the ledger, written as JSON for the test to read.
JOB = r"""
import json, os, sys
ledger, out = sys.argv[1], sys.argv[2]
report = {"resgid": list(os.getresgid()), "opened_rw": []}
try:
    open(ledger, "r+b").close(); report["opened_rw"].append(ledger)
except OSError as e:
    report["ledger_error"] = e.errno
for pid in os.listdir("/proc"):
    if not pid.isdigit():
        continue
    try:
        fds = os.listdir("/proc/%s/fd" % pid)
    except OSError:
        continue
    for fd in fds:
        link = "/proc/%s/fd/%s" % (pid, fd)
        try:
            target = os.readlink(link)
        except OSError:
            continue
        if os.path.basename(ledger) in target:
            try:
                open(link, "r+b").close(); report["opened_rw"].append(link)
            except OSError:
                pass
with open(out, "w") as f:
    json.dump(report, f)
"""



def hold_etc_overlay(case, tmp):
    """A process holding a private mount namespace with /etc overlaid (upper layer in TMP), so
    an install's users, groups and /etc/spendcap stay in it; ended by CASE's cleanup. Tests
    enter it with nsenter --mount --target holder.pid."""
    upper, work = os.path.join(tmp, "etc-upper"), os.path.join(tmp, "etc-work")
    os.mkdir(upper)
    os.mkdir(work)
    ready = os.path.join(tmp, "ns-ready")
    script = ('mount -t overlay overlay -o lowerdir=/etc,upperdir="$0",workdir="$1" /etc '
              '&& touch "$2" && exec sleep 3600')
    holder = subprocess.Popen(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                               script, upper, work, ready])
    case.addCleanup(holder.wait)
    case.addCleanup(holder.kill)
    wait_until(lambda: os.path.exists(ready) or holder.poll() is not None, 10,
               what="the mount namespace")
    case.assertIsNone(holder.poll(), "the /etc overlay could not be mounted")
    return holder

class SharedRunnerSetup(unittest.TestCase):
    """The runner without tests (test_user_view_admin reuses it with its own locked policy)."""
    locked_policy = LOCKED
    setgid_only = False  # the older layout (install-shared-runner.sh --setgid-only)
    user_count = 2

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="spendcap-shared-")
        os.chmod(self.tmp, 0o755)
        self.addCleanup(shutil.rmtree, self.tmp, True)
        self.users = []
        for _ in range(self.user_count):
            name = "sc" + uuid.uuid4().hex[:10]
            made = user_tool(["useradd", "--no-create-home", "--user-group", name])
            self.assertEqual(made.returncode, 0, made.stderr)
            self.addCleanup(subprocess.run, ["userdel", name], capture_output=True)
            self.addCleanup(subprocess.run, ["groupdel", name], capture_output=True)
            home = os.path.join(self.tmp, name)
            for sub in ("", "/tmp", "/state", "/data", "/config"):
                os.mkdir(home + sub)
            subprocess.run(["chown", "-R", name + ":" + name, home], check=True)
            self.users.append(name)
        # The private mount namespace, held by one process: /etc overlaid.
        self.holder = hold_etc_overlay(self, self.tmp)

        self.bin = os.path.join(self.tmp, "bin", "spendcap")
        self.runner = os.path.join(self.tmp, "lib", "spendcap-runner")
        self.ledger_dir = os.path.join(self.tmp, "ledger")
        self.ledger = os.path.join(self.ledger_dir, "ledger.db")
        policy = os.path.join(self.tmp, "runner.json")
        with open(policy, "w") as f:
            json.dump(self.locked_policy, f)
        for attempt in range(6):  # idempotent; twice, and again if another useradd held the lock
            if attempt >= 2:
                wait_until(lambda: not os.path.exists("/etc/passwd.lock"), 30,
                           what="another useradd's lock on /etc/passwd")
            result = self.inside(["sh", INSTALL, "--binary", SPENDCAP, "--bin", self.bin,
                                  "--runner", self.runner, "--ledger-dir", self.ledger_dir,
                                  "--man-dir", os.path.join(self.tmp, "man")] +
                                 (["--setgid-only"] if self.setgid_only else []) +
                                 self.install_args() + [policy])
            self.install_result = result
            if result.returncode != 0 and "lock" in result.stderr and attempt < 5:
                continue
            self.assertEqual(result.returncode, 0, result.stderr + result.stdout)
            if attempt >= 1:
                break

    def install_args(self):
        """More arguments for install-shared-runner.sh (a subclass's ledger)."""
        return []

    def inside(self, argv, user=None, env=None, input=None):
        if env is None:  # the setgid binary refuses variables that would redirect it (tests' own)
            env = {k: v for k, v in os.environ.items() if not k.startswith("SPENDCAP_")}
        command = ["nsenter", "-t", str(self.holder.pid), "-m", "--"]
        if user:
            command += ["setpriv", "--reuid", user, "--regid", user, "--init-groups"]
        return subprocess.run(command + list(argv), env=env, capture_output=True, text=True,
                              timeout=60, input=input, cwd=self.tmp)

    def user_env(self, user, extra=None):
        home = os.path.join(self.tmp, user)
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": home, "USER": user,
               "XDG_DATA_HOME": home + "/data", "XDG_STATE_HOME": home + "/state",
               "XDG_CONFIG_HOME": home + "/config", "TMPDIR": home + "/tmp"}
        env.update(extra or {})
        return env

    def spendcap(self, user, args, extra=None):
        return self.inside([self.bin] + list(args), user=user, env=self.user_env(user, extra))

    def root_sql(self, sql):
        # A busy timeout, as spendcap's own: a run's write may hold the lock for a moment.
        result = self.inside(["sqlite3", "-cmd", ".timeout 10000", self.ledger, sql])
        self.assertEqual(result.returncode, 0, result.stderr)
        return result.stdout.strip()

    def team_budget(self, user):
        result = self.spendcap(user, ["budgets", "--json"])
        self.assertEqual(result.returncode, 0, result.stderr)
        return [b for b in json.loads(result.stdout) if b["scope"] == "team:vision"][0]


@unittest.skipIf(WHY_NOT, WHY_NOT or "")
class SharedRunnerTest(SharedRunnerSetup):
    def test_the_install(self):
        front = os.stat(self.bin)
        self.assertEqual((oct(front.st_mode & 0o7777), front.st_uid), (oct(0o755), 0))
        info = os.stat(self.runner)
        self.assertEqual(oct(info.st_mode & 0o7777), oct(0o4755))
        self.assertEqual(info.st_uid, 0)
        config = self.inside(["cat", "/etc/spendcap/runner.json"])
        self.assertEqual(json.loads(config.stdout),
                         {"runner": self.runner, "user": "spendcap", "spendcap": self.bin,
                          "spool": os.path.join(self.ledger_dir, "spool")})
        self.assertFalse(front.st_mode & 0o6000, "the front is setuid or setgid")
        service = self.inside(["id", "-u", "spendcap"])
        self.assertEqual(service.returncode, 0, service.stderr)
        self.assertNotEqual(service.stdout.strip(), "0")
        directory = os.stat(self.ledger_dir)
        self.assertEqual(oct(directory.st_mode & 0o7777), oct(0o2770))
        ledger = os.stat(self.ledger)
        self.assertEqual((ledger.st_uid, oct(ledger.st_mode & 0o777)), (0, oct(0o660)))
        self.assertEqual(ledger.st_gid, info.st_gid, "the ledger's group is the runner's")
        self.assertEqual(directory.st_gid, info.st_gid)
        group = self.inside(["getent", "group", str(info.st_gid)]).stdout
        self.assertTrue(group.startswith("spendcap:"), group)
        for user in self.users:
            self.assertNotIn(user, group.strip().split(":")[-1].split(","))

    def test_two_users_run_within_the_team_budget_and_cannot_write_the_ledger(self):
        for user in self.users:
            out = os.path.join(self.tmp, user, "job.json")
            result = self.spendcap(user, ["run", "--team", "vision", "--", "python3", "-c", JOB,
                                          self.ledger, out])
            self.assertEqual(result.returncode, 0, result.stderr)
            with open(out) as f:
                report = json.load(f)
            self.assertEqual(report["opened_rw"], [], "the job opened the ledger for writing")
            self.assertEqual(len(set(report["resgid"])), 1, "the job holds no other group")
            self.assertNotEqual(report["resgid"][0], os.stat(self.runner).st_gid)
            # sqlite3 as the user: the directory keeps it out.
            sql = self.inside(["sqlite3", self.ledger,
                               "UPDATE budgets SET amount_micros = amount_micros * 10"],
                              user=user, env=self.user_env(user))
            self.assertNotEqual(sql.returncode, 0, "sqlite3 wrote the ledger as " + user)
        users = self.root_sql("SELECT user_name FROM runs ORDER BY user_name").split()
        self.assertEqual(sorted(users), sorted(self.users))
        self.assertEqual(self.team_budget(self.users[0])["budget"], 100.0)

    def test_budgets_apply_and_redirects_are_refused(self):
        user = self.users[0]
        looser = os.path.join(self.tmp, user, "looser.json")
        with open(looser, "w") as f:
            json.dump(dict(LOCKED, ledger="sqlite:" + self.ledger,
                           budgets={"team": {"vision": {"amount": 100000, "period": "month"}}}), f)
        result = self.spendcap(user, ["budgets", "apply", looser])
        self.assertEqual(result.returncode, 125, result.stderr)
        self.assertEqual(self.team_budget(user)["budget"], 100.0)
        for variable, value in (("SPENDCAP_TEST_SWITCHES", "no-ceilings"),
                                ("SPENDCAP_SPOOL_DIR", "/tmp"),
                                ("SPENDCAP_NVML_LIBRARY", "/tmp/x.so")):
            with self.subTest(variable=variable):
                result = self.spendcap(user, ["run", "--team", "vision", "--", "true"],
                                       extra={variable: value})
                self.assertEqual(result.returncode, 125, result.stderr)
                self.assertIn(variable, result.stderr)
        result = self.spendcap(user, ["run", "--team", "vision",
                                      "--ledger", os.path.join(self.tmp, user, "own.db"),
                                      "--", "true"])
        self.assertEqual(result.returncode, 125, result.stderr)
        result = self.spendcap(user, ["ps", "--ledger", os.path.join(self.tmp, user, "own.db")])
        self.assertEqual(result.returncode, 125, result.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.tmp, user, "own.db")))

    def test_one_user_cannot_clear_the_others_stop_order(self):
        a, b = self.users
        result = self.spendcap(a, ["stop", "--team", "vision", "--reason", "review"])
        self.assertEqual(result.returncode, 0, result.stderr)
        result = self.spendcap(b, ["stop", "--clear", "--team", "vision"])
        self.assertEqual(result.returncode, 125, result.stderr)
        self.assertIn("placed by " + a, result.stderr)
        result = self.spendcap(b, ["run", "--team", "vision", "--", "true"])
        self.assertEqual(result.returncode, 120, result.stderr)
        result = self.spendcap(a, ["stop", "--clear", "--team", "vision"])
        self.assertEqual(result.returncode, 0, result.stderr)
        result = self.spendcap(b, ["run", "--team", "vision", "--", "true"])
        self.assertEqual(result.returncode, 0, result.stderr)

    def test_a_raised_row_does_not_raise_the_amount_in_force(self):
        user = self.users[0]
        self.root_sql("UPDATE budgets SET amount_micros = 1000000000, max_run_micros = 1000000000")
        self.assertEqual(self.team_budget(user)["budget"], 100.0)
        status = os.path.join(self.tmp, user, "status.json")
        result = self.spendcap(user, ["run", "--team", "vision", "--budget", "50",
                                      "--status-file", status, "--", "true"])
        self.assertEqual(result.returncode, 0, result.stderr)
        with open(status) as f:
            self.assertEqual(json.load(f)["budget"], 10.0, "the locked max_run, not the row's")


if __name__ == "__main__":
    unittest.main()
