"""What the user sees around runs (issue 15, the admin items): short run ids for `stop`, `stop
--list`, a status file for every outcome, `budgets` and `ps` that read like sreport and squeue,
help that teaches, every key that does nothing yet named (and refused in a locked policy), and team
membership checked with real users and groups (needs root: see test_shared_runner)."""
import json
import os
import re
import subprocess
import sys
import unittest

from spendcap_testlib import FIXTURES, LedgerTest, wait_until

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_shared_runner as shared  # noqa: E402  (its setgid runner, reused)

EVERY_KEY = os.path.join(FIXTURES, "policies", "every_key.json")
SLEEP = ["--", "python3", "-c", "import time; time.sleep(120)"]


def stop_process(process):
    if process.poll() is None:
        process.kill()
    process.communicate()


class ShortIdTest(LedgerTest):
    def start_run(self):
        process = self.start_spendcap(["run", "--rate", "1", "--budget", "10", "--sync", "1s",
                                       "--status-file", self.path("status.json")] + SLEEP)
        self.addCleanup(stop_process, process)
        wait_until(lambda: self.runs("status = 'running'") or process.poll() is not None, 60,
                   what="the run's ledger row")
        self.assertIsNone(process.poll(), "the run ended early")
        return process, self.runs("status = 'running'")[0]["id"]

    def test_an_eight_character_prefix_stops_the_run(self):
        process, run_id = self.start_run()
        ps = self.run_spendcap(["ps"])
        self.assertIn(run_id[:8], ps.stdout)
        result = self.run_spendcap(["stop", "--run", run_id[:8], "--reason", "test"])
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("run:" + run_id, result.stdout)
        listed = self.run_spendcap(["stop", "--list"])
        self.assertEqual(listed.returncode, 0, listed.stderr)
        # Listed while the run runs; once it has stopped the order is spent and not listed
        # (issue 24), which on a loaded host can come first.
        if "no active stop orders" not in listed.stdout or not self.runs("status != 'running'"):
            self.assertIn("run:" + run_id[:8], listed.stdout)
            self.assertIn("test", listed.stdout)
        process.communicate(timeout=60)
        self.assertEqual(process.returncode, 123)
        self.assertEqual(self.read_json("status.json")["reason"], "stop-order")

    def test_an_unknown_prefix_fails_and_leaves_no_order(self):
        process, run_id = self.start_run()
        unknown = "0" * 8 if not run_id.startswith("0" * 8) else "f" * 8
        result = self.run_spendcap(["stop", "--run", unknown])
        self.assertEqual(result.returncode, 125, result.stdout)
        self.assertIn("spendcap ps", result.stderr)
        listed = self.run_spendcap(["stop", "--list"])
        self.assertIn("no active stop orders", listed.stdout)
        import sqlite3
        connection = sqlite3.connect(self.ledger_file())
        try:
            orders = connection.execute("SELECT COUNT(*) FROM stop_orders").fetchone()[0]
        finally:
            connection.close()
        self.assertEqual(orders, 0, "an order was left behind")
        # Any unique prefix: the ledger has one run, so its first character is one.
        result = self.run_spendcap(["stop", "--run", run_id[:1]])
        self.assertEqual(result.returncode, 0, result.stderr)
        process.communicate(timeout=60)
        self.assertEqual(process.returncode, 123)


