"""The guide is the test (issue 38, items 1 and 2): the PostgreSQL shared runner installed exactly as
docs/guide/shared-runner.md and docs/guide/postgresql.md say, from their `<!-- install-test: NAME
-->` blocks, run as written on a server of the test's own that checks scram-sha-256 passwords
(peer for its administrator's socket, no `trust` for any role), directly and through pgbouncer in
transaction mode; then two real ordinary Unix users of two teams run jobs and use `ps`, `stop`,
`budgets` and `report`, and nothing of the service user's password reaches them: not their jobs'
environments, no /proc/*/cmdline or environ they can read, no output, no ledger row.

The only changes to the guide's text are in SUBSTITUTIONS below (host and port, passwords, user
names, the install's paths). A change to the guide that breaks the install fails here.

Negative control: with the installer and binary before issue 38 (passfile= in the URL, libpq's
passfile the service user's 0600 file, opened with the caller's filesystem uid), the first run
ends 125 `fe_sendauth: no password supplied`, and the users' `ps` sends no password of theirs.

Needs what test_shared_runner.py needs, PostgreSQL's server binaries and, for the pooler case,
/usr/sbin/pgbouncer; skipped, saying so, without."""
import json
import os
import re
import secrets
import shutil
import subprocess
import tempfile
import time
import unittest
import urllib.parse

from spendcap_testlib import REPO, SPENDCAP, add_home_users, free_port, wait_until
from test_shared_runner import INSTALL, WHY_NOT, hold_etc_overlay

PG_BIN = os.environ.get("SPENDCAP_TEST_PG_BIN", "/usr/lib/postgresql/15/bin")
BOUNCER = "/usr/sbin/pgbouncer"
GUIDES = [os.path.join(REPO, "docs", "guide", name) for name in
          ("shared-runner.md", "postgresql.md")]
MISSING = WHY_NOT
if not MISSING and not os.path.exists(os.path.join(PG_BIN, "initdb")):
    MISSING = "no PostgreSQL server binaries in " + PG_BIN
if not MISSING and not shutil.which("runuser"):
    MISSING = "no runuser (the server runs as postgres)"
if not MISSING and not shutil.which("psql"):
    MISSING = "no psql"


def guide_blocks():
    """{name: text} of the guides' `<!-- install-test: NAME -->` fenced blocks."""
    blocks = {}
    for path in GUIDES:
        with open(path) as f:
            lines = f.read().splitlines()
        for i, line in enumerate(lines):
            found = re.fullmatch(r"<!-- install-test: ([a-z-]+) -->", line.strip())
            if not found:
                continue
            if i + 1 >= len(lines) or not lines[i + 1].startswith("```"):
                raise AssertionError("%s:%d: an install-test block must be fenced" % (path, i + 1))
            end = lines.index("```", i + 2)
            blocks[found.group(1)] = "\n".join(lines[i + 2:end]) + "\n"
    return blocks


def substitute(text, values):
    """The guide's text with the documented substitutions, longest first."""
    for old in sorted(values, key=len, reverse=True):
        text = text.replace(old, values[old])
    return text


