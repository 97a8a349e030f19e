"""The documentation against the binary (docs/dev/testing.md, "The documentation"):

- every ```console block of README.md and docs/guide/ marked runnable (an HTML comment
  `<!-- runnable -->` on the line before it) is run in a scratch environment, one per file (its own
  XDG directories, HOME, TMPDIR and working directory, `spendcap` on the PATH, the small job
  tests/fixtures/docs_train.py as ./train.py), and the lines it shows after each `$ ` command must
  appear in that order in what the command printed (stdout and stderr together). Figures, times
  and run ids match by pattern, `…` stands for any text (a whole line: any lines), the word `you`
  for any word; an id shown in an earlier output stands for the real one in later commands; a
  command must exit 0 unless the next one is `echo $?`;
- every relative link and #anchor of README.md, CHANGELOG.md and docs/ resolves;
- every man page the build wrote renders without a warning (groff -ww) and names every option
  `spendcap help --options VERB` lists for its verb; spendcap(1) names every environment variable
  the code reads; spendcap-policy(5) every policy key;
- `spendcap run --help` fits 100 columns, groups its options and shows two examples;
- README.md stays within 250 lines and starts with its two commands.
A negative control for each checker shows that it reports what it exists to find."""
import glob
import os
import re
import shutil
import subprocess
import tempfile
import unittest

from spendcap_testlib import HERE, REPO, SPENDCAP

BUILD = os.path.dirname(os.path.abspath(SPENDCAP))
MAN_DIR = os.path.join(BUILD, "man")
GUIDE = sorted(glob.glob(os.path.join(REPO, "docs", "guide", "*.md")))
DOCS = [os.path.join(REPO, name) for name in ("README.md", "CHANGELOG.md", "policies/README.md")]
DOCS += sorted(glob.glob(os.path.join(REPO, "docs", "**", "*.md"), recursive=True))


# ---- runnable examples ----

def runnable_blocks(path):
    """[(line number, [(command, [expected lines])])] of the file's runnable console blocks."""
    with open(path) as f:
        lines = f.read().splitlines()
    blocks = []
    for i, line in enumerate(lines):
        if line.strip() != "<!-- runnable -->":
            continue
        if i + 1 >= len(lines) or lines[i + 1].strip() != "```console":
            raise AssertionError("%s:%d: <!-- runnable --> must come right before a ```console "
                                 "block" % (path, i + 1))
        steps = []
        j = i + 2
        while lines[j].strip() != "```":
            text = lines[j]
            if text.startswith("$ "):
                command = text[2:]
                while command.endswith("\\"):
                    j += 1
                    command = command[:-1] + " " + lines[j].strip()
                steps.append((command, []))
            elif steps:
                steps[-1][1].append(text)
            j += 1
        blocks.append((i + 1, steps))
    return blocks


HEX_ID = re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{8,36}\b")
DURATION = re.compile(r"\b(?:\d+(?:\.\d+)?(?:ms|s|m|h|d))+\b")
NUMBER = re.compile(r"\d[\d,]*(?:\.\d+)?")


def line_pattern(expected, ids):
    """A regular expression for one expected output line; an id becomes a named group."""
    out, pos = [], 0
    tokens = []
    for regex, kind in ((HEX_ID, "id"), (DURATION, "duration"), (NUMBER, "number")):
        for m in regex.finditer(expected):
            if not any(m.start() < e and s < m.end() for s, e, _ in tokens):
                tokens.append((m.start(), m.end(), kind))
    for m in re.finditer(r"…|\byou\b", expected):
        if not any(m.start() < e and s < m.end() for s, e, _ in tokens):
            tokens.append((m.start(), m.end(), "any" if m.group() == "…" else "word"))
    tokens.sort()
    for start, end, kind in tokens:
        out.append(re.escape(expected[pos:start]))
        text = expected[start:end]
        if kind == "id" and text in ids:
            out.append("(?P=%s)" % ids[text])
        elif kind == "id":
            ids[text] = "id%d" % len(ids)
            out.append("(?P<%s>[0-9a-f]{8,36})" % ids[text])
        elif kind == "duration":
            out.append(r"[0-9.hmsd]+")
        elif kind == "number":
            out.append(r"\d[\d,]*(?:\.\d+)?")
        elif kind == "any":
            out.append(".*")
        else:
            out.append(r"\S+")
        pos = end
    out.append(re.escape(expected[pos:]))
    return re.sub(r"(\\ )+", r"\\s+", "".join(out))


