"""Runs one integration test module as `python -m unittest -v MODULE` does, for CTest
(tests/CMakeLists.txt), and prints the skip marker when none of its cases could run here (every one
skipped, or the module skipped itself): CTest then reports the module "Skipped", not passed. The
cases' own skips are in unittest's output either way."""

import os
import sys
import unittest


def main():
    module = sys.argv[1]
    sys.path.insert(0, os.getcwd())  # as `python -m unittest` has it
    suite = unittest.defaultTestLoader.loadTestsFromName(module)
    result = unittest.TextTestRunner(verbosity=2).run(suite)
    ran = result.testsRun - len(result.skipped)
    if result.wasSuccessful() and result.skipped and ran <= 0:
        print(f"SPENDCAP_SKIPPED: every case of {module} was skipped here", flush=True)
    return 0 if result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