class StatusFileTest(LedgerTest):
    """--status-file is written, as valid JSON, whatever the outcome."""

    def outcome(self, args, extra_env=None):
        status = self.path("status.json")
        if os.path.exists(status):
            os.unlink(status)
        result = self.run_spendcap(["run", "--status-file", status] + args, extra_env=extra_env)
        self.assertTrue(os.path.exists(status), "no status file after exit %d: %s"
                        % (result.returncode, result.stderr))
        with open(status) as f:
            document = json.load(f)
        self.assertEqual(document["exit_code"], result.returncode, document)
        return result.returncode, document

    def test_every_exit_code_leaves_a_status_file(self):
        code, document = self.outcome(["--rate", "1", "--budget", "10", "--", "true"])
        self.assertEqual((code, document["status"]), (0, "succeeded"))
        # 120: the shutdown reserve does not fit the budget.
        code, document = self.outcome(["--rate", "36", "--budget", "0.01", "--", "true"])
        self.assertEqual((code, document["status"]), (120, "refused"))
        # 124: a budget trip.
        code, document = self.outcome(["--rate", "3600", "--budget", "5", "--grace", "1s",
                                       "--kill-after", "1s", "--interval", "100ms", "--",
                                       "python3", "-c", "import time; time.sleep(120)"])
        self.assertEqual(code, 124, document)
        # 125: usage errors, in spendcap's checks and in the command line itself.
        for args in (["--rate", "1", "--budget", "10", "--grace", "soon", "--", "true"],
                     ["--rate", "1", "--budget", "10"],
                     ["--rate", "1", "--budget", "10", "--no-such-flag", "--", "true"]):
            with self.subTest(args=args):
                code, document = self.outcome(args)
                self.assertEqual(code, 125, document)
                self.assertIsNone(document["run_id"])
                self.assertIsNone(document["rate_per_hour"], "not known: null, never 0")
                self.assertTrue(document["message"])
        code, document = self.outcome(["--rate", "1", "--budget", "10"])
        self.assertIn("give the command after --", document["message"])
        # 126 and 127.
        script = self.path("not-executable.sh")
        with open(script, "w") as f:
            f.write("#!/bin/sh\ntrue\n")
        os.chmod(script, 0o644)
        code, document = self.outcome(["--rate", "1", "--budget", "10", "--", script])
        self.assertEqual((code, document["reason"]), (126, "command-not-executable"))
        code, document = self.outcome(["--rate", "1", "--budget", "10", "--", "no-such-cmd-x"])
        self.assertEqual((code, document["reason"]), (127, "command-not-found"))

    def test_123_a_stop_order_leaves_a_status_file(self):
        status = self.path("stopped.json")
        process = self.start_spendcap(["run", "--rate", "1", "--budget", "10", "--sync", "1s",
                                       "--team", "t1", "--status-file", status] + SLEEP)
        self.addCleanup(stop_process, process)
        wait_until(lambda: self.runs("status = 'running'") or process.poll() is not None, 60,
                   what="the run's ledger row")
        result = self.run_spendcap(["stop", "--team", "t1"])
        self.assertEqual(result.returncode, 0, result.stderr)
        process.communicate(timeout=60)
        self.assertEqual(process.returncode, 123)
        with open(status) as f:
            self.assertEqual(json.load(f)["exit_code"], 123)

    def test_an_unwritable_path_fails_before_the_job_runs(self):
        marker = self.path("job-ran")
        job = ["--", "python3", "-c", "open(%r, 'w').close()" % marker]
        for path in (self.path("no-such-dir/status.json"), self.tmp):
            with self.subTest(path=path):
                result = self.run_spendcap(["run", "--rate", "1", "--budget", "10",
                                            "--status-file", path] + job)
                self.assertEqual(result.returncode, 125, result.stderr)
                self.assertEqual(result.stderr.count("--status-file"), 1, result.stderr)
                self.assertFalse(os.path.exists(marker), "the job ran")
        # The negative control: a writable path runs the job.
        result = self.run_spendcap(["run", "--rate", "1", "--budget", "10", "--status-file",
                                    self.path("ok.json")] + job)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertTrue(os.path.exists(marker))


class ReadLikeSlurmTest(LedgerTest):
    def test_budgets_show_used_held_and_available_and_ps_shows_live_spend(self):
        self.write_policy({"budgets": {"team": {"t1": {"amount": 100}}}})
        process = self.start_spendcap(["run", "--team", "t1", "--rate", "3600", "--budget", "50",
                                       "--sync", "1s", "--grace", "1s", "--kill-after", "1s"]
                                      + SLEEP)
        self.addCleanup(stop_process, process)
        wait_until(lambda: self.runs("status = 'running'") or process.poll() is not None, 60,
                   what="the run's ledger row")
        budgets = self.run_spendcap(["budgets"])
        self.assertEqual(budgets.returncode, 0, budgets.stderr)
        header = budgets.stdout.splitlines()[0].split()
        for column in ("USED", "USED%", "HELD", "AVAILABLE", "MEMBERS"):
            self.assertIn(column, header)
        (team,) = [b for b in self.spendcap_json(["budgets"]) if b["scope"] == "team:t1"]
        self.assertLess(team["used"], team["held"], "USED is what was spent, not what is held")
        self.assertAlmostEqual(team["available"], 100 - team["spent"] - team["ceilings"], places=4)
        # HELD is the ceilings less their spend so far: the columns sum to the budget.
        self.assertAlmostEqual(team["used"] + team["held"] + team["available"], 100, places=4)
        # $1 a second: ps, read between heartbeats, is ahead of the last heartbeat.
        def ahead():
            (run,) = self.spendcap_json(["ps"])
            return run["live_spend"] > run["spend"] and run
        run = wait_until(ahead, 30, what="ps to show spend past the last heartbeat")
        self.assertLessEqual(run["live_spend"], run["ceiling"])

    def test_budgets_policy_shows_what_the_file_applies(self):
        policy = self.write_policy({"budgets": {"team": {"t9": {"amount": 7}}}}, "other.json")
        result = self.run_spendcap(["budgets", "--policy", policy])
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("team:t9", result.stdout)
        self.assertIn("$7.00", result.stdout)