def match_output(expected_lines, actual_text, seen):
    """None when every expected line appears in order; else what is missing. `seen` maps the ids
    of the documentation to the real ones and grows with each match."""
    actual = [line.rstrip() for line in actual_text.splitlines()]
    at = 0
    for expected in expected_lines:
        expected = expected.rstrip()
        if expected in ("…", "..."):
            continue
        ids = {}
        pattern = re.compile(line_pattern(expected, ids))
        while at < len(actual):
            m = pattern.fullmatch(actual[at])
            at += 1
            if m:
                for shown, group in ids.items():
                    seen.setdefault(shown, m.group(group))
                break
        else:
            return "missing: %r" % expected
    return None


def with_real_ids(command, seen):
    for shown, real in seen.items():
        command = re.sub(r"\b%s\b" % re.escape(shown), real, command)
    return command


class Scratch:
    """A user's fresh environment: own XDG directories, HOME, TMPDIR and working directory."""

    def __init__(self, root):
        self.root = root
        self.cwd = os.path.join(root, "work")
        os.makedirs(self.cwd)
        shutil.copy(os.path.join(HERE, "..", "fixtures", "docs_train.py"),
                    os.path.join(self.cwd, "train.py"))
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("SPENDCAP_", "XDG_", "SLURM_", "CUDA_"))}
        for name in ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME",
                     "HOME", "TMPDIR"):
            env[name] = os.path.join(root, name.lower())
            os.makedirs(env[name])
        env["PATH"] = BUILD + os.pathsep + env.get("PATH", "/usr/bin:/bin")
        env["SPENDCAP_NVML_LIBRARY"] = "none"
        env["COLUMNS"] = "100"
        self.env = env
        self.status = 0

    def run(self, command):
        script = "(exit %d); %s" % (self.status, command)
        result = subprocess.run(["bash", "-c", script], cwd=self.cwd, env=self.env,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                timeout=120)
        self.status = result.returncode
        return result.stdout


class RunnableExamplesTest(unittest.TestCase):
    def test_every_runnable_example_prints_what_it_shows(self):
        found = 0
        for path in [os.path.join(REPO, "README.md")] + GUIDE:
            blocks = runnable_blocks(path)
            if not blocks:
                continue
            root = tempfile.mkdtemp(prefix="spendcap-docs-")
            self.addCleanup(shutil.rmtree, root, True)
            scratch, seen = Scratch(root), {}
            for line, steps in blocks:
                for i, (command, expected) in enumerate(steps):
                    found += 1
                    output = scratch.run(with_real_ids(command, seen))
                    where = "%s:%d: $ %s" % (os.path.relpath(path, REPO), line, command)
                    problem = match_output(expected, output, seen)
                    self.assertIsNone(problem, "%s\n%s\n--- printed:\n%s" % (where, problem,
                                                                           output))
                    # A command must succeed unless the example shows its status next.
                    shows_status = i + 1 < len(steps) and steps[i + 1][0].strip() == "echo $?"
                    if not shows_status:
                        self.assertEqual(scratch.status, 0, "%s\n%s" % (where, output))
        self.assertGreaterEqual(found, 4, "README's tour is marked runnable")

    def test_the_matcher_fails_a_changed_message(self):
        """Negative control: a changed word, a missing line or lines out of order are reported;
        figures, durations, ids and `…` are not."""
        printed = ("spendcap: run 9f3e2a1b started: burn $36.00/h, budget $0.0500\n"
                   "train: step 3/100 loss 2.4\n"
                   "spendcap: run 9f3e2a1b killed (budget:run) after 2.15s: spent $0.0215\n")
        seen = {}
        self.assertIsNone(match_output([
            "spendcap: run 1a2b3c4d started: burn $12.50/h, budget $1.00",
            "…",
            "spendcap: run 1a2b3c4d killed (budget:run) after 1m3s: spent $0.03"], printed, seen))
        self.assertEqual(seen["1a2b3c4d"], "9f3e2a1b")
        self.assertEqual(with_real_ids("spendcap show 1a2b3c4d", seen), "spendcap show 9f3e2a1b")
        self.assertIsNotNone(match_output(["spendcap: run 1a2b3c4d stopped (budget:run)"],
                                          printed, {}))
        self.assertIsNotNone(match_output(["spendcap: run 1a2b3c4d killed …", "train: step …"],
                                          printed, {}))
        self.assertIsNotNone(match_output(["spendcap: run 1a2b3c4d started: burn …",
                                           "spendcap: run 00000000 started …"], printed, {}))


# ---- links and anchors ----

