"""The html showback for a monthly review (issue 21, item 6), as headless chromium builds it from a
ledger seeded through real runs: the period in the title and header, a legend for the stacked
chart, printed cents that add up to the printed totals, budget against actual per team, running
runs marked, and "per accepted" filled when results were accepted. A screenshot is taken as well
(the engineer looked at one; the test checks it is a real, non-blank image)."""
import datetime
import decimal
import html.parser
import json
import os
import re
import shutil
import signal
import struct
import subprocess
import unittest

from spendcap_testlib import LedgerTest, wait_until

POLICY = {
    "defaults": {"grace": "0s", "kill_after": "0s", "sync": "1s"},
    "budgets": {"team": {"vision": {"amount": 10, "period": "month"},
                         "nlp": {"amount": 1, "period": "month"},
                         "live": {"amount": 5, "period": "month"}}},
}
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run"]
CENTS = re.compile(r"^(\d+\.\d\d) [A-Z]{3}( \*)?$")


class Page(html.parser.HTMLParser):
    """What a reader of the page sees: title, header, legend, the table's printed amounts, the
    budget rows."""

    def __init__(self):
        super().__init__()
        self.title = self.header = ""
        self.series, self.legend, self.groups, self.budgets = {}, {}, {}, {}
        self.total = None
        self.headings = []
        self._in, self._row, self._cell, self._cells = None, None, None, []
        self._svg = False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "svg":
            self._svg = True
        if tag in ("title", "h1", "th") and not self._svg:  # an SVG <title> is a tooltip
            self._in = tag
        if tag == "g" and a.get("class") == "series":
            self.series[a["data-group"]] = a["fill"]
        if tag == "li" and a.get("class") == "legend-item":
            self.legend[a["data-group"]] = a["data-colour"]
        if tag == "tr" and a.get("class") in ("group", "total", "budget"):
            self._row = a
            self._cells = []
        if tag == "td" and self._row is not None:
            self._cell = [a.get("class", ""), ""]

    def handle_data(self, data):
        if self._in == "title":
            self.title += data
        elif self._in == "h1":
            self.header += data
        elif self._in == "th" and self._row is None:
            self.headings.append(data)
        if self._cell is not None:
            self._cell[1] += data

    def handle_endtag(self, tag):
        if tag == "svg":
            self._svg = False
        if tag in ("title", "h1", "th"):
            self._in = None
        if tag == "td" and self._cell is not None:
            self._cells.append(tuple(self._cell))
            self._cell = None
        if tag == "tr" and self._row is not None:
            kind = self._row.get("class")
            entry = (self._row, self._cells)
            if kind == "group":
                self.groups[self._row["data-group"]] = entry
            elif kind == "total":
                self.total = entry
            else:
                self.budgets[self._row["data-team"]] = entry
            self._row = None


def printed(cells, css):
    """The printed amount (a Decimal) of the cell with class `css`."""
    text = [t for c, t in cells if css in c.split()][0].strip()
    match = CENTS.match(text)
    assert match, text
    return decimal.Decimal(match.group(1)), text.endswith("*")


def cents_add_up(page):
    total, _ = printed(page.total[1], "spend")
    return sum(printed(cells, "spend")[0] for _, cells in page.groups.values()) == total