class HelpTest(LedgerTest):
    def test_help_teaches(self):
        main = self.run_spendcap(["--help"])
        run = self.run_spendcap(["run", "--help"])
        stop = self.run_spendcap(["stop", "--help"])
        for result in (main, run, stop):
            self.assertEqual(result.returncode, 0, result.stderr)
        self.assertRegex(main.stdout, r"Usage: spendcap ")
        self.assertNotIn("/", main.stdout.splitlines()[1] if main.stdout else "")
        for flag, hint in (("--rate", "USD_PER_HOUR"), ("--grace", "DURATION"),
                           ("--budget", "USD"), ("--status-file", "FILE")):
            self.assertRegex(run.stdout, re.escape(flag) + r"\s+" + hint)
        self.assertNotIn(" TEXT", run.stdout)
        for result in (main, run):
            self.assertEqual(result.stdout.count("Exit status:"), 1)
            self.assertIn("SIGQUIT", result.stdout)
        self.assertNotIn("Exit status:", stop.stdout)
        self.assertIn("--list", stop.stdout)

    def test_a_missing_command_says_where_it_goes(self):
        result = self.run_spendcap(["run", "--rate", "1", "--budget", "1"])
        self.assertEqual(result.returncode, 125)
        self.assertIn("give the command after --", result.stderr)


class KeysWithoutEffectTest(LedgerTest):
    def marked_keys(self):
        result = self.run_spendcap(["policy", "keys"])
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("/budgets/*/*/amount", result.stdout)
        return [line.split()[0] for line in result.stdout.splitlines() if "no effect yet" in line]

    @staticmethod
    def pattern(path):
        return re.compile("^" + "/".join("[^/:]+" if part == "*" else re.escape(part)
                                         for part in path.split("/")) + ":", re.M)

    def test_policy_check_names_every_key_that_does_nothing_yet(self):
        with open(EVERY_KEY) as f:
            document = json.load(f)
        marked = self.marked_keys()
        check = self.run_spendcap(["policy", "check", EVERY_KEY])
        self.assertEqual(check.returncode, 0, check.stderr)
        warnings = "\n".join(line.split(": warning: ", 1)[1]
                             for line in check.stdout.splitlines() if ": warning: " in line)
        for path in marked:
            with self.subTest(key=path):
                self.assertTrue(self.sets(document, path.split("/")[1:]),
                                "every_key.json does not set %s: add it" % path)
                self.assertRegex(warnings, self.pattern(path))
        # Nothing else is said to have no effect (a key that acts is not warned about).
        for line in warnings.splitlines():
            self.assertTrue(any(self.pattern(path).match(line) for path in marked), line)

    def sets(self, node, parts):
        if not parts:
            return True
        if not isinstance(node, dict):
            return False
        if parts[0] == "*":
            return any(self.sets(child, parts[1:]) for child in node.values())
        return parts[0] in node and self.sets(node[parts[0]], parts[1:])

    def test_a_locked_policy_refuses_every_key_that_does_nothing_yet(self):
        marked = self.marked_keys()
        with open(EVERY_KEY) as f:
            document = json.load(f)
        document.update(locked=True, ledger="sqlite:" + self.path("l.db"))
        locked = self.write_policy(document, "locked.json")
        check = self.run_spendcap(["policy", "check", locked])
        if not marked:
            self.assertEqual(check.returncode, 0, check.stderr)
            return
        self.assertEqual(check.returncode, 125, check.stdout)
        for path in marked:
            with self.subTest(key=path):
                self.assertRegex(check.stderr, re.compile(
                    self.pattern(path).pattern[1:].rstrip(":") + r": is not implemented yet"))
        # The negative control: the same policy without those keys is a valid locked policy.
        with open(EVERY_KEY) as f:
            clean = json.load(f)
        clean.update(locked=True, ledger="sqlite:" + self.path("l.db"))
        for path in marked:
            self.remove(clean, path.split("/")[1:])
        check = self.run_spendcap(["policy", "check", self.write_policy(clean, "clean.json")])
        self.assertEqual(check.returncode, 0, check.stderr)

    def remove(self, node, parts):
        if not isinstance(node, dict):
            return
        keys = list(node) if parts[0] == "*" else [parts[0]]
        for key in keys:
            if key not in node:
                continue
            if len(parts) == 1:
                del node[key]
            else:
                self.remove(node[key], parts[1:])