class Cluster:
    """A PostgreSQL server of the test's own: scram-sha-256 over TCP, peer on its socket."""

    def __init__(self, top):
        self.dir = os.path.join(top, "pg")
        os.mkdir(self.dir)
        shutil.chown(self.dir, "postgres")
        self.port = free_port()
        self.as_server = ["runuser", "-u", "postgres", "--"]
        subprocess.run(self.as_server + [os.path.join(PG_BIN, "initdb"), "-D", self.dir + "/data",
                                         "-U", "postgres", "--auth-local=peer",
                                         "--auth-host=scram-sha-256", "-E", "UTF8", "--no-sync"],
                       check=True, capture_output=True, timeout=120)
        subprocess.run(self.as_server + ["setsid", os.path.join(PG_BIN, "pg_ctl"), "-D",
                                         self.dir + "/data", "-l", self.dir + "/server.log", "-w",
                                         "-t", "60", "start", "-o",
                                         "-k %s -p %d -c listen_addresses=127.0.0.1 -c fsync=off "
                                         "-c password_encryption=scram-sha-256" %
                                         (self.dir, self.port)],
                       check=True, capture_output=True, timeout=120)

    def psql(self, sql, database="postgres"):
        """As the administrator (the superuser, over the socket): the guide's `psql`."""
        result = subprocess.run(self.as_server + ["psql", "-X", "-At", "-v", "ON_ERROR_STOP=1",
                                                  "-h", self.dir, "-p", str(self.port), "-d",
                                                  database],
                                input=sql, capture_output=True, text=True, timeout=60)
        if result.returncode != 0:
            raise AssertionError("psql failed: %s\n%s" % (result.stderr, sql))
        return result.stdout

    def pg_ctl(self, *args):
        subprocess.run(self.as_server + ["setsid", os.path.join(PG_BIN, "pg_ctl"), "-D",
                                         self.dir + "/data", "-l", self.dir + "/server.log",
                                         "-w", "-t", "60"] + list(args),
                       check=True, capture_output=True, timeout=120)

    def stop(self):
        subprocess.run(self.as_server + [os.path.join(PG_BIN, "pg_ctl"), "-D", self.dir + "/data",
                                         "-m", "immediate", "-w", "stop"], capture_output=True)


# What each user's job writes: its environment, and every argv and environment it can read.
PROBE = r"""
import json, os, sys
seen = {"env": dict(os.environ), "cmdlines": [], "environs": []}
for pid in os.listdir("/proc"):
    if pid.isdigit():
        for name, key in (("cmdline", "cmdlines"), ("environ", "environs")):
            try:
                with open("/proc/%s/%s" % (pid, name), "rb") as f:
                    seen[key].append(f.read().decode("utf-8", "replace"))
            except OSError:
                pass
with open(sys.argv[1], "w") as f:
    json.dump(seen, f)
"""


class GuideTest(unittest.TestCase):
    """Two ordinary users with homes, /etc overlaid, and the guide's install paths."""

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="spendcap-guide-")
        os.chmod(self.tmp, 0o755)
        self.addCleanup(shutil.rmtree, self.tmp, True)
        self.users = add_home_users(self, self.tmp, "sg", 2)
        self.root_home = os.path.join(self.tmp, "root-home")
        os.mkdir(self.root_home, 0o700)
        # /etc overlaid in a private mount namespace, held by one process.
        self.holder = hold_etc_overlay(self, self.tmp)
        self.bin = os.path.join(self.tmp, "bin", "spendcap")
        self.runner = os.path.join(self.tmp, "lib", "spendcap-runner")

    def start_long_run(self, user, team):
        """The user's `spendcap run -- sleep 120` in the team, once `ps --json` lists it: (the
        front, ps's rows)."""
        front = subprocess.Popen(
            ["nsenter", "-t", str(self.holder.pid), "-m", "--", "setpriv", "--reuid", user,
             "--regid", user, "--init-groups", self.bin, "run", "--team", team, "--", "sleep",
             "120"], env=self.user_env(user), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True)
        self.addCleanup(front.kill)
        running = []

        def listed():
            result = self.spendcap(user, ["ps", "--json"])
            self.assertEqual(result.returncode, 0, result.stderr)
            running[:] = json.loads(result.stdout)
            return bool(running) or front.poll() is not None
        wait_until(listed, 60, what=user + "'s run in ps")
        if front.poll() is not None:
            self.fail(user + "'s run ended early: " + front.communicate()[1])
        return front, running

    def install_command(self):
        """The guide's `scripts/install-shared-runner.sh`, with the install's paths in the test's
        directory, not /usr/local."""
        return "sh %s --binary %s --bin %s --runner %s --man-dir %s" % (
            INSTALL, os.path.abspath(SPENDCAP), self.bin, self.runner,
            os.path.join(self.tmp, "man"))

    def inside(self, argv, user=None, env=None, input=None, timeout=90):
        command = ["nsenter", "-t", str(self.holder.pid), "-m", "--"]
        if user:
            command += ["setpriv", "--reuid", user, "--regid", user, "--init-groups"]
        return subprocess.run(command + list(argv), env=env, capture_output=True, text=True,
                              timeout=timeout, input=input, cwd="/")

    def user_env(self, user):
        return {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": os.path.join(self.tmp, user),
                "USER": user, "LOGNAME": user}

    def root_env(self):
        # The installed front first, as /usr/local/bin is on a runner's PATH.
        return {"PATH": os.path.dirname(self.bin) + ":" + os.environ.get("PATH", "/usr/bin:/bin"),
                "HOME": self.root_home, "USER": "root"}

    def spendcap(self, user, args, timeout=90):
        return self.inside([self.bin] + list(args), user=user, env=self.user_env(user),
                           timeout=timeout)

    def shell(self, text, user=None):
        env = self.user_env(user) if user else self.root_env()
        result = self.inside(["sh", "-eu"], user=user, env=env, input=text, timeout=180)
        self.assertEqual(result.returncode, 0, "%s\n%s%s" % (text, result.stdout, result.stderr))
        return result