@unittest.skipUnless(shutil.which("chromium"), "Debian's chromium is not installed")
class HtmlShowbackTest(LedgerTest):
    def setUp(self):
        super().setUp()
        self.write_policy(POLICY)

    def chromium(self, *args):
        profile = self.path("chromium-profile")
        os.makedirs(profile, exist_ok=True)
        result = subprocess.run(
            ["chromium"] + CHROMIUM_FLAGS + ["--user-data-dir=" + profile] + list(args),
            capture_output=True, text=True, timeout=180, env=dict(self.env, HOME=self.path("tmp")))
        self.assertEqual(result.returncode, 0, result.stderr[-2000:])
        return result.stdout

    def test_monthly_review_page(self):
        quick = ["--", "python3", "-c", "import time; time.sleep(0.3)"]
        for team, experiment in (("vision", "resnet"), ("vision", "vit"), ("nlp", "bert")):
            self.run_ok(["run", "--rate", "36", "--team", team, "--experiment", experiment,
                         "--budget", "1", "--status-file", self.path(experiment + ".json")] +
                        quick)
        self.run_ok(["accept", self.read_json("resnet.json")["run_id"]])
        # nlp's budget is lowered below what it has spent (a personal ledger takes the policy's
        # budgets at the next run): over budget on the page.
        lowered = json.loads(json.dumps(POLICY))
        lowered["budgets"]["team"]["nlp"]["amount"] = 0.000001
        self.write_policy(lowered)
        live = self.start_spendcap(["run", "--rate", "36", "--team", "live", "--budget", "1", "--",
                                    "python3", "-c", "import time; time.sleep(120)"])
        try:
            wait_until(lambda: any(r["team"] == "live" and r["spend_micros"] > 0
                                   for r in self.runs()), 60, what="the live run's heartbeat")
            today = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
            page_file = self.path("report.html")
            with open(page_file, "w") as f:
                f.write(self.run_ok(["report", "--by", "team", "--format", "html", "--since",
                                     today, "--until", today]).stdout)
            data = json.loads(self.run_ok(["report", "--by", "team", "--format", "json",
                                           "--since", today, "--until", today]).stdout)
        finally:
            live.send_signal(signal.SIGTERM)
            live.communicate(timeout=60)
        page = Page()
        page.feed(self.chromium("--dump-dom", "file://" + page_file))

        # The period, in the title and the header.
        self.assertEqual(page.title, "spendcap showback, " + today)
        self.assertIn(today, page.header)
        # A legend entry per series, in the series' colour.
        self.assertEqual(page.legend, page.series)
        self.assertEqual(sorted(page.legend), ["live", "nlp", "vision"])
        # Printed cents add up to the printed total.
        self.assertTrue(cents_add_up(page))
        total, _ = printed(page.total[1], "spend")
        self.assertEqual(total, decimal.Decimal(str(round(data["total"]["spend"], 2))))
        # The running run is marked, in its row and its legend entry.
        row, cells = page.groups["live"]
        self.assertEqual(row["data-running"], "1")
        self.assertTrue(printed(cells, "spend")[1])
        self.assertFalse(printed(page.groups["nlp"][1], "spend")[1])
        # Per accepted: filled where a result was accepted, said where none was.
        self.assertIn("per accepted", page.headings)
        per = {g: [t for c, t in cells if "per-accepted" in c.split()][0]
               for g, (_, cells) in page.groups.items()}
        self.assertRegex(per["vision"], r"^\d+\.\d\d [A-Z]{3}$")
        self.assertEqual(per["nlp"], "none accepted")
        # Budget against actual per team, from the ledger's budgets: nlp is over its lowered one.
        self.assertEqual(sorted(page.budgets), ["live", "nlp", "vision"])
        self.assertEqual(page.budgets["vision"][0]["data-budget"], "10.000000")
        self.assertEqual(page.budgets["nlp"][0].get("data-over"), "true")
        self.assertIsNone(page.budgets["vision"][0].get("data-over"))

        # Negative controls: a page whose printed cents were rounded row by row, one cent off,
        # fails the sum; a page without accepted results has no "per accepted" column at all.
        with open(page_file) as f:
            text = f.read()
        nlp_cents, _ = printed(page.groups["nlp"][1], "spend")
        start = text.index('<tr class="group" data-group="nlp"')
        end = text.index("</tr>", start)
        nlp_row = text[start:end].replace(
            '<td class="n spend">%s USD</td>' % nlp_cents,
            '<td class="n spend">%s USD</td>' % (nlp_cents + decimal.Decimal("0.01")))
        self.assertNotEqual(nlp_row, text[start:end])
        broken = Page()
        broken.feed(text[:start] + nlp_row + text[end:])
        self.assertFalse(cents_add_up(broken))
        nothing_accepted = Page()
        nothing_accepted.feed(self.run_ok(["report", "--by", "team", "--format", "html",
                                           "--team", "nlp"]).stdout)
        self.assertNotIn("per accepted", nothing_accepted.headings)

        # A screenshot, as a person would see the page: a PNG of the window's size.
        shot = self.path("report.png")
        self.chromium("--screenshot=" + shot, "--window-size=1200,1000", "file://" + page_file)
        with open(shot, "rb") as f:
            head = f.read(24)
        self.assertEqual(head[:8], b"\x89PNG\r\n\x1a\n")
        self.assertEqual(struct.unpack(">II", head[16:24]), (1200, 1000))
        if os.environ.get("SPENDCAP_KEEP_SCREENSHOT"):
            shutil.copy(shot, os.environ["SPENDCAP_KEEP_SCREENSHOT"])


