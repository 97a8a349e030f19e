"""Installed the way runners install software (issue 13, test 5): `cmake --install` into a DESTDIR
puts the binary, the man pages (spendcap(1), a page per verb, spendcap-policy(5)), bash completion
and the example policies in their places; the pages render with man(1), the overview names every
subcommand and exit status, each verb's page its subcommands and flags; completion offers the
subcommands; `cpack -G DEB` builds a package that lists those files and carries the postinst.

A fresh Debian 12 root needs debootstrap and a mirror, which this offline machine does not have:
the package is checked by its contents and unpacked with dpkg-deb instead (see README)."""
import os
import re
import shutil
import subprocess
import tempfile
import unittest

from spendcap_testlib import REPO, SPENDCAP

BUILD = os.path.dirname(os.path.abspath(SPENDCAP))
INSTALLED = [
    "usr/bin/spendcap",
    "usr/share/man/man1/spendcap.1.gz",
    "usr/share/man/man1/spendcap-run.1.gz",
    "usr/share/man/man1/spendcap-ps.1.gz",
    "usr/share/man/man1/spendcap-budgets.1.gz",
    "usr/share/man/man5/spendcap-policy.5.gz",
    "usr/share/bash-completion/completions/spendcap",
    "usr/share/doc/spendcap/policies/lab.json",
    "usr/share/doc/spendcap/policies/shared-runner.json",
    "usr/share/doc/spendcap/policies/policy.schema.json",
    "usr/share/doc/spendcap/policies/README.md",
    "usr/share/spendcap/install-shared-runner.sh",
    "usr/lib/spendcap/spendcap-runner",
]


def subcommands():
    """The top-level subcommands, as `spendcap --help` lists them."""
    text = subprocess.run([SPENDCAP, "--help"], capture_output=True, text=True).stdout
    section = text.split("Subcommands:")[1].split("\n\n")[0]
    return [line.split()[0] for line in section.splitlines() if re.match(r"  \S", line)]


def help_text(*path):
    return subprocess.run([SPENDCAP, *path, "--help"], capture_output=True, text=True).stdout


def nested_subcommands(command):
    """The subcommands of `spendcap COMMAND` (outbox list, ...), as its --help lists them."""
    text = help_text(command)
    if "Subcommands:" not in text:
        return []
    section = text.split("Subcommands:")[1].split("\n\n")[0]
    return [line.split()[0] for line in section.splitlines() if re.match(r"  \S", line)]


def command_paths():
    """Every subcommand path: ("run",), ("outbox",), ("outbox", "list"), ..."""
    paths = []
    for command in subcommands():
        paths.append((command,))
        paths.extend((command, sub) for sub in nested_subcommands(command))
    return paths


def flags(*path):
    """The long flags `spendcap PATH --help` lists in its option groups, --help itself left out."""
    text = help_text(*path)
    options = re.split(r"\n(?:Subcommands|Examples|Exit status):\n", text)[0]
    found = set(re.findall(r"^  (?:-\w,)?(--[a-z0-9-]+)", options, re.M))
    return sorted(found - {"--help", "--version"})


def exit_codes():
    text = subprocess.run([SPENDCAP, "--help"], capture_output=True, text=True).stdout
    return re.findall(r"^  (\d{3})  ", text.split("Exit status:")[1], re.M)


@unittest.skipUnless(os.path.exists(os.path.join(BUILD, "cmake_install.cmake")),
                     "no CMake build directory beside SPENDCAP_BIN")
class PackagingTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="spendcap-pkg-")
        self.addCleanup(shutil.rmtree, self.tmp, True)

    def test_install_into_a_destdir_puts_every_file_in_its_place(self):
        root = os.path.join(self.tmp, "root")
        env = dict(os.environ, DESTDIR=root)
        subprocess.run(["cmake", "--install", BUILD, "--prefix", "/usr"], env=env, check=True,
                       capture_output=True)
        for path in INSTALLED:
            self.assertTrue(os.path.isfile(os.path.join(root, path)), path)
        binary = os.path.join(root, "usr/bin/spendcap")
        self.assertTrue(os.access(binary, os.X_OK))
        version = subprocess.run([binary, "--version"], capture_output=True, text=True)
        self.assertEqual(version.returncode, 0, version.stderr)

        # man -l renders the installed pages; the overview names every subcommand and every
        # exit status, each verb's page its nested subcommands and every flag of their --help, so
        # the pages keep up with the binary.
        def rendered(page):
            result = subprocess.run(["man", "-l", os.path.join(root, "usr/share/man", page)],
                                    capture_output=True, text=True,
                                    env=dict(os.environ, MANWIDTH="200", MAN_KEEP_FORMATTING="0"))
            self.assertEqual(result.returncode, 0, result.stderr)
            self.assertNotIn("warning", result.stderr)
            return re.sub(r".\x08", "", result.stdout)

        page = rendered("man1/spendcap.1.gz")
        for section in ("SYNOPSIS", "EXIT STATUS", "POLICY SEARCH ORDER", "ENVIRONMENT"):
            self.assertIn(section, page)
        commands = subcommands()
        self.assertGreaterEqual(len(commands), 5)
        for command in commands:
            self.assertRegex(page, r"spendcap %s\b" % command)
        paths = command_paths()
        self.assertIn(("outbox", "flush"), paths)
        for path in paths:
            verb_page = rendered("man1/spendcap-%s.1.gz" % path[0])
            self.assertRegex(verb_page, r"spendcap %s\b" % " ".join(path))
            for flag in flags(*path):
                self.assertRegex(verb_page, r"%s\b" % re.escape(flag), "spendcap %s %s" % (
                    " ".join(path), flag))
        self.assertIn("/defaults/grace", rendered("man5/spendcap-policy.5.gz"))
        for code in exit_codes():
            self.assertRegex(page, r"\n\s+%s\s" % code, "exit status %s" % code)
        # The search order, in order.
        order = [page.index(s) for s in ("$SPENDCAP_POLICY", "./spendcap.json",
                                          "$XDG_CONFIG_HOME/spendcap/policy.json",
                                          "/etc/spendcap/policy.json")]
        self.assertEqual(order, sorted(order))

    def complete(self, *words):
        """What the installed completion offers for `words` (the last one being completed)."""
        script = ('source "%s"; COMP_WORDS=(%s); COMP_CWORD=%d; _spendcap; '
                  'printf "%%s\\n" "${COMPREPLY[@]}"') % (
            os.path.join(REPO, "share/completions/spendcap.bash"),
            " ".join("'%s'" % w for w in words), len(words) - 1)
        result = subprocess.run(["bash", "--norc", "-c", script], capture_output=True, text=True)
        self.assertEqual(result.returncode, 0, result.stderr)
        return result.stdout.split()

    def test_the_completion_file_is_what_the_parser_writes(self):
        """share/completions/spendcap.bash is `spendcap help --completion`, written from the verb
        table's tree: a verb or flag added to the parser is in it once the file is regenerated, and
        this fails until it is (control: a flag dropped from the file fails it)."""
        written = subprocess.run([SPENDCAP, "help", "--completion"], capture_output=True,
                                 text=True)
        self.assertEqual(written.returncode, 0, written.stderr)
        with open(os.path.join(REPO, "share/completions/spendcap.bash")) as installed:
            text = installed.read()
        self.assertEqual(text, written.stdout,
                         "regenerate it: build/spendcap help --completion > "
                         "share/completions/spendcap.bash")
        self.assertNotEqual(text.replace(" --budget", ""), written.stdout)

    def test_completion_offers_the_subcommands_and_run_flags(self):
        offered = self.complete("spendcap", "")
        for command in subcommands():
            self.assertIn(command, offered)
        self.assertEqual(self.complete("spendcap", "bu"), ["budgets"])
        run_flags = self.complete("spendcap", "run", "--")
        for flag in ("--budget", "--rate", "--grace", "--spot-notice", "--job-key"):
            self.assertIn(flag, run_flags)
        # Every flag `spendcap run --help` lists is offered.
        help_text = subprocess.run([SPENDCAP, "run", "--help"], capture_output=True,
                                   text=True).stdout
        for flag in set(re.findall(r"^\s+(?:-\w,)?(--[a-z-]+)", help_text, re.M)):
            self.assertIn(flag, run_flags, "spendcap run %s" % flag)
        self.assertEqual(self.complete("spendcap", "run", "--mode", "w"), ["warn"])
        # Every subcommand's nested subcommands and flags are offered too.
        checked = 0
        for path in command_paths():
            if len(path) == 1:
                for sub in nested_subcommands(path[0]):
                    self.assertIn(sub, self.complete("spendcap", path[0], ""), path)
            offered = self.complete("spendcap", *path, "--")
            for flag in flags(*path):
                self.assertIn(flag, offered, "spendcap %s %s" % (" ".join(path), flag))
                checked += 1
        self.assertGreater(checked, 60)
        # Negative control: a subcommand's flags are not offered to another.
        self.assertNotIn("--budget", self.complete("spendcap", "report", "--"))
        # After --, the wrapped command is completed as a command (negative: not a flag of run).
        after = self.complete("spendcap", "run", "--rate", "1", "--", "pytho")
        self.assertIn("python3", after)
        self.assertNotIn("--budget", self.complete("spendcap", "run", "--", "-"))

    @unittest.skipUnless(shutil.which("cpack") and shutil.which("dpkg-deb"), "no cpack/dpkg-deb")
    def test_cpack_builds_a_deb_with_those_files_and_the_postinst(self):
        # CPackDeb computes Depends with dpkg-shlibdeps, which needs file(1); say which package is
        # missing rather than failing on CPack's own message.
        self.assertTrue(shutil.which("file"),
                        "file(1) is missing: install Debian's `file` (scripts/setup.sh does "
                        "with SPENDCAP_SETUP_TESTS=1)")
        out = os.path.join(self.tmp, "deb")
        result = subprocess.run(["cpack", "-G", "DEB", "--config",
                                 os.path.join(BUILD, "CPackConfig.cmake"), "-B", out],
                                capture_output=True, text=True, timeout=300)
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        debs = [f for f in os.listdir(out) if f.endswith(".deb")]
        self.assertEqual(len(debs), 1, debs)
        deb = os.path.join(out, debs[0])
        listing = subprocess.run(["dpkg-deb", "-c", deb], capture_output=True, text=True,
                                 check=True).stdout
        for path in INSTALLED:
            self.assertIn("./" + path, listing)
        fields = subprocess.run(["dpkg-deb", "-f", deb, "Package", "Depends"],
                                capture_output=True, text=True, check=True).stdout
        self.assertIn("Package: spendcap", fields)
        self.assertIn("libc6", fields)  # computed by dpkg-shlibdeps
        control = os.path.join(self.tmp, "control")
        subprocess.run(["dpkg-deb", "-e", deb, control], check=True)
        with open(os.path.join(control, "postinst")) as f:
            postinst = f.read()
        self.assertIn("SPENDCAP_SHARED_RUNNER", postinst)
        self.assertIn("install-shared-runner.sh", postinst)
        self.assertTrue(os.access(os.path.join(control, "postinst"), os.X_OK))
        # Unpacked, the binary runs (statically linked libstdc++ and SQLite).
        unpacked = os.path.join(self.tmp, "unpacked")
        subprocess.run(["dpkg-deb", "-x", deb, unpacked], check=True)
        ran = subprocess.run([os.path.join(unpacked, "usr/bin/spendcap"), "run", "--rate", "1",
                              "--budget", "1",
                              "--ledger", os.path.join(self.tmp, "l.db"), "--", "true"],
                             capture_output=True, text=True,
                             env=dict(os.environ, XDG_CONFIG_HOME=self.tmp, TMPDIR=self.tmp))
        self.assertEqual(ran.returncode, 0, ran.stderr)


if __name__ == "__main__":
    unittest.main()