@unittest.skipIf(WHY_NOT, WHY_NOT or "")
class GuideSqliteInstallTest(GuideTest):
    """The SQLite install of docs/guide/shared-runner.md, its `sqlite-policy` and `sqlite` blocks
    run as written; then each user runs in a team, `ps`, `budgets`, `report`, and alice stops her
    running run (123). Negative control: a guide whose install line names a policy that is not
    there (`my-runner.json` misspelt) fails the install step here."""

    def test_as_the_guide_says(self):
        blocks = guide_blocks()
        for name in ("sqlite-policy", "sqlite"):
            self.assertIn(name, blocks, "the guide lost its install-test block " + name)
        policy = os.path.join(self.tmp, "my-runner.json")
        with open(policy, "w") as f:
            f.write(blocks["sqlite-policy"])
        ledger_dir = os.path.join(self.tmp, "var-lib-spendcap")
        values = {"scripts/install-shared-runner.sh":
                  self.install_command() + " --ledger-dir " + ledger_dir,
                  "my-runner.json": policy}
        installed = self.shell(substitute(blocks["sqlite"], values))
        # `spendcap budgets` right after the install lists the policy's teams.
        self.assertRegex(installed.stdout, r"(?m)^team:nlp\b.*\$100\.00", installed.stdout)
        self.assertRegex(installed.stdout, r"(?m)^team:robotics\b.*\$50\.00", installed.stdout)
        with open(os.path.join(self.tmp, "etc-upper", "spendcap", "policy.json")) as f:
            locked = json.load(f)
        self.assertEqual(locked["ledger"], "sqlite:" + os.path.join(ledger_dir, "ledger.db"))
        alice, bob = self.users
        for user, team in ((alice, "nlp"), (bob, "robotics")):
            result = self.spendcap(user, ["run", "--team", team, "--", "true"])
            self.assertEqual(result.returncode, 0, result.stderr)
        front, running = self.start_long_run(alice, "nlp")
        for user in (alice, bob):
            for args in (["ps"], ["budgets"], ["report"]):
                result = self.spendcap(user, args)
                self.assertEqual(result.returncode, 0, "%s %s: %s" % (user, args, result.stderr))
        result = self.spendcap(alice, ["stop", "--run", running[0]["id"][:8], "--reason",
                                       "guide test"])
        self.assertEqual(result.returncode, 0, result.stderr)
        _, err = front.communicate(timeout=90)
        self.assertEqual(front.returncode, 123, err)
        report = self.spendcap(bob, ["runs", "--json"])
        self.assertEqual(report.returncode, 0, report.stderr)
        rows = json.loads(report.stdout)
        self.assertEqual(sorted((r["user"], r["team"]) for r in rows),
                         sorted([(alice, "nlp"), (alice, "nlp"), (bob, "robotics")]), rows)


