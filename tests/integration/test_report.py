"""`spendcap report` and `spendcap accept` (issue 11, tests 1 and 4) on a ledger seeded through real
runs: totals by team and by experiment equal the sum of the runs' spend in the ledger file; csv and
json carry the same numbers; waste and cost per accepted result; running runs are marked."""
import csv
import fcntl
import datetime
import decimal
import html.parser
import io
import json
import os
import pty
import re
import select
import shutil
import signal
import struct
import subprocess
import sys
import termios
import time
import unittest

from spendcap_testlib import FIXTURES, SPENDCAP, LedgerTest, wait_until

MICROS = 1_000_000
POLICY = {"defaults": {"grace": "0s", "kill_after": "0s", "sync": "1s"}}


def job(code=0):
    return ["--", "python3", "-c", "import sys; sys.exit(%d)" % code]


# FOCUS 1.2's rules, written from the specification (not from spendcap's output): the columns a
# dataset must have, their types and allowed values.
FOCUS_MANDATORY = [
    "BilledCost", "EffectiveCost", "ListCost", "ContractedCost", "BillingCurrency",
    "BillingAccountId", "BillingAccountName", "BillingPeriodStart", "BillingPeriodEnd",
    "ChargePeriodStart", "ChargePeriodEnd", "ChargeCategory", "ChargeClass", "ChargeDescription",
    "PricingCategory", "PricingQuantity", "PricingUnit", "ConsumedQuantity", "ConsumedUnit",
    "ProviderName", "PublisherName", "InvoiceIssuerName", "ResourceId", "ResourceName",
    "ResourceType", "ServiceName", "ServiceCategory", "SkuId", "Tags"]
FOCUS_NOT_NULL = ["BilledCost", "EffectiveCost", "ListCost", "ContractedCost", "BillingCurrency",
                  "BillingAccountId", "BillingPeriodStart", "BillingPeriodEnd",
                  "ChargePeriodStart", "ChargePeriodEnd", "ChargeCategory", "ProviderName",
                  "PublisherName", "InvoiceIssuerName", "ServiceCategory"]
FOCUS_COSTS = ["BilledCost", "EffectiveCost", "ListCost", "ContractedCost"]
FOCUS_DATES = ["BillingPeriodStart", "BillingPeriodEnd", "ChargePeriodStart", "ChargePeriodEnd"]
CHARGE_CATEGORIES = {"Usage", "Purchase", "Tax", "Credit", "Adjustment"}
CHARGE_CLASSES = {"", "Correction"}
PRICING_CATEGORIES = {"Standard", "Dynamic", "Committed", "Other"}
SERVICE_CATEGORIES = {
    "AI and Machine Learning", "Analytics", "Business Applications", "Compute", "Databases",
    "Developer Tools", "Multicloud", "Identity", "Integration", "Internet of Things",
    "Management and Governance", "Media", "Migration", "Mobile", "Networking", "Security",
    "Storage", "Web", "Other"}
ISO_UTC = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$")
DECIMAL = re.compile(r"^-?\d+(\.\d+)?$")
PASCAL = re.compile(r"^[A-Z][A-Za-z0-9]*$")


