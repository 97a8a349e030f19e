"""Who may stop and accept whose runs (issue 19, item 2), with real users and real processes.

On the setgid shared runner (scripts/install-shared-runner.sh, /etc overlaid in a private mount
namespace as test_shared_runner.py does): a non-member's `stop` by every scope kind, and its
`accept`, are refused (125) and reach nothing; the member's run then finishes by itself and the
next one starts; a member's stop works and a member clears it; a user places and clears an order
on their own scope. On PostgreSQL the server holds the same rule against psql in a runner's hands:
each function called directly with made-up values is refused, and the negative controls (the run's
own role, a member role) go through."""
import os
import subprocess
import sys
import unittest
import uuid

import test_shared_runner as shared
from spendcap_testlib import user_tool, wait_until

sys.path.insert(0, os.path.dirname(__file__))

# The job: runs until the test creates the file named by its first argument.
WAIT_JOB = ["python3", "-c",
            "import os, sys, time\n"
            "while not os.path.exists(sys.argv[1]): time.sleep(0.05)", ]

ACCESS = dict(shared.LOCKED, budgets={
    "team": {"vision": {"amount": 100, "period": "month", "max_run": 10,
                        "members": {"unix_groups": ["scvision"]}}},
    "experiment": {"e1": {"amount": 100, "period": "month"}},
    "project": {"p1": {"amount": 100, "period": "month",
                       "members": {"unix_groups": ["scvision"]}}}})

SCOPE_KINDS = ("--team", "--experiment", "--project", "--user", "--run", "--job")


def stop_process(process):
    if process.poll() is None:
        process.kill()
    process.communicate(timeout=30)


