"""Lost runs are told (issue 19, item 5): a SIGKILLed wrapper's run, once reconciled, has exactly
one `lost` event queued by whoever reconciled it (several reconcilers racing included), which the
next flush delivers to a real HTTP server on 127.0.0.1; `ps` never shows its spend going down,
sampled in a loop before and after the kill, and says what a lost run is charged and why."""
import concurrent.futures
import json
import subprocess
import threading

import test_webhooks
from spendcap_testlib import SPENDCAP, LedgerTest, wait_until

MICROS = 1_000_000


class LostRunToldTest(LedgerTest):
    def setUp(self):
        super().setUp()
        self.endpoint = test_webhooks.Endpoint([200])
        self.addCleanup(self.endpoint.close)
        self.hook = {"HOOK_URL": self.endpoint.url}
        self.write_policy({"defaults": {"sync": "1s", "claim_horizon": "3s", "grace": "0s",
                                        "kill_after": "1s"},
                           "budgets": {"team": {"lost": {"amount": 10, "period": "day"}}},
                           "webhooks": [{"url_env": "HOOK_URL", "events": ["lost"]}]})

    def ps(self):
        result = self.run_spendcap(["ps", "--json"], extra_env=self.hook)
        self.assertEqual(result.returncode, 0, result.stderr)
        return json.loads(result.stdout)

    def spendcap_alone(self, args):
        """As run_spendcap, with pipes of its own (run_spendcap's files are shared)."""
        return subprocess.run([SPENDCAP] + list(args), env=self.spendcap_env(self.hook),
                              cwd=self.tmp, capture_output=True, text=True, timeout=120)

    def outbox(self):
        import sqlite3
        connection = sqlite3.connect("file:%s?mode=ro" % self.ledger_file(), uri=True, timeout=30)
        try:
            return connection.execute("SELECT event, run_id, destination FROM outbox").fetchall()
        finally:
            connection.close()

    def test_a_killed_wrapper_is_told_once_and_ps_never_goes_down(self):
        process = self.start_spendcap(["run", "--team", "lost", "--rate", "36"] + self.tree_args(),
                                      extra_env=self.hook)
        self.wait_for_file("ready")
        wait_until(lambda: self.runs() and self.runs()[0]["spend_micros"] > 0, 30,
                   what="a heartbeat with spend")
        run_id = self.runs()[0]["id"]

        # ps in a loop, in its own thread, from before the kill until the charge.
        samples, stop, failures = [], threading.Event(), []

        def sample():
            while not stop.is_set():
                try:
                    for run in self.ps():
                        if run["id"] == run_id:
                            samples.append((run["live_spend"], run["status"],
                                            run["reconciled"]))
                except Exception as error:  # noqa: BLE001 - reported below
                    failures.append(error)
                    return
        sampler = threading.Thread(target=sample)
        sampler.start()
        self.addCleanup(sampler.join)
        self.addCleanup(stop.set)
        wait_until(lambda: len(samples) >= 3 or failures, 60, interval=0.05,
                   what="ps samples while it runs")
        process.kill()
        process.communicate(timeout=30)
        self.assert_tree_gone(timeout=10)
        ceiling = self.runs("id = ?", (run_id,))[0]["ceiling_micros"]
        wait_until(lambda: any(s[1] == "lost" for s in samples) or failures, 60, interval=0.1,
                   what="ps to show the run lost")
        stop.set()
        sampler.join()
        self.assertEqual(failures, [])

        # Reconcilers racing (ps, budgets, report, ps at once, until one of them charges it):
        # one event is queued.
        def race():
            with concurrent.futures.ThreadPoolExecutor(4) as pool:
                results = list(pool.map(self.spendcap_alone,
                                        [["ps"], ["budgets"], ["report"], ["ps", "--json"]]))
            for result in results:
                self.assertEqual(result.returncode, 0, result.stderr)
            return self.runs("id = ? AND reconciled = 1", (run_id,))
        wait_until(race, 60, interval=0.1, what="the reconciliation")
        race()
        self.assertEqual(self.outbox(), [("lost", run_id, "env:HOOK_URL")])
        for _ in range(3):
            samples.extend((run["live_spend"], run["status"], run["reconciled"])
                           for run in self.ps() if run["id"] == run_id)
        spends = [s[0] for s in samples]
        self.assertTrue(any(status == "running" for _, status, _ in samples), samples)
        self.assertTrue(any(status == "lost" for _, status, _ in samples), samples)
        for before, after in zip(spends, spends[1:]):
            self.assertLessEqual(before, after, "ps showed the spend going down: %s" % spends)
        self.assertAlmostEqual(spends[-1], ceiling / MICROS, places=6,
                               msg="a lost run shows what it is charged")
        table = self.run_spendcap(["ps"], extra_env=self.hook)
        self.assertIn("lost: charged the ceiling", table.stdout)
        self.assertIn("no heartbeat since", table.stdout)
        self.assertEqual(self.endpoint.requests, [], "queued, not sent, until a flush")

        # The next run's start-of-run flush delivers it; later flushes and reconcilers send no
        # second one.
        after = self.run_spendcap(["run", "--team", "lost", "--rate", "36", "--", "true"],
                                  extra_env=self.hook)
        self.assertEqual(after.returncode, 0, after.stderr)
        flushed = self.run_spendcap(["outbox", "flush"], extra_env=self.hook)
        self.assertEqual(flushed.returncode, 0, flushed.stdout + flushed.stderr)
        self.ps()
        events = [e for e in self.endpoint.events() if e["event"] == "lost"]
        self.assertEqual(len(events), 1, self.endpoint.events())
        self.assertEqual(events[0]["run_id"], run_id)
        self.assertEqual(events[0]["team"], "lost")
        self.assertAlmostEqual(float(events[0]["spend"]), ceiling / MICROS, places=6)
        self.assertIn("charged the ceiling", events[0]["message"])
        self.assertEqual(self.outbox(), [])

    def test_a_run_that_finishes_is_not_told_lost(self):
        # The negative control: the same policy, a run that ends by itself: no lost event.
        done = self.run_spendcap(["run", "--team", "lost", "--rate", "36", "--", "true"],
                                 extra_env=self.hook)
        self.assertEqual(done.returncode, 0, done.stderr)
        self.ps()
        flushed = self.run_spendcap(["outbox", "flush"], extra_env=self.hook)
        self.assertEqual(flushed.returncode, 0, flushed.stdout + flushed.stderr)
        self.assertEqual([e for e in self.endpoint.events() if e["event"] == "lost"], [])
        self.assertEqual(self.outbox(), [])


if __name__ == "__main__":
    import unittest
    unittest.main()
