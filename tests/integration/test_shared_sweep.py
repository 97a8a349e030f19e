"""Shared-budget sweeps (issue 40 item 4): three runs started together on a $0.50 experiment
budget at the default claim horizon (5 min) are all admitted (a claim ahead takes at most a fair
share of a shared budget, grant_rule.hpp), spend no more than $0.50 together and leave little of
it unused (a limited run asks again before its trip and picks up what finished siblings
released); their start lines count the other runs; `budgets` sums (USED + HELD + AVAILABLE =
BUDGET) while they run. On SQLite as an ordinary user (as the test process where none can be
made), and on PostgreSQL (skipped without the test server).

Before the fix (the negative control: SPENDCAP_BIN=/work/main/build/spendcap) the first run held
the whole budget at the default horizon and the other two were refused (120)."""
import json
import os
import re
import subprocess
import unittest

from spendcap_testlib import LedgerTest, UserLedgerTest, wait_until, why_no_ordinary_user
from test_postgres_ledger import PG_URL, SKIP_REASON, ledger_url, psql

MICROS = 1_000_000
BUDGET = 0.50
# 36/h is $0.01 a second; grace 2s + kill-after 1s + 1 s of reaping slack: a $0.04 reserve each.
# The default sync (5 s) and claim horizon (5 min): a claim ahead is $3.04, six budgets.
RUN = ["run", "--experiment", "sweep", "--rate", "36", "--grace", "2s", "--kill-after", "1s"]
SLEEP = ["--", "python3", "-c", "import time; time.sleep(120)"]
# What three runs may leave unused: each run that trips keeps its reserve ($0.04) until it ends;
# measured here 16% ($0.42 spent: two reserves), where the issue measured 24% (three reserves)
# with a short horizon, and main's binary refused two of the three at the default horizon.
MAX_UNUSED = 0.18


def money(text):
    return float(text.lstrip("$"))