def anchors_of(path):
    """The anchors GitHub makes from a file's headings."""
    with open(path) as f:
        text = f.read()
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    anchors, counts = set(), {}
    for heading in re.findall(r"^#{1,6} +(.+?) *#*$", text, re.M):
        slug = re.sub(r"[`*_]", "", heading).strip().lower()
        slug = re.sub(r"[^\w\- ]", "", slug).replace(" ", "-")
        n = counts.get(slug, 0)
        counts[slug] = n + 1
        anchors.add(slug if n == 0 else "%s-%d" % (slug, n))
    return anchors


def broken_links(path):
    with open(path) as f:
        text = f.read()
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    text = re.sub(r"`[^`\n]*`", "", text)
    problems = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):
            continue
        file_part, _, anchor = target.partition("#")
        linked = os.path.normpath(os.path.join(os.path.dirname(path), file_part)) \
            if file_part else path
        if not os.path.exists(linked):
            problems.append("%s: no such file" % target)
        elif anchor and linked.endswith(".md") and anchor not in anchors_of(linked):
            problems.append("%s: no such heading" % target)
    return problems


class LinksTest(unittest.TestCase):
    def test_every_relative_link_and_anchor_resolves(self):
        self.assertGreaterEqual(len(DOCS), 10)
        for path in DOCS:
            with self.subTest(path=os.path.relpath(path, REPO)):
                self.assertEqual(broken_links(path), [])

    def test_the_checker_finds_a_broken_link(self):
        tmp = tempfile.mkdtemp(prefix="spendcap-links-")
        self.addCleanup(shutil.rmtree, tmp, True)
        page = os.path.join(tmp, "page.md")
        with open(page, "w") as f:
            f.write("# A page\n\n## Our `--flag`s, and more\n\n[ok](#our---flags-and-more) "
                    "[self](page.md#a-page) [gone](other.md) [no](#nowhere) "
                    "[web](https://example.com/x#y) `[code](nowhere.md)`\n")
        self.assertEqual(broken_links(page), ["other.md: no such file", "#nowhere: no such heading"])


# ---- man pages ----

def render(page):
    result = subprocess.run(["groff", "-ww", "-z", "-man", "-Tutf8", page],
                            capture_output=True, text=True)
    text = subprocess.run(["groff", "-man", "-Tutf8", "-P-cbou", page],
                          capture_output=True, text=True).stdout
    return result.returncode, result.stderr, text


def verbs():
    text = subprocess.run([SPENDCAP, "--help"], capture_output=True, text=True).stdout
    section = text.split("Subcommands:")[1].split("\n\n")[0]
    return [line.split()[0] for line in section.splitlines() if re.match(r"  \S", line)]


def parser_options(verb):
    out = subprocess.run([SPENDCAP, "help", "--options", verb], capture_output=True, text=True,
                         check=True).stdout
    return [name for line in out.splitlines() for name in line.split("\t")[1:]]


def missing_options(page_text, options):
    return [name for name in options if not re.search(r"(?<![\w-])%s(?![\w-])" % re.escape(name),
                                                      page_text)]


