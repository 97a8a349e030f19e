"""Metrics on a shared runner (issue 19, item 4), on the real setgid install
(scripts/install-shared-runner.sh --metrics-dir DIR --metrics-reader USER, in test_shared_runner's
private mount namespace with real users created here): DIR is root:spendcap 2770, so only
spendcap's metrics writer (which keeps the group) writes there; two users' runs of one team keep
the team file right (whichever user's run ends updates it); the reader (node_exporter's user, not
in the group) reads the files through a default ACL and a real node_exporter serves them, while
the users can neither read nor write there; a squatting file planted in DIR with forged totals is
not trusted (its totals are dropped, it is replaced); a directory everyone may write is refused
under the locked policy."""
import json
import os
import shutil
import subprocess
import unittest
import urllib.request
import uuid

from spendcap_testlib import SPENDCAP, free_port, wait_until
from test_shared_runner import INSTALL, LOCKED, WHY_NOT, SharedRunnerSetup
from test_metrics import parse_exposition

NODE_EXPORTER = shutil.which("prometheus-node-exporter")
PROMTOOL = shutil.which("promtool")
MISSING = WHY_NOT or (None if shutil.which("setfacl") else "needs setfacl (Debian's acl)")
TEAM_FILE = "spendcap_team_vision.prom"


