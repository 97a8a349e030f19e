"""Every command block of the guide's page on reports (docs/guide/reports-and-focus.md), run exactly
as written: each indented line that starts with `spendcap ` is split as a shell
would (a trailing `  # ...` comment is the answer the page promises: each of its parts, split at
"; ", must appear in the output), with the page's example policy (its indented JSON block)
as ./spendcap.json and a ledger that holds a few runs. A command the page shows must exit 0."""
import json
import os
import shlex
import unittest

from spendcap_testlib import LedgerTest

PAGE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "docs", "guide",
                    "reports-and-focus.md")


def section_lines():
    with open(PAGE) as f:
        return f.read().splitlines()


def indented_blocks(lines):
    """Runs of 4-space indented lines (markdown code blocks; a blank line ends one)."""
    blocks, block = [], []
    for line in lines + [""]:
        if line.startswith("    ") and line.strip():
            block.append(line[4:])
        elif block:
            blocks.append(block)
            block = []
    return blocks


def commands_and_policy():
    commands, policy = [], None
    for block in indented_blocks(section_lines()):
        if block[0].startswith("{"):
            policy = json.loads("\n".join(block))
            continue
        for line in block:
            if line.startswith("spendcap "):
                command, _, answer = line.partition("  # ")
                commands.append((line, shlex.split(command), answer.strip()))
    return commands, policy


class ReadmeReportCommandsTest(LedgerTest):
    def test_every_command_block_runs_as_written(self):
        commands, policy = commands_and_policy()
        self.assertIsNotNone(policy, "the section's example policy block")
        self.assertGreaterEqual(len([c for c in commands if c[1][1] == "estimate"]), 6)
        self.assertGreaterEqual(len([c for c in commands if c[1][1] == "report"]), 3)
        self.write_policy(policy)
        for team, experiment, sweep in (("vision", "resnet", "lr"), ("nlp", "bert", "")):
            args = ["run", "--rate", "36", "--team", team, "--experiment", experiment,
                    "--budget", "1"]
            if sweep:
                args += ["--tag", "sweep=" + sweep]
            result = self.run_spendcap(args + ["--", "python3", "-c", "pass"])
            self.assertEqual(result.returncode, 0, result.stderr)
        for line, argv, answer in commands:
            with self.subTest(command=line):
                self.assertEqual(argv[0], "spendcap")
                result = self.run_spendcap(argv[1:])
                self.assertEqual(result.returncode, 0, "%s\n%s" % (line, result.stderr))
                self.assertTrue(result.stdout.strip(), line)
                for part in filter(None, (p.strip() for p in answer.split(";"))):
                    self.assertIn(part, result.stdout, line)

    def test_the_parser_finds_a_failing_command(self):
        """Negative control: a command that exits 125 as written (the spot estimate before
        --gpu-hours) is one this test would report."""
        commands, policy = commands_and_policy()
        self.write_policy(policy)
        old = ("spendcap estimate --gpu h100 --pricing spot --interruptions-per-100h 6 "
               "--lost-per-interruption 30m")
        result = self.run_spendcap(shlex.split(old)[1:])
        self.assertEqual(result.returncode, 125)
        self.assertIn("nothing to estimate", result.stderr)


if __name__ == "__main__":
    unittest.main()