class HtmlColumnsTest(LedgerTest):
    """Issue 30, item 8: the outcome columns add up to the runs, a preempted run included (15 runs
    used to add to 14), and waste counts failed, killed, lost and preempted runs. The page is
    static HTML: read without a browser."""

    def test_outcome_columns_add_up_to_the_runs(self):
        self.write_policy({"defaults": {"grace": "0s", "kill_after": "1s", "sync": "1s"}})
        base = ["run", "--team", "vision", "--rate", "36"]
        self.run_ok(base + ["--budget", "1", "--", "true"])                          # succeeded
        self.run_ok(base + ["--budget", "1", "--", "false"], code=1)                 # failed
        self.run_ok(base + ["--budget", "0.03", "--", "sleep", "30"], code=124)      # killed
        self.run_ok(base + ["--budget", "0.01", "--", "true"], code=120)             # refused
        started = self.path("started")
        preempted = self.start_spendcap(base + ["--budget", "1", "--", "python3", "-c",
                                                "import sys, time; open(sys.argv[1], 'w')"
                                                ".close(); time.sleep(60)", started])
        wait_until(lambda: os.path.exists(started), 60, what="the job to start")
        preempted.send_signal(signal.SIGTERM)
        preempted.communicate(timeout=60)
        self.assertEqual(preempted.returncode, -signal.SIGTERM)  # re-raised: a preemption
        statuses = sorted(r["status"] for r in self.runs())
        self.assertEqual(statuses, ["failed", "killed", "preempted", "refused", "succeeded"])
        text = self.run_ok(["report", "--by", "team", "--format", "html"]).stdout
        table = text[text.index('<table id="report">'):]
        table = table[:table.index("</table>") + len("</table>")]
        page = Page()
        page.feed(table)
        outcomes = ["running", "succeeded", "failed", "killed", "refused", "lost", "preempted"]
        for name in ["runs"] + outcomes:
            self.assertIn(name, page.headings)
        # A group row starts with its key's <td>; the total row with one <th> in its place.
        rows = [(row, cells, 0) for row, cells in page.groups.values()] + [page.total + (1,)]
        for row, cells, offset in rows:
            values = [t for _, t in cells]
            count = {h: int(values[page.headings.index(h) - offset])
                     for h in ["runs"] + outcomes}
            self.assertEqual(count["runs"], sum(count[o] for o in outcomes), (row, count))
            self.assertEqual(count["runs"], 5)
            self.assertEqual(count["preempted"], 1)
        data = json.loads(self.run_ok(["report", "--by", "team", "--format", "json"]).stdout)
        by_status = {r["status"]: r["spend_micros"] for r in self.runs()}
        waste = sum(by_status[s] for s in ("failed", "killed", "preempted"))
        self.assertAlmostEqual(data["total"]["waste"], waste / 1e6, places=6)


if __name__ == "__main__":
    unittest.main()