@unittest.skipIf(MISSING, MISSING or "")
class SharedMetricsTest(SharedRunnerSetup):
    locked_policy = LOCKED

    def setUp(self):
        super().setUp()
        self.reader = "sc" + uuid.uuid4().hex[:10]
        # Inside the namespace: /etc is overlaid there, and the user goes with it.
        # Another test's useradd may hold /etc's lock files a moment: retried, with a bound.
        def made():
            if self.inside(["id", self.reader]).returncode == 0:
                return True
            self.inside(["useradd", "--no-create-home", "--user-group", self.reader])
            return False
        wait_until(made, 30, interval=0.2, what="useradd of the reader")
        self.mdir = os.path.join(self.tmp, "textfiles")
        policy = os.path.join(self.tmp, "runner.json")
        result = self.inside(["sh", INSTALL, "--binary", SPENDCAP, "--bin", self.bin,
                              "--ledger-dir", self.ledger_dir, "--metrics-dir", self.mdir,
                              "--metrics-reader", self.reader,
                              "--man-dir", os.path.join(self.tmp, "man"), policy])
        self.assertEqual(result.returncode, 0, result.stderr + result.stdout)

    def run_as(self, user, seconds="0.3"):
        status = os.path.join(self.tmp, user, "status.json")
        result = self.spendcap(user, ["run", "--team", "vision", "--status-file", status, "--",
                                      "python3", "-c", "import time; time.sleep(%s)" % seconds])
        self.assertEqual(result.returncode, 0, result.stderr)
        with open(status) as f:
            return json.load(f)["spend"], result

    def team_samples(self):
        with open(os.path.join(self.mdir, TEAM_FILE)) as f:
            return parse_exposition(f.read())

    def test_two_users_keep_the_team_file_right_and_only_the_reader_reads_it(self):
        info = os.stat(self.mdir)
        self.assertEqual(oct(info.st_mode & 0o7777), oct(0o2770))
        self.assertEqual(info.st_gid, os.stat(self.ledger_dir).st_gid)
        spends = []
        for user in self.users:
            spend, result = self.run_as(user)
            self.assertNotIn("metrics file", result.stderr)
            spends.append(spend)
        samples = self.team_samples()
        self.assertEqual(samples["spendcap_team_runs_finished_total"][0][1], 2)
        total = samples["spendcap_team_spend_usd_total"][0][1]
        self.assertAlmostEqual(total, sum(spends), places=5)
        # The team's budget gauges from the ledger (100 a month, locked).
        self.assertEqual(samples["spendcap_team_budget_usd"][0][1], 100)
        self.assertLess(samples["spendcap_team_budget_remaining_usd"][0][1], 100)
        team = os.stat(os.path.join(self.mdir, TEAM_FILE))
        self.assertEqual(oct(team.st_mode & 0o777), oct(0o660))
        self.assertEqual(team.st_gid, info.st_gid)
        self.assertEqual([f for f in os.listdir(self.mdir) if not f.startswith("spendcap_team_")],
                         [], "the runs' own files are removed at their end")
        # The reader reads it; the users cannot read, write or plant anything there.
        path = os.path.join(self.mdir, TEAM_FILE)
        read = self.inside(["cat", path], user=self.reader, env=self.user_env(self.users[0]))
        self.assertEqual(read.returncode, 0, read.stderr)
        self.assertIn("spendcap_team_spend_usd_total", read.stdout)
        for user in self.users:
            env = self.user_env(user)
            self.assertNotEqual(self.inside(["cat", path], user=user, env=env).returncode, 0)
            plant = self.inside(["sh", "-c", "echo x > %s/spendcap_team_forged.prom" % self.mdir],
                                user=user, env=env)
            self.assertNotEqual(plant.returncode, 0)
            self.assertIn("Permission denied", plant.stderr)
        if PROMTOOL:
            checked = subprocess.run([PROMTOOL, "check", "metrics"], input=read.stdout,
                                     capture_output=True, text=True, timeout=60)
            self.assertEqual(checked.returncode, 0, checked.stdout + checked.stderr)
        if NODE_EXPORTER:
            port = free_port()
            exporter = subprocess.Popen(
                ["nsenter", "-t", str(self.holder.pid), "-m", "--", "setpriv", "--reuid",
                 self.reader, "--regid", self.reader, "--init-groups", NODE_EXPORTER,
                 "--web.listen-address=127.0.0.1:%d" % port, "--collector.disable-defaults",
                 "--collector.textfile", "--collector.textfile.directory", self.mdir],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            self.addCleanup(exporter.wait)
            self.addCleanup(exporter.kill)

            def served():
                try:
                    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port,
                                                timeout=5) as r:
                        text = r.read().decode()
                except OSError:
                    return None
                return text if "spendcap_team_spend_usd_total" in text else None
            text = wait_until(served, 30, what="node_exporter serving the team file")
            self.assertIn("\nnode_textfile_scrape_error 0\n", text)

    def test_a_long_run_refreshes_its_team_gauges_through_the_writer(self):
        """Issue 38: on the shared runner a running run's heartbeats refresh its team's gauges
        through the metrics writer (the writer bound to that run, its team and currency): the
        team file's spendcap_team_budget_spent_usd rises above 0 and grows while the run goes on,
        and promtool passes the file. Negative control: main's binary writes the team file only
        when the run ends."""
        user = self.users[0]
        release = os.path.join(self.tmp, user, "release")
        front = subprocess.Popen(
            ["nsenter", "-t", str(self.holder.pid), "-m", "--", "setpriv", "--reuid", user,
             "--regid", user, "--init-groups", self.bin, "run", "--team", "vision", "--sync",
             "1s", "--", "python3", "-c",
             "import os, time\nend = time.monotonic() + 90\n"
             "while not os.path.exists(%r) and time.monotonic() < end: time.sleep(0.05)"
             % release],
            env=self.user_env(user), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            cwd=self.tmp)
        self.addCleanup(front.kill)
        spent = "spendcap_team_budget_spent_usd"

        def gauge():
            self.assertIsNone(front.poll(), "the run ended before its team's gauges moved")
            try:
                return self.team_samples()[spent][0][1]
            except (FileNotFoundError, KeyError):
                return 0
        first = wait_until(lambda: gauge() or None, 60, interval=0.1,
                           what="the team's spent gauge above 0 while the run goes on")
        wait_until(lambda: gauge() > first, 30, interval=0.1, what="the spent gauge to grow")
        with open(os.path.join(self.mdir, TEAM_FILE)) as f:
            text = f.read()
        self.assertNotIn("run_id", text)
        if PROMTOOL:
            checked = subprocess.run([PROMTOOL, "check", "metrics"], input=text,
                                     capture_output=True, text=True, timeout=60)
            self.assertEqual(checked.returncode, 0, checked.stdout + checked.stderr + text)
        self.inside(["touch", release], user=user)
        out, err = front.communicate(timeout=60)
        self.assertEqual(front.returncode, 0, err)
        self.assertNotIn("metrics file", err)
        samples = self.team_samples()
        self.assertEqual(samples["spendcap_team_runs_finished_total"][0][1], 1)
        self.assertGreaterEqual(samples[spent][0][1], first)

    def test_a_squatting_file_is_not_trusted(self):
        # Planted as one of the users would if they could write there: theirs, forged totals.
        user = self.users[0]
        path = os.path.join(self.mdir, TEAM_FILE)
        with open(path, "w") as f:
            f.write('spendcap_team_runs_finished_total{team="vision"} 1000\n'
                    'spendcap_team_spend_usd_total{team="vision",currency="USD"} 999\n')
        subprocess.run(["chown", user + ":" + user, path], check=True)
        os.chmod(path, 0o644)
        spend, result = self.run_as(self.users[1])
        self.assertIn("not trusted", result.stderr)
        samples = self.team_samples()
        self.assertEqual(samples["spendcap_team_runs_finished_total"][0][1], 1)
        self.assertAlmostEqual(samples["spendcap_team_spend_usd_total"][0][1], spend, places=5)
        self.assertNotEqual(os.stat(path).st_uid, int(subprocess.check_output(
            ["id", "-u", user]).decode()))
        # Control: a file of the runner's group, as spendcap writes it, is carried over.
        spend2, result = self.run_as(user)
        self.assertNotIn("not trusted", result.stderr)
        samples = self.team_samples()
        self.assertEqual(samples["spendcap_team_runs_finished_total"][0][1], 2)
        self.assertAlmostEqual(samples["spendcap_team_spend_usd_total"][0][1], spend + spend2,
                               places=5)

    def test_a_directory_everyone_writes_is_refused_under_the_lock(self):
        os.chmod(self.mdir, 0o3777)
        result = self.spendcap(self.users[0], ["run", "--team", "vision", "--", "true"])
        self.assertEqual(result.returncode, 125, result.stderr)
        self.assertIn("everyone may write it", result.stderr)
        os.chmod(self.mdir, 0o2770)  # control: the install's mode runs
        result = self.spendcap(self.users[0], ["run", "--team", "vision", "--", "true"])
        self.assertEqual(result.returncode, 0, result.stderr)


if __name__ == "__main__":
    unittest.main()