MEMBERS = dict(shared.LOCKED, budgets={"team": {
    "vision": {"amount": 100, "period": "month", "max_run": 10,
               "members": {"unix_groups": ["scvision"]}},
    "open": {"amount": 100, "period": "month"}}})


@unittest.skipIf(shared.WHY_NOT, shared.WHY_NOT or "")
class TeamMembershipTest(shared.SharedRunnerSetup):
    """Two real users on the setgid runner; only the first is in the team's group."""
    locked_policy = MEMBERS

    def setUp(self):
        super().setUp()
        member, outsider = self.users
        for argv in (["groupadd", "scvision"], ["usermod", "-aG", "scvision", member]):
            result = self.inside(argv)
            self.assertEqual(result.returncode, 0, result.stderr)
        self.member, self.outsider = member, outsider

    def test_only_members_charge_runs_to_the_team_or_stop_its_runs(self):
        refused = self.spendcap(self.outsider, ["run", "--team", "vision", "--", "true"])
        self.assertEqual(refused.returncode, 125, refused.stderr)
        self.assertIn("scvision", refused.stderr)
        self.assertEqual(self.root_sql("SELECT COUNT(*) FROM runs"), "0", "refused before the ledger")
        allowed = self.spendcap(self.member, ["run", "--team", "vision", "--", "true"])
        self.assertEqual(allowed.returncode, 0, allowed.stderr)
        # The negative control: a team without members takes anyone.
        other = self.spendcap(self.outsider, ["run", "--team", "open", "--", "true"])
        self.assertEqual(other.returncode, 0, other.stderr)

        stop = self.spendcap(self.outsider, ["stop", "--team", "vision"])
        self.assertEqual(stop.returncode, 125, stop.stderr)
        self.assertIn("scvision", stop.stderr)
        self.assertEqual(self.root_sql("SELECT COUNT(*) FROM stop_orders"), "0")
        stop = self.spendcap(self.member, ["stop", "--team", "vision"])
        self.assertEqual(stop.returncode, 0, stop.stderr)
        clear = self.spendcap(self.outsider, ["stop", "--clear", "--team", "vision"])
        self.assertEqual(clear.returncode, 125, clear.stderr)
        self.assertIn("scvision", clear.stderr)
        clear = self.spendcap(self.member, ["stop", "--clear", "--team", "vision"])
        self.assertEqual(clear.returncode, 0, clear.stderr)
        # A member's running run: an outsider may not stop it, even by its id.
        command = ["nsenter", "-t", str(self.holder.pid), "-m", "--", "setpriv", "--reuid",
                   self.member, "--regid", self.member, "--init-groups", self.bin, "run",
                   "--team", "vision", "--sync", "1s"] + SLEEP
        process = subprocess.Popen(command, env=self.user_env(self.member), cwd=self.tmp,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.addCleanup(stop_process, process)
        wait_until(lambda: self.root_sql("SELECT id FROM runs WHERE status = 'running'")
                   or process.poll() is not None, 60, what="the member's run")
        run_id = self.root_sql("SELECT id FROM runs WHERE status = 'running'")
        self.assertTrue(run_id, process.stderr.read() if process.poll() is not None else "")
        stop = self.spendcap(self.outsider, ["stop", "--run", run_id[:8]])
        self.assertEqual(stop.returncode, 125, stop.stderr)
        self.assertIn("scvision", stop.stderr)
        self.assertEqual(self.root_sql("SELECT COUNT(*) FROM stop_orders WHERE cleared_at IS NULL"),
                         "0")
        stop = self.spendcap(self.member, ["stop", "--run", run_id[:8]])
        self.assertEqual(stop.returncode, 0, stop.stderr)
        process.wait(timeout=60)
        self.assertEqual(process.returncode, 123)
        # The ledger keeps the members (budgets apply at install): the owner's view shows them.
        groups = self.root_sql("SELECT member_groups FROM budgets WHERE scope_name = 'vision'")
        self.assertEqual(json.loads(groups), ["scvision"])


if __name__ == "__main__":
    unittest.main()
