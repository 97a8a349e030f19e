"""A budget trip after the job wrote its checkpoint is not all waste (issue 40 item 7): the work up
to the checkpoint is kept, so `spendcap report` counts as waste only the spend after it, spend x
(elapsed - written) / elapsed, in json and in the text table's WASTE column (read from the
rollups, which the ledger keeps by the same rule); a run stopped with `--checkpoint-signal none`
(no checkpoint) still counts its whole spend. As an ordinary user created for the test, with real
runs of tests/fixtures/train_like.py (it writes its checkpoint on SIGUSR1 and creates
$SPENDCAP_CHECKPOINT_DONE), on the SQLite ledger and, with a server (SPENDCAP_TEST_PG_URL), on
PostgreSQL.

Negative control: main's binary before the change gave the checkpointed run's whole spend as its
waste (json waste = spend, waste_share 1.0), and fails this test."""
import json
import math
import os
import shutil
import unittest
import uuid

from spendcap_testlib import FIXTURES, UserLedgerTest, why_no_ordinary_user
from test_postgres_ledger import PG_URL, SKIP_REASON, ledger_url, psql

NO_USER = why_no_ordinary_user()
MICROS = 1_000_000

# $1/s; with --grace 5s --kill-after 1s the reserve is $7, so --budget 10 trips at about 3 s. The
# grace is far longer than the checkpoint takes (train_like writes it at its next 0.1 s step).
TRIP = ["--rate", "3600", "--budget", "10", "--grace", "5s", "--kill-after", "1s"]


def wasted(spend_micros, elapsed, written):
    """The rule (ledger/waste.hpp), as the ledger's micro-units: rounded down, within [0, spend]."""
    if written is None or elapsed is None or not elapsed > 0 or not written > 0:
        return spend_micros
    if written >= elapsed:
        return 0
    return max(0, min(spend_micros, math.floor(spend_micros * (elapsed - written) / elapsed)))


