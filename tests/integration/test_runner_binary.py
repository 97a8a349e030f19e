"""The shared runner's setuid program is small (issue 29, item 6): spendcap-runner, built beside
spendcap, links no SQLite, libcurl, libpq, NVML, CLI11 or JSON library (neither as a shared
library it needs, nor linked in statically: its symbols and strings name none of them), and its
own code (src/runner/) stays under a thousand lines. Nor is the ordinary binary's own part of the
shared runner in it (issue 39, item 6): the front, the supervisor's and a runner call's adoption
(shared_runner/), the setgid install's group. The negative control: the same checks find SQLite,
CLI11 and nlohmann, and those functions, in the spendcap binary, so they can fail."""
import glob
import os
import shutil
import subprocess
import unittest

from spendcap_testlib import REPO, SPENDCAP

RUNNER = os.path.join(os.path.dirname(os.path.abspath(SPENDCAP)), "spendcap-runner")
# What must not be in the image that runs as root: library names (NEEDED, dlopen strings) and
# symbols of the libraries linked statically.
FORBIDDEN_LIBRARIES = ("sqlite", "curl", "libpq", "nvidia-ml", "nvml")
FORBIDDEN_SYMBOLS = ("sqlite3_", "curl_easy", "PQconnect", "nvmlInit", "CLI::", "nlohmann::")
OWN_LINES_LIMIT = 1000
# Code that runs only in the ordinary spendcap, never as root (shared_runner/, run/ledger_group).
ORDINARY_ONLY = ("spendcap::enter_shared_runner(", "spendcap::run_front(",
                 "spendcap::become_supervisor(", "spendcap::settle_runner_call(",
                 "spendcap::runner_run()", "spendcap::open_ledger_as_installed(")
# What process/credentials.cpp linked into the runner before (the ordinary binary's last drops,
# the setgid install's group, the old protocol's reduce_to_setgid): gone from its image.
FORMERLY_IN_THE_RUNNER = ("settle_supervisor(", "drop_group_for_good(", "raise_group(",
                          "reduce_to_setgid(")


def needed(binary):
    out = subprocess.run(["readelf", "-d", binary], capture_output=True, text=True,
                         check=True).stdout
    return [line.split("[")[1].split("]")[0] for line in out.splitlines() if "(NEEDED)" in line]


def symbols(binary):
    out = subprocess.run(["nm", "-C", binary], capture_output=True, text=True).stdout
    out += subprocess.run(["nm", "-C", "-D", binary], capture_output=True, text=True).stdout
    return out


def strings(binary):
    with open(binary, "rb") as f:
        return f.read().decode("latin-1").lower()


def findings(binary):
    found = [lib for lib in needed(binary) if any(f in lib.lower() for f in FORBIDDEN_LIBRARIES)]
    table = symbols(binary)
    found += [symbol for symbol in FORBIDDEN_SYMBOLS if symbol in table]
    text = strings(binary)
    found += ["string " + name for name in ("libsqlite3", "libcurl.so", "libpq.so",
                                           "libnvidia-ml.so") if name in text]
    return found


@unittest.skipUnless(shutil.which("readelf") and shutil.which("nm"), "needs binutils")
@unittest.skipUnless(os.path.isfile(RUNNER), "spendcap-runner is not built beside SPENDCAP_BIN")
class RunnerBinaryTest(unittest.TestCase):
    def test_the_runner_links_none_of_the_heavy_libraries(self):
        self.assertEqual(findings(RUNNER), [], "in the setuid runner: " + ", ".join(needed(RUNNER)))
        # Only the C library and the loader are left (libstdc++ and libgcc are linked in).
        for library in needed(RUNNER):
            self.assertRegex(library, r"^(libc|libm|libdl|libpthread|ld-linux[-\w]*)\.so")

    def test_the_checks_find_them_in_spendcap(self):
        found = findings(SPENDCAP)
        for expected in ("sqlite3_", "CLI::", "nlohmann::"):
            self.assertIn(expected, found)

    def test_the_front_and_the_adoption_are_not_in_the_runner(self):
        runner, spendcap = symbols(RUNNER), symbols(SPENDCAP)
        self.assertEqual([name for name in ORDINARY_ONLY if name in runner], [])
        self.assertEqual([name for name in ORDINARY_ONLY if name not in spendcap], [],
                         "the negative control: spendcap lacks them")
        self.assertEqual([name for name in FORMERLY_IN_THE_RUNNER if name in runner], [])

    def test_the_runners_own_code_is_small(self):
        files = glob.glob(os.path.join(REPO, "src", "runner", "*.cpp"))
        self.assertTrue(files)
        lines = 0
        for path in files:
            with open(path) as f:
                lines += sum(1 for _ in f)
        self.assertLess(lines, OWN_LINES_LIMIT, "src/runner/ has %d lines" % lines)


if __name__ == "__main__":
    unittest.main()
