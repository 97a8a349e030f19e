"""run_module.py --part K/N (tests/CMakeLists.txt runs the longest modules in two parts): every case
of a module is in exactly one part, the parts together are the module, and a bad --part is refused
naming it. No spendcap runs here."""
import subprocess
import sys
import unittest

import run_module


class PartTest(unittest.TestCase):
    def ids(self, suite):
        return [test.id() for test in run_module.cases(suite)]

    def test_every_case_is_in_exactly_one_part(self):
        for module in ("test_budgets", "test_user_view_issue30", "test_guards"):
            whole = self.ids(unittest.defaultTestLoader.loadTestsFromName(module))
            self.assertGreater(len(whole), 2, module)
            for n in (2, 3):
                parts = [self.ids(run_module.part_of(
                    unittest.defaultTestLoader.loadTestsFromName(module), k, n))
                    for k in range(1, n + 1)]
                self.assertTrue(all(parts), (module, n, parts))
                joined = [case for part in parts for case in part]
                self.assertEqual(sorted(joined), sorted(whole), (module, n))
                self.assertEqual(len(joined), len(set(joined)), (module, n))

    def test_a_bad_part_is_refused_naming_it(self):
        for bad in ("0/2", "3/2", "x", "1/0"):
            result = subprocess.run([sys.executable, "run_module.py", "test_budgets", "--part", bad],
                                    capture_output=True, text=True, timeout=60)
            self.assertNotEqual(result.returncode, 0, bad)
            self.assertIn("--part " + bad, result.stderr)


if __name__ == "__main__":
    unittest.main()