@unittest.skipUnless(shutil.which("groff"), "needs groff (groff-base)")
class ManPagesTest(unittest.TestCase):
    def page(self, name):
        path = os.path.join(MAN_DIR, name)
        self.assertTrue(os.path.isfile(path), "%s: not written by the build (target spendcap_man)"
                        % path)
        return path

    def test_every_page_renders_without_warnings_and_lists_every_option(self):
        for verb in verbs():
            with self.subTest(verb=verb):
                code, warnings, text = render(self.page("spendcap-%s.1" % verb))
                self.assertEqual((code, warnings), (0, ""))
                for section in ("NAME", "SYNOPSIS", "DESCRIPTION", "OPTIONS", "EXAMPLES",
                                "EXIT STATUS", "ENVIRONMENT", "SEE ALSO"):
                    self.assertRegex(text, r"(?m)^%s$" % section)
                options = parser_options(verb)
                if verb not in ("show", "policy", "ledger"):
                    self.assertTrue(options, verb)
                self.assertEqual(missing_options(text, options), [])
        for name in ("spendcap.1", "spendcap-policy.5"):
            code, warnings, _ = render(self.page(name))
            self.assertEqual((code, warnings), (0, ""), name)
        gz = glob.glob(os.path.join(MAN_DIR, "*.gz"))
        self.assertEqual(len(gz), len(verbs()) + 2)

    def test_the_page_text_is_spendcap_help(self):
        help_text = subprocess.run([SPENDCAP, "help", "run"], capture_output=True, text=True,
                                   check=True).stdout
        roff = subprocess.run([SPENDCAP, "help", "--man", "run"], capture_output=True, text=True,
                              check=True).stdout
        with open(self.page("spendcap-run.1")) as f:
            self.assertEqual(f.read(), roff)
        for name in parser_options("run"):
            self.assertIn(name, help_text)
        for words in ("EXAMPLES", "spendcap run --team demo", "SPENDCAP_TEAM"):
            self.assertIn(words, help_text)
        bad = subprocess.run([SPENDCAP, "help", "rnu"], capture_output=True, text=True)
        self.assertEqual(bad.returncode, 125)
        self.assertIn("no such page", bad.stderr)

    def test_the_overview_names_every_verb_and_every_variable_the_code_reads(self):
        _, _, text = render(self.page("spendcap.1"))
        for verb in verbs():
            self.assertRegex(text, r"spendcap %s\b" % verb)
            self.assertIn("spendcap-%s(1)" % verb, text)
        read = set()
        for source in glob.glob(os.path.join(REPO, "src", "**", "*.cpp"), recursive=True):
            with open(source) as f:
                code = f.read()
            read.update(re.findall(r'getenv\("([A-Z_0-9]+)"\)', code))
            read.update(re.findall(r'"(SPENDCAP_[A-Z_0-9]*[A-Z0-9])"', code))
            read.update(re.findall(r'"((?:SLURM|CUDA|POD|NODE)_[A-Z_]+)"', code))
        self.assertIn("SPENDCAP_TEAM", read)
        missing = sorted(name for name in read if name not in text)
        self.assertEqual(missing, [], "spendcap(1) ENVIRONMENT lacks them (manual_text.cpp)")

    def test_the_policy_page_names_every_key(self):
        _, _, text = render(self.page("spendcap-policy.5"))
        keys = subprocess.run([SPENDCAP, "policy", "keys"], capture_output=True, text=True,
                              check=True).stdout
        paths = re.findall(r"^(/\S*)", keys, re.M)
        self.assertGreater(len(paths), 50)
        for path in paths:
            self.assertIn(path, text)
        for words in ("Locked: may only be lowered", "Default: \"60s\"", "Flag: --grace"):
            self.assertIn(words, text)

    def test_the_option_check_finds_a_missing_option(self):
        """Negative control: an option the page lacks, or names only as a longer flag's prefix,
        is reported."""
        page = "--budget USD  the most\n--checkpoint-dir DIR\n-q"
        self.assertEqual(missing_options(page, ["--budget", "-q"]), [])
        self.assertEqual(missing_options(page, ["--checkpoint", "--grace"]),
                         ["--checkpoint", "--grace"])


# ---- --help and README ----

class HelpAndReadmeTest(unittest.TestCase):
    def test_run_help_is_grouped_within_100_columns_with_two_examples(self):
        text = subprocess.run([SPENDCAP, "run", "--help"], capture_output=True, text=True,
                              check=True).stdout
        wide = [line for line in text.splitlines() if len(line) > 100]
        self.assertEqual(wide, [])
        order = [text.index("\n%s:\n" % group) for group in
                 ("Budget and price", "Identity", "Stopping", "Guards", "Output", "Isolation")]
        self.assertEqual(order, sorted(order))
        examples = text.split("\nExamples:\n")[1].split("\n\n")[0]
        self.assertEqual(len(re.findall(r"(?m)^    spendcap run ", examples)), 2)
        for verb in verbs():
            other = subprocess.run([SPENDCAP, verb, "--help"], capture_output=True, text=True)
            self.assertEqual([l for l in other.stdout.splitlines() if len(l) > 100], [], verb)

    def test_readme_is_short_and_starts_with_its_two_commands(self):
        with open(os.path.join(REPO, "README.md")) as f:
            text = f.read()
        self.assertLessEqual(len(text.splitlines()), 250)
        blocks = re.findall(r"(?m)^    (\S.*)$", text)
        self.assertTrue(blocks[0].startswith("./scripts/setup.sh && ./build/spendcap run "),
                        blocks[0])
        self.assertEqual(blocks[1], "./scripts/test.sh")
        self.assertNotRegex(text, r"(?i)\bissue \d+")
        for path in [os.path.join(REPO, "README.md")] + GUIDE:
            with open(path) as f:
                self.assertNotRegex(f.read(), r"(?i)\bissue \d+", path)


if __name__ == "__main__":
    unittest.main()
