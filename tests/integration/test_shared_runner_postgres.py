"""The shared runner with a PostgreSQL ledger (issue 30, item 7), from the install script: the
supervisor connects as the service user, so `install-shared-runner.sh --ledger postgresql://...`
writes that user's passfile (0600, the service user's) and prints its login role's SQL; once the
administrator has run it, the first run works (it used to fail: role "<service user>" does not
exist). The help text is the script's header, not its first line of code.

Needs what test_shared_runner.py needs and the PostgreSQL test server (SPENDCAP_TEST_PG_URL)."""
import json
import os
import re
import stat
import subprocess
import unittest
import urllib.parse
import uuid

from spendcap_testlib import SPENDCAP
from test_postgres_ledger import PG_URL, SKIP_REASON, psql
from test_shared_runner import INSTALL, WHY_NOT, SharedRunnerSetup


def owner_url(schema):
    parts = urllib.parse.urlsplit(PG_URL)
    return "postgresql://%s@%s:%s%s?options=-csearch_path%%3D%s" % (
        parts.username, parts.hostname, parts.port, parts.path, schema)


class InstallHelpTest(unittest.TestCase):
    def test_help_is_the_header_comment(self):
        result = subprocess.run(["sh", INSTALL, "--help"], capture_output=True, text=True,
                                timeout=30)
        self.assertEqual(result.returncode, 0, result.stderr)
        lines = result.stdout.rstrip("\n").splitlines()
        self.assertTrue(lines[0].startswith("Installs spendcap for a shared runner"), lines[0])
        self.assertNotIn("set -eu", result.stdout)
        self.assertFalse(any(line.startswith("#") for line in lines), result.stdout)
        self.assertIn("--ledger postgresql://", result.stdout)


@unittest.skipIf(WHY_NOT, WHY_NOT or "")
@unittest.skipUnless(PG_URL, SKIP_REASON)
class SharedRunnerPostgresTest(SharedRunnerSetup):
    user_count = 1

    def setUp(self):
        suffix = uuid.uuid4().hex[:10]
        self.schema = "shr_" + suffix
        self.service = "scsvc" + suffix[:8]
        psql("CREATE SCHEMA %s" % self.schema)
        self.addCleanup(psql, 'DROP ROLE IF EXISTS "%s"' % self.service, None, False)
        self.addCleanup(psql, "DROP SCHEMA IF EXISTS %s CASCADE" % self.schema, None, False)
        self.passfile = None
        super().setUp()

    def install_args(self):
        self.passfile = os.path.join(self.tmp, "etc-pgpass", "ledger.password")
        return ["--user", self.service, "--ledger", owner_url(self.schema), "--password-file",
                self.passfile]

    def test_first_run_works_as_the_service_user(self):
        out = self.install_result.stdout
        # The password file: root:GROUP 0640 (read by the supervisor with the runner's group; its
        # filesystem uid is the caller's), one line, the password alone (issue 38, item 1).
        info = os.stat(self.passfile)
        self.assertEqual(oct(stat.S_IMODE(info.st_mode)), oct(0o640))
        self.assertEqual(info.st_uid, 0)
        gid = self.inside(["getent", "group", "spendcap"]).stdout.split(":")[2]
        self.assertEqual(str(info.st_gid), gid)
        with open(self.passfile) as f:
            line = f.read().strip()
        self.assertRegex(line, r"^[A-Za-z0-9_-]{20,}$")
        # The locked policy names the ledger without its owner and without passfile= (it would
        # override users' own ~/.pgpass), and the file as its ledger_password_file.
        policy = json.loads(self.inside(["cat", "/etc/spendcap/policy.json"]).stdout)
        self.assertNotIn("@", policy["ledger"])
        self.assertNotIn("passfile", urllib.parse.unquote(policy["ledger"]))
        self.assertEqual(policy["ledger_password_file"], self.passfile)
        # The role's SQL, printed for the administrator.
        create = re.search(r'CREATE ROLE "%s" LOGIN PASSWORD \'([^\']+)\';' % self.service, out)
        self.assertTrue(create, out)
        self.assertEqual(create.group(1), line)
        grant = 'GRANT spendcap_runner TO "%s";' % self.service
        self.assertIn(grant, out)
        # The bound on a stopped command: the runner's waits, and a user's idle transaction.
        lock_timeout = 'ALTER ROLE "%s" SET lock_timeout = \'10s\';' % self.service
        self.assertIn(lock_timeout, out)
        self.assertRegex(out, r'ALTER DATABASE "[^"/?]+" SET idle_in_transaction_session_timeout '
                              r"= '1min';")
        user = self.users[0]
        # Negative control: before the administrator ran it, the run fails as the issue says.
        result = self.spendcap(user, ["run", "--team", "vision", "--", "true"])
        self.assertNotEqual(result.returncode, 0, result.stderr)
        self.assertIn('role "%s" does not exist' % self.service, result.stderr)
        psql(create.group(0) + " " + grant + " " + lock_timeout)
        result = self.spendcap(user, ["run", "--team", "vision", "--", "true"])
        self.assertEqual(result.returncode, 0, result.stderr)
        rows = psql("SELECT user_name || ' ' || status FROM %s.runs WHERE status <> 'refused'"
                    % self.schema).stdout.split("\n")
        self.assertIn("%s succeeded" % user, rows)
        # Installed again (idempotent): the same password, so the role keeps working.
        again = self.inside(["sh", INSTALL, "--binary", SPENDCAP, "--bin", self.bin, "--runner",
                             self.runner, "--ledger-dir", self.ledger_dir,
                             "--man-dir", os.path.join(self.tmp, "man")] + self.install_args() +
                            [os.path.join(self.tmp, "runner.json")])
        self.assertEqual(again.returncode, 0, again.stderr)
        with open(self.passfile) as f:
            self.assertEqual(f.read().strip(), line)


if __name__ == "__main__":
    unittest.main()
