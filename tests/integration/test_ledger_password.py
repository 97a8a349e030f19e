"""The PostgreSQL ledger's password from `ledger_password_file` (issue 19, item 3) against a server
that checks passwords: its own throwaway cluster with scram-sha-256 over TCP on 127.0.0.1 (the
suite's shared test server trusts every connection, so it proves nothing here). A run with the
right file is recorded; without the file, or with a wrong password in it, the server refuses and
spendcap says so before anything is launched; the password is in no output, status file, argv or
environment of the job.

Needs PostgreSQL's server binaries (scripts/test.sh installs them); skipped, saying so, without."""
import json
import os
import secrets
import shutil
import subprocess
import tempfile
import unittest

from spendcap_testlib import SPENDCAP, SpendcapTest, free_port, wait_until

PG_BIN = os.environ.get("SPENDCAP_TEST_PG_BIN", "/usr/lib/postgresql/15/bin")
WHY_NOT = None if os.path.exists(os.path.join(PG_BIN, "initdb")) else "no PostgreSQL server binaries"
if not WHY_NOT and os.geteuid() == 0 and not shutil.which("runuser"):
    WHY_NOT = "root without runuser (the server runs as postgres)"


@unittest.skipIf(WHY_NOT, WHY_NOT or "")
class LedgerPasswordTest(SpendcapTest):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="spendcap-pg-scram-")
        cls.secret = "pw-" + secrets.token_hex(12)
        cls.port = free_port()
        root = os.geteuid() == 0
        cls.superuser = "postgres" if root else subprocess.run(
            ["id", "-un"], capture_output=True, text=True, check=True).stdout.strip()
        as_server = ["runuser", "-u", "postgres", "--"] if root else []
        if root:
            shutil.chown(cls.dir, "postgres")
        pwfile = os.path.join(cls.dir, "initdb-pw")
        with open(pwfile, "w") as f:
            f.write(cls.secret + "\n")
        if root:
            shutil.chown(pwfile, "postgres")
        cls.as_server = as_server
        subprocess.run(as_server + [os.path.join(PG_BIN, "initdb"), "-D", cls.dir + "/data", "-U",
                                    cls.superuser, "--auth-local=trust",
                                    "--auth-host=scram-sha-256", "--pwfile=" + pwfile, "-E",
                                    "UTF8", "--no-sync"],
                       check=True, capture_output=True, timeout=120)
        os.unlink(pwfile)
        subprocess.run(as_server + ["setsid", os.path.join(PG_BIN, "pg_ctl"), "-D",
                                    cls.dir + "/data", "-l", cls.dir + "/server.log", "-w", "-t",
                                    "60", "start", "-o",
                                    "-k %s -p %d -c listen_addresses=127.0.0.1 -c fsync=off "
                                    "-c password_encryption=scram-sha-256" % (cls.dir, cls.port)],
                       check=True, capture_output=True, timeout=120)
        cls.url = "postgresql://%s@127.0.0.1:%d/postgres" % (cls.superuser, cls.port)

    @classmethod
    def tearDownClass(cls):
        subprocess.run(cls.as_server + [os.path.join(PG_BIN, "pg_ctl"), "-D", cls.dir + "/data",
                                        "-m", "immediate", "-w", "stop"], capture_output=True)
        shutil.rmtree(cls.dir, ignore_errors=True)

    def rows(self):
        # Over the socket, which the server trusts: the test's own look, not spendcap's.
        result = subprocess.run(["psql", "-X", "-At", "-h", self.dir, "-p", str(self.port), "-U",
                                 self.superuser, "-d", "postgres", "-c",
                                 "SELECT status FROM runs"],
                                capture_output=True, text=True, timeout=60)
        return result.stdout.split() if result.returncode == 0 else []

    def run_with(self, password_file):
        policy = {"ledger": self.url}
        if password_file:
            policy["ledger_password_file"] = password_file
        path = self.path("policy-%s.json" % secrets.token_hex(4))
        with open(path, "w") as f:
            json.dump(policy, f)
        status = self.path("status-%s.json" % secrets.token_hex(4))
        seen = self.path("job-saw-%s" % secrets.token_hex(4))
        # The job writes its argv and environment: the password must be in neither.
        job = ["python3", "-c",
               "import json, os, sys; json.dump({'env': dict(os.environ), 'argv': sys.argv}, "
               "open(sys.argv[1], 'w'))", seen]
        env = self.spendcap_env({"HOME": self.tmp})  # no ~/.pgpass of the test's user
        env.pop("PGPASSWORD", None)
        result = subprocess.run([SPENDCAP, "run", "--policy", path, "--rate", "1", "--budget",
                                 "1", "--status-file", status, "--"] + job,
                                env=env, capture_output=True, text=True, timeout=120)
        outputs = result.stdout + result.stderr
        for name in (status, seen):
            if os.path.exists(name):
                with open(name) as f:
                    outputs += f.read()
        self.assertNotIn(self.secret, outputs, "the password leaked")
        return result, os.path.exists(seen)

    def secret_file(self, content):
        path = self.path("pw-%s" % secrets.token_hex(4))
        with open(path, "w") as f:
            f.write(content + "\n")
        os.chmod(path, 0o600)
        return path

    def test_the_right_file_records_the_run(self):
        before = self.rows().count("succeeded")
        result, launched = self.run_with(self.secret_file(self.secret))
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertTrue(launched)
        wait_until(lambda: self.rows().count("succeeded") == before + 1, 30,
                   what="the run's row in the password-checked server")

    def test_without_the_file_or_with_a_wrong_password_nothing_runs(self):
        # The negative controls: they show the server does check the password.
        for name, password_file in (("no file", None),
                                    ("wrong password", self.secret_file("not-" + self.secret))):
            with self.subTest(case=name):
                result, launched = self.run_with(password_file)
                self.assertNotEqual(result.returncode, 0, result.stderr)
                self.assertFalse(launched, "the job ran without a ledger")
                self.assertIn("password", result.stderr)


if __name__ == "__main__":
    unittest.main()