def check_focus(test, text):
    """Every FOCUS rule above, on CSV text; returns the rows."""
    rows = list(csv.DictReader(io.StringIO(text)))
    header = text.splitlines()[0].split(",")
    for column in FOCUS_MANDATORY:
        test.assertIn(column, header, "mandatory column %s" % column)
    for column in header:
        test.assertTrue(column.startswith("x_") or PASCAL.match(column),
                        "column %s: PascalCase, or custom with the x_ prefix" % column)
    for row in rows:
        for column in FOCUS_NOT_NULL:
            test.assertNotEqual(row[column], "", "%s must not be null" % column)
        for column in FOCUS_COSTS + ["PricingQuantity", "ConsumedQuantity"]:
            test.assertRegex(row[column], DECIMAL, column)
        test.assertRegex(row["BillingCurrency"], r"^[A-Z]{3}$")
        for column in FOCUS_DATES:
            test.assertRegex(row[column], ISO_UTC, column)
        parse = lambda c: datetime.datetime.strptime(row[c], "%Y-%m-%dT%H:%M:%SZ")
        test.assertLess(parse("ChargePeriodStart"), parse("ChargePeriodEnd"))
        test.assertLess(parse("BillingPeriodStart"), parse("BillingPeriodEnd"))
        test.assertLessEqual(parse("BillingPeriodStart"), parse("ChargePeriodStart"))
        test.assertLessEqual(parse("ChargePeriodEnd"), parse("BillingPeriodEnd"))
        test.assertIn(row["ChargeCategory"], CHARGE_CATEGORIES)
        test.assertIn(row["ChargeClass"], CHARGE_CLASSES)
        test.assertIn(row["ServiceCategory"], SERVICE_CATEGORIES)
        if row["ChargeCategory"] == "Usage":
            test.assertIn(row["PricingCategory"], PRICING_CATEGORIES)
            test.assertNotEqual(row["ConsumedQuantity"], "")
            test.assertNotEqual(row["ConsumedUnit"], "")
        if row["PricingQuantity"] != "":
            test.assertNotEqual(row["PricingUnit"], "")
        # Costs are consistent: none negative for usage; effective never above list.
        costs = {c: decimal.Decimal(row[c]) for c in FOCUS_COSTS}
        for column, value in costs.items():
            test.assertGreaterEqual(value, 0, column)
        test.assertLessEqual(costs["EffectiveCost"], costs["ListCost"])
        test.assertLessEqual(costs["EffectiveCost"], costs["ContractedCost"])
        tags = json.loads(row["Tags"])
        test.assertIsInstance(tags, dict)
        test.assertTrue(all(isinstance(k, str) for k in tags))
    return rows


class DomReader(html.parser.HTMLParser):
    """The chart's series and the table's rows of the page a browser dumped."""

    def __init__(self):
        super().__init__()
        self.series, self.rows, self.total, self.scripts = {}, {}, None, 0

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "script":
            self.scripts += 1
        if tag == "g" and a.get("class") == "series":
            self.series[a["data-group"]] = float(a["data-total"])
        if tag == "tr" and a.get("class") == "group":
            self.rows[a["data-group"]] = float(a["data-spend"])
        if tag == "tr" and a.get("class") == "total":
            self.total = float(a["data-spend"])