@unittest.skipIf(MISSING, MISSING or "")
class GuideInstallTest(GuideTest):
    def setUp(self):
        super().setUp()
        self.cluster = Cluster(self.tmp)
        self.addCleanup(self.cluster.stop)
        self.passwords = {name: "pw-" + secrets.token_hex(12) for name in
                          ("OWNER-PASSWORD", "ALICE-PASSWORD", "BOB-PASSWORD", "AUTH-PASSWORD")}

    # ---- the documented substitutions, in one place ----

    def substitutions(self, port):
        """The guide's words -> this test's: the server the runners reach, the passwords, the two
        users, and the install's paths."""
        values = dict(self.passwords)
        values.update({
            "db.internal:5432": "127.0.0.1:%d" % port,
            "db.internal/": "127.0.0.1:%d/" % port,
            "alice": self.users[0],
            "bob": self.users[1],
            "scripts/install-shared-runner.sh": self.install_command(),
        })
        return values

    # ---- the install, as the guides say ----

    def install_as_the_guide_says(self, bouncer):
        blocks = guide_blocks()
        for name in ("admin", "root", "users", "user", "pgbouncer-ini", "pgbouncer-sql"):
            self.assertIn(name, blocks, "the guides lost their install-test block " + name)
        port = self.cluster.port
        if bouncer:
            port = free_port()
        values = self.substitutions(port)
        self.cluster.psql(substitute(blocks["admin"], values))
        if bouncer:
            self.start_pgbouncer(blocks, values, port)
        installed = self.shell(substitute(blocks["root"], values))
        # The SQL the install printed, run as printed by the administrator.
        printed = installed.stdout.split("administrator creates the service user's login role "
                                         "(psql):\n", 1)
        self.assertEqual(len(printed), 2, installed.stdout)
        sql = "\n".join(line.strip() for line in printed[1].splitlines()
                        if line.startswith("  "))
        self.assertIn("CREATE ROLE", sql)
        self.cluster.psql(sql)
        self.cluster.psql(substitute(blocks["users"], values))
        user_block = blocks["user"]
        self.shell(substitute(user_block, values), user=self.users[0])
        self.shell(substitute(user_block.replace("alice", "bob").replace("ALICE", "BOB"), values),
                   user=self.users[1])
        with open(os.path.join(self.tmp, "etc-upper", "spendcap", "policy.json")) as f:
            self.locked = json.load(f)
        # The service password, wherever the install keeps it (an older install: libpq's passfile
        # named in the URL, its line's last field), so the checks below look for it.
        where = self.locked.get("ledger_password_file")
        if not where:
            where = re.search(r"passfile=([^&]+)", urllib.parse.unquote(self.locked["ledger"]))
            self.assertTrue(where, self.locked["ledger"])
            where = where.group(1)
        pw = self.inside(["cat", where])
        self.assertEqual(pw.returncode, 0, pw.stderr)
        self.service_password = pw.stdout.strip().split(":")[-1]
        self.assertGreaterEqual(len(self.service_password), 20)
        return installed

    def start_pgbouncer(self, blocks, values, port):
        ini = substitute(blocks["pgbouncer-ini"], values)
        ini = ini.replace("port=5432", "port=%d" % self.cluster.port)
        ini = ini.replace("listen_port = 6432", "listen_port = %d" % port)
        bouncer_dir = os.path.join(self.tmp, "pgbouncer")
        os.mkdir(bouncer_dir)
        userlist = os.path.join(bouncer_dir, "userlist.txt")
        ini = ini.replace("/etc/pgbouncer/userlist.txt", userlist)
        ini += "logfile = %s/log\npidfile = %s/pid\nunix_socket_dir =\n" % (bouncer_dir,
                                                                             bouncer_dir)
        with open(os.path.join(bouncer_dir, "pgbouncer.ini"), "w") as f:
            f.write(ini)
        with open(userlist, "w") as f:
            f.write('"pgbouncer_auth" "%s"\n' % self.passwords["AUTH-PASSWORD"])
        os.chmod(userlist, 0o600)
        subprocess.run(["chown", "-R", "postgres", bouncer_dir], check=True)
        self.cluster.psql(substitute(blocks["pgbouncer-sql"], values), database="spendcap")
        subprocess.run(self.cluster.as_server + [BOUNCER, "-d", "-q",
                                                 os.path.join(bouncer_dir, "pgbouncer.ini")],
                       check=True, capture_output=True, timeout=30)
        pidfile = os.path.join(bouncer_dir, "pid")
        wait_until(lambda: os.path.exists(pidfile), 10, what="pgbouncer's pid file")
        self.addCleanup(lambda: subprocess.run(["kill", open(pidfile).read().strip()],
                                               capture_output=True))

    # ---- what the users do ----

    def check_no_secret(self, text, where):
        self.assertNotIn(self.service_password, text, "the service password reached " + where)

    def drive_two_users(self):
        alice, bob = self.users
        # A first run of each, in its team; the job looks at everything it can read.
        for user, team in ((alice, "nlp"), (bob, "robotics")):
            seen = os.path.join(self.tmp, user, "seen.json")
            result = self.spendcap(user, ["run", "--team", team, "--", "python3", "-c", PROBE,
                                          seen])
            self.assertEqual(result.returncode, 0, result.stderr)
            self.check_no_secret(result.stdout + result.stderr, user + "'s run output")
            with open(seen) as f:
                self.check_no_secret(f.read(), user + "'s job (environment or /proc)")
        # A run that lasts, for ps and stop.
        front, running = self.start_long_run(alice, "nlp")
        self.check_no_secret(json.dumps(running), "ps")
        # While it runs: the processes users can read hold no secret either.
        for user in (alice, bob):
            look = self.inside(["sh", "-c", "cat /proc/[0-9]*/cmdline /proc/[0-9]*/environ "
                                "2>/dev/null | tr '\\0' '\\n'"], user=user,
                               env=self.user_env(user))
            self.check_no_secret(look.stdout, user + "'s /proc")
        for user in (alice, bob):
            for args in (["ps"], ["budgets"], ["report"]):
                result = self.spendcap(user, args)
                self.assertEqual(result.returncode, 0, "%s %s: %s" % (user, args, result.stderr))
                self.check_no_secret(result.stdout + result.stderr, "%s %s" % (user, args))
        run_id = running[0]["id"]
        result = self.spendcap(alice, ["stop", "--run", run_id[:8], "--reason", "guide test"])
        self.assertEqual(result.returncode, 0, result.stderr + self.cluster.psql(
            "SELECT id, user_name, status, reason FROM runs", database="spendcap") +
            self.spendcap(alice, ["ps", "--json"]).stdout)
        out, err = front.communicate(timeout=90)
        self.assertEqual(front.returncode, 123, err)
        # The ledger: every run recorded as the service role, with its Unix user.
        rows = self.cluster.psql("SELECT user_name || ' ' || status FROM runs ORDER BY 1",
                                 database="spendcap").split()
        self.assertIn(alice, rows)
        self.assertIn(bob, rows)
        dump = subprocess.run(self.cluster.as_server + [
            os.path.join(PG_BIN, "pg_dump"), "--data-only", "-h", self.cluster.dir, "-p",
            str(self.cluster.port), "spendcap"], capture_output=True, text=True, timeout=60)
        self.assertEqual(dump.returncode, 0, dump.stderr)
        self.check_no_secret(dump.stdout, "the ledger")

    # ---- issue 38 item 7: no user delays another team ----

    def as_user_psql(self, user, sql, background=False):
        """psql as the user's own login role, with the user's own ~/.pgpass (the guide's)."""
        argv = ["nsenter", "-t", str(self.holder.pid), "-m", "--", "setpriv", "--reuid", user,
                "--regid", user, "--init-groups", "psql", "-X", "-At", "-h", "127.0.0.1", "-p",
                str(self.cluster.port), "-d", "spendcap"]
        if background:
            return subprocess.Popen(argv, env=self.user_env(user), stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        return subprocess.run(argv + ["-v", "ON_ERROR_STOP=1"], env=self.user_env(user),
                              input=sql, capture_output=True,
                              text=True, timeout=60)

    def test_a_user_of_one_team_cannot_delay_another(self):
        """alice (team nlp) holds every scope lock she can compute, in an open transaction, while
        bob's robotics run is admitted and his running run keeps heartbeating. Negative control:
        with the binary before the salted keys (current_schema:kind:name), bob's run waits out
        lock_timeout and is refused (125 after about 10 s)."""
        self.install_as_the_guide_says(bouncer=False)
        alice, bob = self.users
        # What she may not do at all: read the salt, call the lock function.
        for sql in ("SELECT salt FROM scope_lock_salt;",
                    "SELECT spendcap_lock_scope('team', 'robotics');"):
            denied = self.as_user_psql(alice, sql)
            self.assertNotEqual(denied.returncode, 0, sql + denied.stdout)
            self.assertIn("permission denied", denied.stderr)
        # bob's run that lasts, raising its ceiling often (each raise takes the scopes' locks).
        long_run = subprocess.Popen(
            ["nsenter", "-t", str(self.holder.pid), "-m", "--", "setpriv", "--reuid", bob,
             "--regid", bob, "--init-groups", self.bin, "run", "--team", "robotics", "--sync", "1s", "--claim-horizon", "2s", "--", "sleep", "90"],
            env=self.user_env(bob), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.addCleanup(long_run.kill)

        def heartbeat():
            out = self.cluster.psql("SELECT max(heartbeat_at) FROM runs WHERE status = 'running' "
                                    "AND team = 'robotics'", database="spendcap").strip()
            return float(out) if out else None
        wait_until(lambda: heartbeat() is not None or long_run.poll() is not None, 60,
                   what="bob's long run in the ledger")
        self.assertIsNone(long_run.poll(), long_run.communicate()[1] if long_run.poll() is not None
                          else "")
        # alice's open transaction: the old keys of bob's scopes, the client's lock function
        # (takes nothing: no run of robotics is due), an order she may not place caught in a
        # savepoint; then she sleeps holding whatever she got.
        holder = self.as_user_psql(alice, None, background=True)
        self.addCleanup(holder.kill)
        holder.stdin.write(
            "BEGIN;\n"
            "SELECT pg_advisory_xact_lock(hashtextextended(current_schema() || "
            "':team:robotics', 0));\n"
            "SELECT pg_advisory_xact_lock(hashtextextended(current_schema() || ':user:%s', 0));\n"
            "SELECT spendcap_lock_scopes(ARRAY['team:robotics', 'user:%s'], NULL);\n"
            "SAVEPOINT s;\n"
            "SELECT spendcap_place_stop_order('team', 'robotics', 'x', '%s', 0);\n"
            "ROLLBACK TO SAVEPOINT s;\n"
            "SELECT 'holding';\n"
            "SELECT pg_sleep(25);\n"
            "COMMIT;\n" % (bob, bob, alice))
        holder.stdin.flush()

        def alice_locks():
            return int(self.cluster.psql(
                "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a USING (pid) "
                "WHERE l.locktype = 'advisory' AND l.granted AND a.usename = '%s' "
                "AND a.query LIKE '%%pg_sleep%%'" % alice, database="spendcap").strip())
        wait_until(lambda: alice_locks() >= 2 or holder.poll() is not None, 30,
                   what="alice's session holding the old keys")
        self.assertIsNone(holder.poll(), "alice's session ended early")
        before = heartbeat()
        started = time.monotonic()
        admitted = self.spendcap(bob, ["run", "--team", "robotics", "--", "true"], timeout=60)
        took_s = time.monotonic() - started
        self.assertEqual(admitted.returncode, 0, admitted.stderr)
        self.assertLess(took_s, 8.0, "bob's run waited on alice's locks")
        # The running run keeps heartbeating (a raise every other heartbeat or so).
        wait_until(lambda: (heartbeat() or 0) >= before + 2, 15,
                   what="bob's running run heartbeating while alice holds her locks")
        self.assertGreaterEqual(alice_locks(), 2, "alice's session stopped holding")
        self.assertIsNone(long_run.poll(), long_run.communicate()[1] if long_run.poll() is not None
                          else "")
        print("bob's run admitted in %.2f s while alice held %d advisory locks" %
              (took_s, alice_locks()))

    # ---- issue 38 item 8: the pgbouncer recipe survives a server restart ----

    @unittest.skipUnless(os.path.exists(BOUNCER), "no pgbouncer at " + BOUNCER)
    def test_a_run_through_pgbouncer_survives_a_server_restart(self):
        """A run through the guide's pgbouncer while PostgreSQL restarts (pg_ctl stop -m fast,
        down until pgbouncer failed a login, start) keeps running, heartbeats again within 8 s of
        the server being up, ends with its own status and is recorded once. Its ceiling lasts
        about 8 s (--claim-horizon, a short grace), so heartbeats failing past it would stop it
        with 121 (ledger-unreachable). Negative control: without the guide's server_login_retry
        (pgbouncer's default 15 s), the heartbeats resume only 12 s after the server is up."""
        self.install_as_the_guide_says(bouncer=True)
        alice = self.users[0]
        front = subprocess.Popen(
            ["nsenter", "-t", str(self.holder.pid), "-m", "--", "setpriv", "--reuid", alice,
             "--regid", alice, "--init-groups", self.bin, "run", "--team", "nlp", "--sync", "1s",
             "--claim-horizon", "8s", "--grace", "1s", "--kill-after", "1s", "--", "sleep",
             "25"],
            env=self.user_env(alice), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.addCleanup(front.kill)

        def heartbeat():
            out = self.cluster.psql("SELECT max(heartbeat_at) FROM runs WHERE status = 'running'",
                                    database="spendcap").strip()
            return float(out) if out else None
        wait_until(lambda: heartbeat() is not None or front.poll() is not None, 60,
                   what="alice's run in the ledger")
        self.assertIsNone(front.poll(), "alice's run ended early")
        # A restart with the server down until pgbouncer has failed to log in to it (a
        # heartbeat met it down): pg_ctl stop -m fast, start with the same options.
        restarted = heartbeat()
        self.cluster.pg_ctl("stop", "-m", "fast")
        bouncer_log = os.path.join(self.tmp, "pgbouncer", "log")

        def login_failed():
            with open(bouncer_log, errors="replace") as f:
                return re.search(r"connect failed|login failed", f.read())
        wait_until(lambda: login_failed() or front.poll() is not None, 30,
                   what="pgbouncer failing to reach the stopped server")
        self.cluster.pg_ctl("start", "-o", "-k %s -p %d -c listen_addresses=127.0.0.1 "
                            "-c fsync=off" % (self.cluster.dir, self.cluster.port))
        up = time.monotonic()
        # A user's command right after: through pgbouncer, as soon as the server is up.
        listed = self.spendcap(alice, ["ps"])
        self.assertEqual(listed.returncode, 0, listed.stderr)
        wait_until(lambda: (heartbeat() or 0) > restarted or front.poll() is not None, 30,
                   what="a heartbeat after the restart")
        resumed_s = time.monotonic() - up
        print("server up -> ps answered and the run heartbeating again in %.1f s" % resumed_s)
        self.assertLess(resumed_s, 8.0, "pgbouncer kept refusing logins after the restart")
        out, err = front.communicate(timeout=90)
        self.assertEqual(front.returncode, 0, err)
        rows = self.cluster.psql("SELECT status FROM runs WHERE team = 'nlp'",
                                 database="spendcap").split()
        self.assertEqual(rows, ["succeeded"], err)

    def test_as_the_guide_says_directly(self):
        self.install_as_the_guide_says(bouncer=False)
        self.drive_two_users()

    @unittest.skipUnless(os.path.exists(BOUNCER), "no pgbouncer at " + BOUNCER)
    def test_as_the_guide_says_through_pgbouncer_in_transaction_mode(self):
        self.install_as_the_guide_says(bouncer=True)
        self.drive_two_users()


if __name__ == "__main__":
    unittest.main()