@unittest.skipIf(shared.WHY_NOT, shared.WHY_NOT or "")
class SharedRunnerAccessTest(shared.SharedRunnerSetup):
    """alice and carol are in the team's group, bob is not; all three are real users."""
    locked_policy = ACCESS

    def setUp(self):
        super().setUp()
        self.alice, self.bob = self.users
        self.carol = "sc" + uuid.uuid4().hex[:10]
        for argv in (["useradd", "--no-create-home", "--user-group", self.carol],
                     ["groupadd", "scvision"], ["usermod", "-aG", "scvision", self.alice],
                     ["usermod", "-aG", "scvision", self.carol]):
            result = user_tool(argv, self.inside)  # only in the overlaid /etc: gone with it
            self.assertEqual(result.returncode, 0, result.stderr)
        uid = self.inside(["id", "-u", self.carol]).stdout.strip()
        home = os.path.join(self.tmp, self.carol)
        for sub in ("", "/tmp", "/state", "/data", "/config"):
            os.mkdir(home + sub)
            os.chown(home + sub, int(uid), int(uid))

    def start_run(self, user, args, release):
        command = ["nsenter", "-t", str(self.holder.pid), "-m", "--", "setpriv", "--reuid", user,
                   "--regid", user, "--init-groups", self.bin, "run", "--sync", "1s"] + args + \
                  ["--"] + WAIT_JOB + [release]
        process = subprocess.Popen(command, env=self.user_env(user), cwd=self.tmp,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.addCleanup(stop_process, process)
        wait_until(lambda: self.root_sql("SELECT id FROM runs WHERE status = 'running'")
                   or process.poll() is not None, 60, what="the run's ledger row")
        run_id = self.root_sql("SELECT id FROM runs WHERE status = 'running'")
        self.assertTrue(run_id, process.stderr.read() if process.poll() is not None else "")
        return process, run_id

    def test_a_non_member_reaches_nothing_a_member_stops(self):
        a, b, c = self.alice, self.bob, self.carol
        first = self.spendcap(a, ["run", "--team", "vision", "--experiment", "e1", "--project",
                                  "p1", "--", "true"])
        self.assertEqual(first.returncode, 0, first.stderr)
        finished = self.root_sql("SELECT id FROM runs WHERE status = 'succeeded'")
        release = os.path.join(self.tmp, "release-1")
        process, run_id = self.start_run(a, ["--team", "vision", "--experiment", "e1",
                                             "--project", "p1", "--job-key", "jk1"], release)

        # bob, outside the team: every kind of order that would reach alice's run is refused.
        targets = {"--team": "vision", "--experiment": "e1", "--project": "p1", "--user": a,
                   "--run": run_id[:8], "--job": "jk1"}
        for kind in SCOPE_KINDS:
            with self.subTest(kind=kind):
                stop = self.spendcap(b, ["stop", kind, targets[kind], "--reason", "bob's"])
                self.assertEqual(stop.returncode, 125, stop.stdout + stop.stderr)
                self.assertTrue(run_id[:8] in stop.stderr or "scvision" in stop.stderr,
                                stop.stderr)
        accept = self.spendcap(b, ["accept", finished, "--note", "bob's"])
        self.assertEqual(accept.returncode, 125, accept.stderr)
        self.assertIn("scvision", accept.stderr)
        self.assertEqual(self.root_sql("SELECT COUNT(*) FROM stop_orders"), "0")
        self.assertEqual(self.root_sql("SELECT COUNT(*) FROM accepted_results"), "0")
        # An order on a scope without running runs is refused too where it would block others'
        # later runs: an experiment's budget that names no members is the owner's to stop.
        future = self.spendcap(b, ["stop", "--experiment", "someone-elses"])
        self.assertEqual(future.returncode, 125, future.stderr)
        self.assertIn("only the ledger's owner", future.stderr)
        # bob may order his own scope, and clear it himself.
        own = self.spendcap(b, ["stop", "--user", b, "--reason", "mine"])
        self.assertEqual(own.returncode, 0, own.stderr)
        self.assertIn("0 running wrappers", own.stdout)
        cleared = self.spendcap(b, ["stop", "--clear", "--user", b])
        self.assertEqual(cleared.returncode, 0, cleared.stderr)
        self.assertIn("cleared 1 stop order", cleared.stdout)

        # alice's run was reached by none of it: it ends by itself, and her next run starts.
        open(release, "w").close()
        self.assertEqual(process.wait(timeout=60), 0, process.stderr.read())
        self.assertEqual(self.root_sql("SELECT status FROM runs WHERE id = '%s'" % run_id),
                         "succeeded")
        again = self.spendcap(a, ["run", "--team", "vision", "--", "true"])
        self.assertEqual(again.returncode, 0, again.stderr)

        # The negative control: carol, a member, stops alice's running run, and a member (alice)
        # clears carol's order; bob may not clear it.
        release = os.path.join(self.tmp, "release-2")
        process, run_id = self.start_run(a, ["--team", "vision"], release)
        stop = self.spendcap(c, ["stop", "--team", "vision", "--reason", "carol's"])
        self.assertEqual(stop.returncode, 0, stop.stderr)
        self.assertIn("1 running wrapper", stop.stdout)
        self.assertEqual(process.wait(timeout=60), 123, "the member's order stopped the run")
        refused = self.spendcap(a, ["run", "--team", "vision", "--", "true"])
        self.assertEqual(refused.returncode, 120, refused.stderr)
        clear = self.spendcap(b, ["stop", "--clear", "--team", "vision"])
        self.assertEqual(clear.returncode, 125, clear.stderr)
        self.assertIn("placed by " + c, clear.stderr)
        clear = self.spendcap(a, ["stop", "--clear", "--team", "vision"])
        self.assertEqual(clear.returncode, 0, clear.stderr)
        started = self.spendcap(a, ["run", "--team", "vision", "--", "true"])
        self.assertEqual(started.returncode, 0, started.stderr)
        # ...and a member accepts a teammate's result, as the run's own user does.
        for user in (c, a):
            accept = self.spendcap(user, ["accept", finished, "--note", user])
            self.assertEqual(accept.returncode, 0, accept.stderr)
        self.assertEqual(self.root_sql("SELECT accepted_by FROM accepted_results").split("@")[0],
                         a)


import test_postgres_ledger as pg  # noqa: E402


@unittest.skipUnless(pg.PG_URL, pg.SKIP_REASON)
class PostgresAccessTest(pg.PostgresLedgerTest):
    """Runner roles alice, bob, carol (carol in the member role of team vision); psql calls to
    the ledger's functions with made-up values, as a runner could make them."""

    def setUp(self):
        super().setUp()
        s = self.suffix
        self.owner, self.alice, self.bob, self.carol = ("own_" + s, "alice_" + s, "bob_" + s,
                                                        "carol_" + s)
        self.members = "vis_" + s
        pg.psql("DO $$ BEGIN CREATE ROLE spendcap_runner NOLOGIN; "
                "EXCEPTION WHEN duplicate_object THEN NULL; END $$")
        pg.psql("CREATE ROLE %s LOGIN; CREATE ROLE %s NOLOGIN; "
                "CREATE ROLE %s LOGIN IN ROLE spendcap_runner; "
                "CREATE ROLE %s LOGIN IN ROLE spendcap_runner; "
                "CREATE ROLE %s LOGIN IN ROLE spendcap_runner, %s; "
                "CREATE SCHEMA %s AUTHORIZATION %s"
                % (self.owner, self.members, self.alice, self.bob, self.carol, self.members,
                   self.schema, self.owner))
        self.write_policy({"budgets": {
            "team": {"vision": {"amount": 10, "period": "day",
                                "members": {"unix_groups": [self.members]}}},
            "experiment": {"e1": {"amount": 10, "period": "day"}}}})
        applied = self.as_role(self.owner, ["budgets", "apply", self.path("spendcap.json")])
        self.assertEqual(applied.returncode, 0, applied.stderr)

    def as_role(self, role, args, **kwargs):
        args = list(args)
        at = args.index("--") if "--" in args else len(args)  # before the command, if any
        args[at:at] = ["--ledger", pg.ledger_url(self.schema, role)]
        return self.run_spendcap(args, **kwargs)

    def refused(self, role, sql):
        done = pg.psql(sql, user=role, check=False)
        self.assertNotEqual(done.returncode, 0, "the server let %s run: %s" % (role, sql))
        self.assertIn("ERROR", done.stderr)
        return done.stderr

    def state(self):
        s = self.schema
        return {table: self.pg_rows("SELECT * FROM %s.%s ORDER BY 1" % (s, table))
                for table in ("stop_orders", "accepted_results", "outbox", "run_webhooks")}

    def test_the_server_refuses_a_runner_the_others_runs(self):
        s = self.schema
        # alice's runs have no team: only alice's role and the owner's may stop or accept them.
        done = self.as_role(self.alice, ["run", "--experiment", "e1", "--rate", "36",
                                         "--budget", "0.5", "--grace", "0s", "--kill-after", "1s", "--",
                                         "true"])
        self.assertEqual(done.returncode, 0, done.stderr)
        finished = [r for r in self.pg_runs().values() if r["status"] == "succeeded"][0]["id"]
        release = self.path("release")
        process = self.start_spendcap(
            ["run", "--experiment", "e1", "--job-key", "jk_" + self.suffix, "--rate", "36",
             "--budget", "1", "--sync", "1s", "--grace", "0s", "--kill-after", "1s",
             "--ledger", pg.ledger_url(s, self.alice), "--"] + WAIT_JOB + [release],
            stdout=subprocess.DEVNULL)
        self.addCleanup(stop_process, process)
        wait_until(lambda: any(r["status"] == "running" for r in self.pg_runs().values())
                   or process.poll() is not None, 60, what="alice's running run")
        running = [r for r in self.pg_runs().values() if r["status"] == "running"][0]["id"]

        # Through spendcap (all three are this Unix user, so only the server tells them apart).
        stop = self.as_role(self.bob, ["stop", "--run", running[:8]])
        self.assertEqual(stop.returncode, 125, stop.stderr)
        self.assertIn("admitted by " + self.alice, stop.stderr)
        accept = self.as_role(self.bob, ["accept", finished])
        self.assertEqual(accept.returncode, 125, accept.stderr)
        self.assertIn("admitted by " + self.alice, accept.stderr)

        before = self.state()
        made_up = "'bob-said-so', 'alice@made-up-host', 0"
        for kind, name in (("run", running), ("user", self.alice), ("experiment", "e1"),
                           ("job", "jk_" + self.suffix), ("team", "vision"),
                           ("project", "nobody-owns-this")):
            with self.subTest(kind=kind):
                self.refused(self.bob, "SELECT %s.spendcap_place_stop_order('%s', '%s', %s)"
                             % (s, kind, name, made_up))
        self.refused(self.bob, "SELECT %s.spendcap_accept_result('%s', 'x', 'alice@h', 0)"
                     % (s, finished))
        self.refused(self.bob, "SELECT %s.spendcap_put_run_webhooks('%s', "
                     "'[{\"destination\": \"env:X\", \"format\": \"json\", \"secret_env\": \"\"}]')"
                     % (s, running))
        told = pg.psql("SELECT %s.spendcap_tell_lost_run('%s', 0, '[{\"event\": \"lost\"}]')"
                       % (s, finished), user=self.bob)
        self.assertEqual(told.stdout.strip(), "f", "a finished run is not told lost")
        for sql in ("INSERT INTO %s.run_webhooks VALUES ('x', '[]', NULL, 'x')" % s,
                    "UPDATE %s.run_webhooks SET lost_told_at = NULL" % s):
            self.assertIn("permission denied", self.refused(self.bob, sql))
        self.assertEqual(self.state(), before, "nothing changed")
        self.assertIsNone(process.poll(), "alice's run was reached")

        # Negative controls: the member role orders its team; bob may not clear that order, carol
        # may; alice's own role stops her run.
        pg.psql("SELECT %s.spendcap_place_stop_order('team', 'vision', 'carol''s', 'carol@h', 0)"
                % s, user=self.carol)
        self.refused(self.bob, "SELECT %s.spendcap_clear_stop_orders('team', 'vision', 0)" % s)
        cleared = pg.psql("SELECT %s.spendcap_clear_stop_orders('team', 'vision', 0)" % s,
                          user=self.carol)
        self.assertEqual(cleared.stdout.strip(), "1")
        stop = self.as_role(self.alice, ["stop", "--run", running[:8]])
        self.assertEqual(stop.returncode, 0, stop.stderr)
        self.assertEqual(process.wait(timeout=60), 123, "her own order stopped her run")
        again = self.as_role(self.alice, ["run", "--experiment", "e1", "--rate", "36",
                                          "--budget", "0.5", "--grace", "0s", "--kill-after", "1s", "--",
                                         "true"])
        self.assertEqual(again.returncode, 0, again.stderr)
        accept = self.as_role(self.alice, ["accept", finished])
        self.assertEqual(accept.returncode, 0, accept.stderr)


if __name__ == "__main__":
    unittest.main()