class ReportTest(LedgerTest):
    @classmethod
    def setUpClass(cls):
        cls.seeded = None

    def setUp(self):
        super().setUp()
        self.write_policy(POLICY)

    def seed(self):
        base = ["run", "--rate", "36"]
        self.run_ok(base + ["--team", "vision", "--experiment", "resnet", "--budget", "1",
                            "--status-file", self.path("a.json")] + job(0))
        self.run_ok(base + ["--team", "vision", "--experiment", "resnet", "--budget", "1"] + job(0))
        self.run_ok(base + ["--team", "vision", "--experiment", "resnet", "--budget", "1"] + job(3),
                    code=3)
        # Killed by its budget: 0.03 at 0.01/s with a reserve of 0.01 trips after about 2 s.
        self.run_ok(base + ["--team", "vision", "--experiment", "vit", "--budget", "0.03", "--",
                            "python3", "-c", "import time; time.sleep(60)"], code=124)
        self.run_ok(base + ["--team", "nlp", "--experiment", "bert", "--budget", "1",
                            "--tag", "lr=3e-4"] + job(0))
        # Refused: the budget does not cover the reserve.
        self.run_ok(base + ["--team", "nlp", "--experiment", "bert", "--budget", "0.001"] + job(0),
                    code=120)
        return self.read_json("a.json")["run_id"]

    def report(self, *args):
        result = self.run_ok(["report"] + list(args))
        return result.stdout

    def sums(self, column):
        totals = {}
        for row in self.runs():
            totals[row[column]] = totals.get(row[column], 0) + row["spend_micros"]
        return totals

    def test_totals_csv_json_waste_accepted(self):
        accepted_id = self.seed()
        rows = self.runs()
        self.assertEqual(len(rows), 6)
        self.assertEqual(sorted(r["status"] for r in rows),
                         ["failed", "killed", "refused", "succeeded", "succeeded", "succeeded"])
        self.assertGreater(sum(r["spend_micros"] for r in rows), 0)
        self.run_ok(["accept", accepted_id, "--note", "the one we ship"])

        for by, column in (("team", "team"), ("experiment", "experiment")):
            expected = self.sums(column)
            data = json.loads(self.report("--by", by, "--format", "json"))
            got = {g["group"][by]: round(g["spend"] * MICROS) for g in data["groups"]}
            self.assertEqual(got, expected, "report by %s = sum of the runs' spend" % by)
            self.assertEqual(round(data["total"]["spend"] * MICROS), sum(expected.values()))
            table = list(csv.DictReader(io.StringIO(self.report("--by", by, "--format", "csv"))))
            self.assertEqual({r[by]: round(float(r["spend"]) * MICROS) for r in table}, expected)
            self.assertEqual({r[by]: int(r["runs"]) for r in table},
                             {g["group"][by]: g["runs"] for g in data["groups"]})

        data = json.loads(self.report("--by", "experiment", "--format", "json"))
        groups = {g["group"]["experiment"]: g for g in data["groups"]}
        resnet, vit, bert = groups["resnet"], groups["vit"], groups["bert"]
        spend = {r["id"]: r["spend_micros"] for r in self.runs()}
        failed = [r for r in self.runs() if r["status"] == "failed"][0]
        killed = [r for r in self.runs() if r["status"] == "killed"][0]
        self.assertEqual((resnet["succeeded"], resnet["failed"]), (2, 1))
        self.assertEqual(round(resnet["waste"] * MICROS), failed["spend_micros"])
        self.assertEqual(round(vit["waste"] * MICROS), killed["spend_micros"])
        self.assertEqual(vit["killed"], 1)
        self.assertAlmostEqual(vit["waste_share"], 1.0)
        self.assertEqual((bert["refused"], bert["waste"]), (1, 0))
        # Cost per accepted result: the experiment's whole spend over its one accepted run.
        self.assertEqual(resnet["accepted"], 1)
        self.assertAlmostEqual(resnet["cost_per_accepted"], resnet["spend"], places=6)
        self.assertIsNone(vit["cost_per_accepted"])
        self.assertGreater(resnet["spend"], spend[accepted_id] / MICROS, "every try included")
        # Nothing measured GPUs or energy here: null, never 0.
        self.assertIsNone(resnet["gpu_hours_allocated"])
        self.assertIsNone(resnet["energy_kwh"])

        # Filters and periods: a run belongs to the period it started in.
        data = json.loads(self.report("--by", "team", "--team", "nlp", "--format", "json"))
        self.assertEqual([g["group"]["team"] for g in data["groups"]], ["nlp"])
        data = json.loads(self.report("--by", "team", "--until", "2001-01-01", "--format", "json"))
        self.assertEqual(data["groups"], [])
        by_tag = self.run_ok(["report", "--by", "tag:lr", "--since", "1d", "--format", "json"])
        data = json.loads(by_tag.stdout)
        self.assertEqual({g["group"]["tag:lr"]: g["runs"] for g in data["groups"]},
                         {"3e-4": 1, "": 5})
        # Tags are not in the ledger's rollups: it says that it reads the runs; a team does not.
        self.assertIn("reading every run of the period", by_tag.stderr)
        self.assertNotIn("reading every run", self.run_ok(["report", "--by", "team"]).stderr)

        # The table: right-aligned money with the currency, a bar per row.
        table = self.run_spendcap(["report", "--by", "team"], extra_env={"COLUMNS": "150"}).stdout
        lines = table.splitlines()
        self.assertTrue(lines[0].startswith("team"))
        self.assertIn("\u2588", lines[1])
        self.assertIn("$", lines[1])
        self.assertTrue(all(len(line) <= 150 for line in lines), table)
        self.assertIn("not measured:", table)

    def test_names_whole_through_a_pipe_cut_on_a_terminal(self):
        """Issue 40: `report` through a pipe (or into a file) prints every name whole, so grep and
        sort see them; on a terminal the table keeps to the terminal's width (names cut to
        "name~"). The terminal is a real pty of 80 columns. Negative control: with the old rule
        (no terminal: 120 columns) the piped name came out as "experiment-with-a-name-far-t~"."""
        name = "experiment-with-a-name-far-too-long-for-any-terminal-of-eighty-columns-lr3e-4"
        self.run_ok(["run", "--rate", "36", "--budget", "1", "--team", "vision",
                     "--experiment", name] + job(0))
        env = {k: v for k, v in self.spendcap_env().items() if k != "COLUMNS"}
        piped = subprocess.run([SPENDCAP, "report", "--by", "team", "--by", "experiment"], env=env,
                               cwd=self.tmp, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, timeout=60)
        self.assertEqual(piped.returncode, 0, piped.stderr)
        self.assertIn(name, piped.stdout)
        self.assertNotIn("~", piped.stdout)
        # COLUMNS set is a width asked for, terminal or not.
        asked = self.run_spendcap(["report", "--by", "team", "--by", "experiment"],
                                  extra_env={"COLUMNS": "80"})
        self.assertNotIn(name, asked.stdout)
        self.assertIn("~", asked.stdout)

        primary, secondary = pty.openpty()
        fcntl.ioctl(secondary, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
        try:
            process = subprocess.Popen([SPENDCAP, "report", "--by", "team", "--by", "experiment"],
                                       env=env, cwd=self.tmp, stdin=subprocess.DEVNULL,
                                       stdout=secondary, stderr=subprocess.PIPE)
            os.close(secondary)
            secondary = -1
            shown = b""
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                ready, _, _ = select.select([primary], [], [], 1)
                if not ready:
                    if process.poll() is not None:
                        break
                    continue
                try:
                    chunk = os.read(primary, 65536)
                except OSError:  # EIO: every writer of the pty is gone
                    break
                if not chunk:
                    break
                shown += chunk
            self.assertEqual(process.wait(timeout=60), 0, process.stderr.read())
            process.stderr.close()
        finally:
            os.close(primary)
            if secondary >= 0:
                os.close(secondary)
        lines = shown.decode().replace("\r\n", "\n").splitlines()
        self.assertTrue(lines and lines[0].startswith("team"), shown)
        self.assertNotIn(name, shown.decode())
        self.assertTrue(any("~" in line for line in lines), shown)
        # Names are cut (to 8 at the least) before the numbers, which are never cut.
        self.assertLess(len(lines[0]), len(piped.stdout.splitlines()[0]))

    def test_measured_progress_priced(self):
        """Runs that report a metric, units and egress on their progress channel: the report's
        cost per metric point and per thousand units are the ledger's spend over what they
        reported; egress is priced at rates.egress_per_gb."""
        self.write_policy(dict(POLICY, rates={"egress_per_gb": 0.09}))
        progress_job = os.path.join(FIXTURES, "progress_job.py")
        for speed in ("100", "50"):
            self.run_ok(["run", "--rate", "36", "--budget", "5", "--interval", "200ms",
                         "--team", "vision", "--experiment", "sweep", "--", sys.executable,
                         progress_job, "--seconds", "1.5", "--steps-per-second", speed])
        self.run_ok(["run", "--rate", "36", "--budget", "1", "--team", "vision",
                     "--experiment", "plain"] + job(0))
        runs = {r["experiment"]: [] for r in self.runs()}
        for r in self.runs():
            runs[r["experiment"]].append(r)
        sweep = runs["sweep"]
        self.assertTrue(all(r["metric_name"] == "val_acc" for r in sweep), sweep)
        spend = sum(r["spend_micros"] for r in sweep) / MICROS
        best = max(r["metric_value"] for r in sweep)
        units = sum(r["units"] for r in sweep)
        self.assertGreater(units, 0)

        data = json.loads(self.report("--by", "experiment", "--baseline", "0.01", "--metric",
                                      "val_acc", "--format", "json"))
        groups = {g["group"]["experiment"]: g for g in data["groups"]}
        got = groups["sweep"]
        self.assertAlmostEqual(got["spend"], spend, places=6)
        self.assertEqual(got["metric"], "val_acc")
        self.assertAlmostEqual(got["best_metric"], best)
        self.assertAlmostEqual(got["cost_per_metric_point"], spend / (best - 0.01), places=6)
        self.assertAlmostEqual(got["units"], units)
        self.assertAlmostEqual(got["cost_per_thousand_units"], spend / units * 1000, places=9)
        self.assertAlmostEqual(got["egress_gb"], 1.0)
        self.assertAlmostEqual(got["egress_spend"], 0.09, places=6)
        # Negative control: the run that reported nothing has none of these, never 0.
        plain = groups["plain"]
        self.assertIsNone(plain["units"])
        self.assertIsNone(plain["cost_per_thousand_units"])
        self.assertIsNone(plain["egress_gb"])
        self.assertIsNone(plain["cost_per_metric_point"])
        # A baseline above the best: no improvement, said, not divided by.
        data = json.loads(self.report("--by", "experiment", "--baseline", "0.99", "--format",
                                      "json", "--experiment", "sweep"))
        self.assertEqual(data["groups"][0]["cost_per_metric_point_text"],
                         "undefined: no improvement")
        # The same numbers in the csv.
        table = {r["experiment"]: r for r in csv.DictReader(io.StringIO(self.report(
            "--by", "experiment", "--baseline", "0.01", "--format", "csv")))}
        self.assertAlmostEqual(float(table["sweep"]["egress_spend"]), 0.09, places=6)

    def test_focus_export(self):
        self.seed()
        text = self.report("--format", "focus")
        rows = check_focus(self, text)
        ledger = {r["id"]: r for r in self.runs()}
        # Every charged run is there, its rows summing exactly to its spend; refused runs are not.
        billed = {}
        for row in rows:
            billed[row["ResourceId"]] = (billed.get(row["ResourceId"], decimal.Decimal(0))
                                         + decimal.Decimal(row["BilledCost"]))
            self.assertEqual(row["ProviderName"], "spendcap")
            self.assertEqual(row["PricingCategory"], "Standard")
            self.assertEqual(row["x_Team"], ledger[row["ResourceId"]]["team"])
        charged = {i: r for i, r in ledger.items() if r["status"] != "refused"}
        self.assertEqual(set(billed), set(charged))
        for run_id, total in billed.items():
            self.assertEqual(int(total * MICROS), charged[run_id]["spend_micros"])
        tagged = [r for r in rows if json.loads(r["Tags"]).get("lr") == "3e-4"]
        self.assertEqual(len(tagged), 1)
        refused = self.run_spendcap(["report", "--format", "focus", "--by", "team"])
        self.assertEqual(refused.returncode, 125)
        self.assertIn("--by and --baseline do not apply", refused.stderr)
        # Negative control: the checker rejects a row that breaks a rule.
        broken = text.replace(",Usage,", ",Compute,", 1)
        with self.assertRaises(AssertionError):
            check_focus(self, broken)

    @unittest.skipUnless(shutil.which("chromium"), "Debian's chromium is not installed")
    def test_html_in_a_real_browser(self):
        self.seed()
        with open(self.path("report.html"), "w") as f:
            f.write(self.report("--by", "team", "--format", "html"))
        # The page as a real browser builds it (no scripts: the DOM is the page).
        browser = subprocess.run(
            ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom",
             "file://" + self.path("report.html")],
            capture_output=True, text=True, timeout=120,
            env=dict(self.env, HOME=self.path("tmp")))
        self.assertEqual(browser.returncode, 0, browser.stderr[-2000:])
        page = DomReader()
        page.feed(browser.stdout)
        data = json.loads(self.report("--by", "team", "--format", "json"))
        teams = {g["group"]["team"]: g["spend"] for g in data["groups"]}
        self.assertEqual(sorted(page.series), sorted(teams), "one series per group")
        self.assertEqual(sorted(page.rows), sorted(teams))
        for team, spend in teams.items():
            self.assertAlmostEqual(page.series[team], spend, places=5)
            self.assertAlmostEqual(page.rows[team], spend, places=5)
        self.assertAlmostEqual(sum(page.series.values()), page.total, places=5)
        self.assertAlmostEqual(page.total, data["total"]["spend"], places=5)
        self.assertFalse(page.scripts, "no scripts")

    def test_accept_refuses_unknown_and_refused_runs(self):
        self.run_ok(["run", "--rate", "36", "--team", "t", "--budget", "0.001"] + job(0), code=120)
        refused = self.runs()[0]["id"]
        result = self.run_spendcap(["accept", refused])
        self.assertEqual(result.returncode, 125)
        self.assertIn("refused", result.stderr)
        result = self.run_spendcap(["accept", "no-such-run"])
        self.assertEqual(result.returncode, 125)
        self.assertIn("no such run", result.stderr)
        bad = self.run_spendcap(["report", "--by", "colour"])
        self.assertEqual(bad.returncode, 125)
        self.assertIn("--by colour", bad.stderr)

    def test_running_run_counts_marked(self):
        process = self.start_spendcap(["run", "--rate", "36", "--team", "live", "--budget", "5",
                                       "--", "python3", "-c", "import time; time.sleep(60)"])
        try:
            wait_until(lambda: any(r["spend_micros"] > 0 for r in self.runs()), 60,
                       what="a heartbeat with spend")
            data = json.loads(self.report("--by", "team", "--format", "json"))
            live = data["groups"][0]
            self.assertEqual((live["running"], live["runs"]), (1, 1))
            self.assertGreater(live["running_spend"], 0)
            self.assertEqual(live["running_spend"], live["spend"])
            table = self.report("--by", "team")
            self.assertIn("*", table.splitlines()[1])
            self.assertIn("still running", table)
        finally:
            process.send_signal(signal.SIGTERM)
            process.communicate(timeout=60)


if __name__ == "__main__":
    unittest.main()
