#!/usr/bin/env python3
"""A churning tree for the long run (issue 33 item 5): keeps N processes alive under it, each a
`sleep` of its own random length (5-60 s, so no two share an argv and none exits abnormally: the
respawn-loop guard must not count healthy churn); one in five is a shell with a sleeping child
(two levels). When one ends, another starts. Runs until killed.

    churn.py N
"""
import os
import random
import sys

N = int(sys.argv[1]) if len(sys.argv) > 1 else 200
rng = random.Random(os.getpid())
children = {}


def spawn():
    seconds = "%.2f" % rng.uniform(5, 60)
    if rng.random() < 0.2:
        argv = ["sh", "-c", "sleep %s & wait" % seconds]
        weight = 2
    else:
        argv = ["sleep", seconds]
        weight = 1
    # posix_spawn, not subprocess: a dropped Popen is reaped by the module's own cleanup, which
    # would take the exit from os.wait() below (and the tree would shrink).
    children[os.posix_spawnp(argv[0], argv, os.environ)] = weight


total = 0
while True:
    while total < N:
        spawn()
        total = sum(children.values())
    pid, _ = os.wait()
    total -= children.pop(pid, 0)