class SweepCase:
    """The sweep, for a ledger given by `ledger_args` (empty: the personal SQLite ledger)."""

    ledger_args = []

    def setup_budget(self):
        return self.write_policy({"budgets": {"experiment": {"sweep": {"amount": BUDGET,
                                                                         "period": "total"}}}})

    def final_rows(self):
        raise NotImplementedError

    def budgets_row(self):
        """The experiment's row of the `budgets` table, and its JSON."""
        table = self.run_spendcap(["budgets"] + self.ledger_args)
        self.assertEqual(table.returncode, 0, table.stderr)
        lines = table.stdout.splitlines()
        header = lines[0].split()
        (row,) = [line.split() for line in lines[1:] if line.startswith("experiment:sweep")]
        views = self.spendcap_json(["budgets"] + self.ledger_args)
        (view,) = [v for v in views if v["scope"] == "experiment:sweep"]
        return dict(zip(header, row)), view

    def assert_budgets_sum(self):
        cells, view = self.budgets_row()
        total = money(cells["USED"]) + money(cells["HELD"]) + money(cells["AVAILABLE"])
        # Four roundings, each within half the last digit printed (cents from a cent up).
        slack = sum(0.5 * 10 ** -len(cells[name].partition(".")[2])
                    for name in ("USED", "HELD", "AVAILABLE", "BUDGET"))
        self.assertAlmostEqual(total, money(cells["BUDGET"]), delta=slack + 1e-9, msg=cells)
        self.assertAlmostEqual(view["used"] + view["held"] + view["available"], view["budget"],
                               places=6, msg=view)
        return view

    def test_three_runs_share_the_budget(self):
        # The ledger is made first: three first opens of a new SQLite ledger at one moment can
        # race (one run got "unable to open database file", 125, once in CI), a fault of its own
        # that this case does not test.
        made = self.run_spendcap(["budgets"] + self.ledger_args)
        self.assertEqual(made.returncode, 0, made.stderr)
        processes = [self.start_spendcap(RUN + self.ledger_args + ["--status-file",
                                                                     self.path("s%d.json" % n)]
                                         + SLEEP, stdout=subprocess.DEVNULL)
                     for n in range(3)]
        for process in processes:
            self.addCleanup(lambda p=process: p.poll() is None and p.kill())
        # While they run, the budgets table sums, with something held.
        wait_until(lambda: len([r for r in self.final_rows() if r["status"] == "running"]) == 3
                   or any(p.poll() is not None for p in processes), 60, interval=0.1,
                   what="three running runs")
        running = self.assert_budgets_sum()
        errors = []
        for process in processes:
            _, err = process.communicate(timeout=120)
            errors.append(err)
        codes = [p.returncode for p in processes]
        rows = self.final_rows()
        spend = sum(row["spend_micros"] for row in rows) / MICROS
        unused = BUDGET - spend
        print("\nsweep: exit codes %s, spend %s, total $%.4f, %.1f%% unused; start lines:\n%s"
              % (codes, [row["spend_micros"] / MICROS for row in rows], spend,
                 100 * unused / BUDGET, "\n".join(e.splitlines()[0] for e in errors if e)))
        self.assertEqual(codes, [124, 124, 124], "all three admitted and tripped on the budget:\n"
                         + "\n".join(errors))
        self.assertGreater(running["held"], 0, "running runs hold something")
        for row in rows:
            self.assertEqual(row["reason"], "budget:experiment:sweep")
        self.assertLessEqual(spend, BUDGET, "the hard cap")
        self.assertLessEqual(unused, MAX_UNUSED * BUDGET, "little of the budget left unused")
        # Each run's spend is a fair part: none got less than half of an equal third.
        for row in rows:
            self.assertGreater(row["spend_micros"] / MICROS, BUDGET / 6, row)
        # The start lines count the other runs on the experiment.
        starts = [re.search(r"started: [^\n]*", err).group(0) for err in errors]
        def others_in(line):
            found = re.search(r"fair share with (\d+) other", line)
            return int(found.group(1)) if found else 0 if "the only run on it" in line else None
        sharing = sorted(others_in(line) for line in starts)
        self.assertEqual(sharing, [0, 1, 2], starts)
        for line in starts:
            self.assertIn("(budget:experiment:sweep", line)
        # After the sweep nothing is held and the table still sums.
        ended = self.assert_budgets_sum()
        self.assertEqual(ended["held"], 0)
        self.assertAlmostEqual(ended["used"], spend, places=5)


@unittest.skipIf(why_no_ordinary_user(), why_no_ordinary_user())
class SqliteSweepAsUserTest(SweepCase, UserLedgerTest):
    def setUp(self):
        super().setUp()
        self.setup_budget()  # the personal policy: run applies it

    def final_rows(self):
        return self.runs("experiment = 'sweep'")


@unittest.skipUnless(why_no_ordinary_user(), "runs as an ordinary user instead")
class SqliteSweepTest(SweepCase, LedgerTest):
    def setUp(self):
        super().setUp()
        self.setup_budget()  # the personal policy: run applies it

    def final_rows(self):
        return self.runs("experiment = 'sweep'")


@unittest.skipUnless(PG_URL, SKIP_REASON)
class PostgresSweepTest(SweepCase, LedgerTest):
    def setUp(self):
        super().setUp()
        self.schema = "sweep_" + os.urandom(5).hex()
        self.ledger_args = ["--ledger", ledger_url(self.schema)]
        policy = self.setup_budget()
        applied = self.run_spendcap(["budgets", "apply"] + self.ledger_args + [policy])
        self.assertEqual(applied.returncode, 0, applied.stderr)
        os.remove(policy)  # the ledger holds the budget: no personal policy on top
        self.addCleanup(psql, "DROP SCHEMA IF EXISTS %s CASCADE" % self.schema, None, False)

    def final_rows(self):
        out = psql("SELECT row_to_json(r) FROM %s.runs r WHERE experiment = 'sweep' "
                   "ORDER BY started_at" % self.schema).stdout
        return [json.loads(line) for line in out.splitlines() if line]


if __name__ == "__main__":
    unittest.main()