@unittest.skipIf(NO_USER, NO_USER or "")
class CheckpointWasteCase(UserLedgerTest):
    ledger_args = []

    def setUp(self):
        super().setUp()
        # The job in the test's directory, the user's (a clean clone may be unreadable to them).
        self.job = self.path("train_like.py")
        shutil.copy(os.path.join(FIXTURES, "train_like.py"), self.job)
        os.chown(self.job, self.uid, self.gid)
        self.team = "t" + uuid.uuid4().hex[:8]

    def run_tripped(self, experiment, extra=()):
        """One run of train_like tripped by its budget; its id."""
        result = self.run_spendcap(
            ["run"] + self.ledger_args + ["--team", self.team, "--experiment", experiment] +
            TRIP + list(extra) + ["--", "python3", self.job, "--step-seconds", "0.1"])
        self.assertEqual(result.returncode, 124, result.stderr)
        runs = self.spendcap_json(["runs"] + self.ledger_args +
                                  ["--team", self.team, "--experiment", experiment])
        self.assertEqual(len(runs), 1, runs)
        return runs[0]["id"]

    def stored(self, run_id):
        """(status, spend_micros, elapsed_seconds, checkpoint_written_seconds) as stored."""
        raise NotImplementedError

    def test_a_checkpointed_trip_wastes_only_the_spend_after_the_checkpoint(self):
        kept = self.run_tripped("ckpt")
        whole = self.run_tripped("nockpt", ["--checkpoint-signal", "none"])

        # What the user sees of the two runs: the checkpoint written, and not.
        shown = self.spendcap_json(["show"] + self.ledger_args + [kept])
        self.assertEqual(shown["status"], "killed", shown)
        self.assertTrue(shown["checkpoint"]["written"], shown)
        written_after = shown["checkpoint"]["written_after_seconds"]
        self.assertGreater(written_after, 1.0, shown)  # the trip came seconds in
        unkept = self.spendcap_json(["show"] + self.ledger_args + [whole])
        self.assertFalse(unkept["checkpoint"]["written"], unkept)

        status, spend, elapsed, written = self.stored(kept)
        self.assertEqual(status, "killed")
        self.assertIsNotNone(written)
        expected = wasted(spend, elapsed, written)
        status, whole_spend, _, whole_written = self.stored(whole)
        self.assertEqual((status, whole_written), ("killed", None))

        report = json.loads(self.run_ok(["report"] + self.ledger_args + [
            "--team", self.team, "--by", "experiment", "--format", "json"]).stdout)
        groups = {g["group"]["experiment"]: g for g in report["groups"]}
        ckpt, nockpt = groups["ckpt"], groups["nockpt"]
        self.assertEqual((ckpt["killed"], nockpt["killed"]), (1, 1))
        self.assertEqual(round(ckpt["spend"] * MICROS), spend)
        # The rule to the micro-unit, and what it means: well below the spend (the job exits at
        # its next step after the signal, so most of the run's work was kept).
        self.assertEqual(round(ckpt["waste"] * MICROS), expected, (ckpt, elapsed, written))
        self.assertLess(ckpt["waste"], ckpt["spend"] / 4, ckpt)
        self.assertGreater(ckpt["waste"], 0, ckpt)
        # The share is the part of the run after the checkpoint, whose time `show` gives (to the
        # millisecond; its duration is the ledger's, from admission, not the launch).
        self.assertAlmostEqual(written_after, written, delta=0.001)
        self.assertAlmostEqual(ckpt["waste_share"], (elapsed - written) / elapsed, delta=1e-4)
        # No checkpoint: the whole spend is waste.
        self.assertEqual(round(nockpt["waste"] * MICROS), whole_spend)
        self.assertAlmostEqual(nockpt["waste_share"], 1.0)
        self.assertEqual(round(report["total"]["waste"] * MICROS), expected + whole_spend)

        # The text table's WASTE column says the same, to the decimals it shows (the column's:
        # cents, or 4 or 6 where a cell of it is below a cent).
        table = self.run_ok(["report"] + self.ledger_args +
                            ["--team", self.team, "--by", "experiment"]).stdout
        lines = table.splitlines()
        header = [word.lower() for word in lines[0].split()]
        column = header.index("waste")
        rows = {line.split()[0]: line.split() for line in lines[1:] if line.split()}

        def shown_money(text):
            self.assertTrue(text.startswith("$"), table)
            return float(text[1:].replace(",", ""))

        def rounding(text):
            """Half the last shown digit: how far a shown amount may be from the exact one."""
            return 0.5 * 10 ** -len(text.rpartition(".")[2]) + 1e-9
        shown = rows["ckpt"][column]
        self.assertAlmostEqual(shown_money(shown), expected / MICROS, delta=rounding(shown),
                               msg=table)
        self.assertLess(shown_money(rows["ckpt"][column]),
                        shown_money(rows["ckpt"][header.index("spend")]) / 4, table)
        self.assertAlmostEqual(shown_money(rows["nockpt"][column]), whole_spend / MICROS,
                               delta=0.01, msg=table)

class SqliteCheckpointWasteTest(CheckpointWasteCase):
    def stored(self, run_id):
        row = self.runs("id = ?", (run_id,))[0]
        return (row["status"], row["spend_micros"], row["elapsed_seconds"],
                row["checkpoint_written_seconds"])


@unittest.skipUnless(PG_URL, SKIP_REASON)
class PostgresCheckpointWasteTest(CheckpointWasteCase):
    def setUp(self):
        super().setUp()
        self.schema = "ckw_" + os.urandom(5).hex()
        self.ledger_args = ["--ledger", ledger_url(self.schema)]
        self.addCleanup(psql, "DROP SCHEMA IF EXISTS %s CASCADE" % self.schema, None, False)

    def stored(self, run_id):
        out = psql("SELECT row_to_json(r) FROM (SELECT status, spend_micros, elapsed_seconds, "
                   "checkpoint_written_seconds FROM %s.runs WHERE id = '%s') r"
                   % (self.schema, run_id)).stdout
        row = json.loads(out)
        return (row["status"], row["spend_micros"], row["elapsed_seconds"],
                row["checkpoint_written_seconds"])


del CheckpointWasteCase  # the two stores' cases above, not the base itself

if __name__ == "__main__":
    unittest.main()
