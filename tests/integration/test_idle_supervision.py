"""Supervising an idle job costs next to nothing (issue 41 item 1): spendcap and its guard sleep
until something happens (the job writes its progress file, the heartbeat is due, a deadline
comes), instead of polling the progress file every 50 ms and ticking the guard every interval.
Counted from outside as voluntary context switches (one per wakeup of a thread), which do not
depend on the machine's load. The negative control is the binary before the change: 21-31
wakeups a second here (scripts/bench.sh --idle), against a bound of 3.

The respawn-loop guard's netlink process connector (root only) wakes spendcap for every fork, exec
and exit on the machine, so the count would measure the machine: the test runs the detector an
ordinary user gets (its walk of the tree every interval, 1 a second)."""
import os
import subprocess
import time
import unittest

from spendcap_testlib import SpendcapTest, children_of, wait_until

# Wakeups a second an idle run may cost, spendcap and guard together: the respawn fallback's walk
# every interval (1/s), the heartbeat every sync (0.2/s), their replies on the ledger's worker and
# the reporter's threads, and slack for a timer that lands early.
MAX_WAKEUPS_PER_SECOND = 3.0
WINDOW_SECONDS = 4.0


def wakeups(pid):
    """Voluntary context switches summed over the threads of `pid`."""
    total = 0
    for tid in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/status" % (pid, tid)) as f:
                for line in f:
                    if line.startswith("voluntary_ctxt_switches:"):
                        total += int(line.split()[1])
        except OSError:
            pass  # a thread that ended
    return total


class IdleSupervisionTest(SpendcapTest):
    def test_an_idle_run_wakes_spendcap_and_its_guard_rarely(self):
        process = self.start_spendcap(
            ["run", "--quiet", "--rate", "1", "--budget", "100", "--", "sleep", "60"],
            extra_env={"SPENDCAP_TEST_SWITCHES": "no-proc-connector"},
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            found = {}

            def job_runs():
                for guard in children_of(process.pid):
                    for job in children_of(guard):
                        with open("/proc/%d/comm" % job) as f:
                            if f.read().strip() == "sleep":
                                found["guard"] = guard
                                return True
                return False

            wait_until(job_runs, 30, what="the job to run")
            guard = found["guard"]
            # Past the start (the first grant, the threads' first work).
            time.sleep(1.0)
            start = time.monotonic()
            before = wakeups(process.pid) + wakeups(guard)
            time.sleep(WINDOW_SECONDS)
            after = wakeups(process.pid) + wakeups(guard)
            rate = (after - before) / (time.monotonic() - start)
            self.assertLessEqual(rate, MAX_WAKEUPS_PER_SECOND,
                                 "an idle run woke spendcap and its guard %.1f times a second"
                                 % rate)
        finally:
            process.kill()
            process.communicate(timeout=30)


if __name__ == "__main__":
    unittest.main()
