"""A trip while paused is enforced every time (issue 40, item 1). Ctrl-Z on a real terminal, with
bash -i and a job that draws a progress bar on it, at many moments before the trip (some under a
second before it, some before the waker's moment and some after it): spendcap, stopped with the
job, must wake, continue the job so that it gets its checkpoint signal, and end the run killed
(budget:run) with 124 (no lost row, no SIGTERM from the guard without the SIGUSR1 first).

Before: the waker's SIGCONT, due at once when the trip was less than a heartbeat away, could come
before spendcap had stopped itself; a SIGCONT before the stop is lost, so spendcap stayed stopped
and its guard killed the tree at the ceiling without the checkpoint signal."""
import json
import os
import re
import time

from spendcap_testlib import SPENDCAP, SpendcapTest, alive, children_of, proc_state, wait_until
from test_user_view_run import FIXTURE, Terminal

# $1/s; grace 1s + kill-after 1s: reserve $3; --budget 6 trips 3 s after the start.
TRIP_SECONDS = 3
# Ctrl-Z this long before the trip, and the heartbeat: with 5 s (the default) the waker is due at
# once; with 1 s it sleeps until a second before the trip.
MOMENTS = [(2.6, "5s"), (2.1, "1s"), (1.7, "5s"), (1.2, "1s"), (0.9, "5s"), (0.7, "1s"),
           (0.5, "5s"), (0.35, "1s"), (0.2, "5s"), (0.1, "1s"), (1.5, "5s"), (0.6, "5s")]


class TripWhilePausedTest(SpendcapTest):
    def test_ctrl_z_at_many_moments_before_the_trip(self):
        env = self.spendcap_env({"PS1": "PROMPT$ ", "TERM": "dumb"})
        shell = Terminal(["bash", "--norc", "--noprofile", "-i"], env, self.tmp)
        self.addCleanup(shell.close)
        shell.wait_for(r"PROMPT\$ ", 30)
        for attempt, (before_trip, sync) in enumerate(MOMENTS):
            with self.subTest(attempt=attempt, before_trip=before_trip, sync=sync):
                try:
                    self.one_try(shell, attempt, before_trip, sync)
                except AssertionError:
                    for pid in children_of(shell.pid):  # a stopped spendcap: the next try's way
                        os.kill(pid, 9)
                    raise
        # The ledger says what each try's status file said: no row lost, none failed.
        runs = json.loads(self.run_spendcap(["runs", "--json", "--limit", "50"]).stdout)
        ends = sorted((run["status"], run["reason"]) for run in runs)
        self.assertEqual(ends, [("killed", "budget:run")] * len(MOMENTS), runs)

    def one_try(self, shell, attempt, before_trip, sync):
        ready, log = self.path("ready%d" % attempt), self.path("log%d" % attempt)
        status_file = self.path("status%d.json" % attempt)
        mark = len(shell.text())
        shell.send(("%s run --team demo --experiment pausetrip --rate 3600 --budget 6 --grace 1s "
                    "--kill-after 1s --sync %s --status-file %s -- python3 %s pausebar %s %s\n"
                    % (SPENDCAP, sync, status_file, FIXTURE, ready, log)).encode())
        shell.wait_for(r"spendcap: run [0-9a-f]{8} started", 30, mark)
        started = time.monotonic()
        wait_until(lambda: os.path.exists(ready), 10, what="the job's handlers")
        spendcap = wait_until(lambda: [p for p in children_of(shell.pid) if alive(p)], 10,
                              what="spendcap under the shell")[0]
        # The stimulus's moment (not a wait for a condition): Ctrl-Z `before_trip` s before it.
        delay = started + TRIP_SECONDS - before_trip - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        shell.send(b"\x1a")
        shell.wait_for(r"spendcap: run [0-9a-f]{8} killed \(budget:run\)", 30, mark)
        wait_until(lambda: not alive(spendcap) or proc_state(spendcap) == "Z", 20,
                   what="spendcap to exit (state %s)" % proc_state(spendcap))
        status = wait_until(lambda: os.path.exists(status_file) and self.read_json(status_file),
                            10, what="the status file")
        self.assertEqual(status["reason"], "budget:run")
        self.assertEqual(status["status"], "killed")
        self.assertEqual(status["exit_code"], 124)
        with open(log) as f:
            signals = f.read().split()
        self.assertEqual(signals[:1], ["SIGUSR1"], "the job got its checkpoint signal first")
        self.assertNotIn("lost", shell.text()[mark:])
        # The shell has its prompt back, and nothing of the run is left.
        prompt_mark = len(shell.text())
        shell.send(b"\n")
        shell.wait_for(r"PROMPT\$ ", 10, prompt_mark)
        wait_until(lambda: set(children_of(shell.pid)) == set(), 10, what="no job under the shell")
