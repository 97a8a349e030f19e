"""Runs one integration test module as `python -m unittest -v MODULE` does, for CTest
(tests/CMakeLists.txt), and prints the skip marker when none of its cases could run here (every one
skipped, or the module skipped itself): CTest then reports the module "Skipped", not passed. The
cases' own skips are in unittest's output either way.

`run_module.py MODULE --part K/N` runs the Kth of N parts of the module (tests/CMakeLists.txt
splits the longest modules so that CTest at -j2 keeps both cores busy): the module's cases, in
unittest's order, dealt to the parts in turn, so that a class's long cases spread over the parts
(no module here has a setUpClass or setUpModule that a part would repeat). Every case is in
exactly one part."""

import os
import sys
import unittest


def cases(suite):
    for test in suite:
        if isinstance(test, unittest.TestSuite):
            yield from cases(test)
        else:
            yield test


def part_of(suite, k, n):
    return unittest.TestSuite(test for i, test in enumerate(cases(suite)) if i % n == k - 1)


def parse_part(text):
    try:
        k, n = (int(x) for x in text.split("/"))
    except ValueError:
        k = n = 0
    if not 1 <= k <= n:
        sys.exit(f"run_module.py: --part {text}: give K/N with 1 <= K <= N, e.g. --part 1/2")
    return k, n


def main():
    module = sys.argv[1]
    sys.path.insert(0, os.getcwd())  # as `python -m unittest` has it
    suite = unittest.defaultTestLoader.loadTestsFromName(module)
    if len(sys.argv) == 4 and sys.argv[2] == "--part":
        suite = part_of(suite, *parse_part(sys.argv[3]))
    elif len(sys.argv) != 2:
        sys.exit("usage: run_module.py MODULE [--part K/N]")
    result = unittest.TextTestRunner(verbosity=2).run(suite)
    ran = result.testsRun - len(result.skipped)
    if result.wasSuccessful() and result.skipped and ran <= 0:
        print(f"SPENDCAP_SKIPPED: every case of {module} was skipped here", flush=True)
    return 0 if result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
