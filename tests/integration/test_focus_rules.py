"""FOCUS 1.2 export against the specification's rules (issue 21, items 1 and 5), on a ledger seeded
through real runs priced on demand, spot and reserved by the policy, and by --rate.

The rules below are written from the FOCUS 1.2 column definitions
(github:FinOps-Open-Cost-and-Usage-Spec/FOCUS_Spec, tag v1.2, specification/columns/*.md) and the
FinOps Foundation validator's rule ids (github:finopsfoundation/focus_validator,
focus_validator/rules/model-1.2.json), not from spendcap's output. `focus_violations` returns the
ids of the rules a dataset breaks; each rule has a negative control: a row broken on purpose that
the rule rejects. test_report.check_focus (mandatory columns, types, dates, allowed values) runs
too."""
import csv
import decimal
import io
import json
import os
import re
import sqlite3
import unittest

from spendcap_testlib import LedgerTest
from test_report import check_focus

MICROS = 1_000_000
POLICY = {
    "rates": {"gpu": {"a100": {"on_demand": 36, "spot": 12, "reserved": 24}},
              "instance": {"cpu8": {"on_demand": 3.6}}},
    "defaults": {"grace": "0s", "kill_after": "0s", "sync": "1s"},
}
PRICING_CATEGORIES = {"Standard", "Dynamic", "Committed", "Other"}
COMMITMENT_CATEGORIES = {"Spend", "Usage"}
COMMITMENT_STATUSES = {"Used", "Unused"}
COMMITMENT_COLUMNS = ["CommitmentDiscountCategory", "CommitmentDiscountType",
                      "CommitmentDiscountStatus"]
# UnitFormat (specification/attributes/unit_format.md): "<plural-units>", "<singular-unit>-<plural-
# time-units>", "<plural-units>/<singular-time-unit>", optionally with a whole-number quantity.
UNIT = re.compile(r"^(\d+ )?[A-Z][A-Za-z]*(-(Years|Months|Days|Hours|Minutes|Seconds))?"
                  r"(/(\d+ )?(Year|Month|Day|Hour|Minute|Second)s?)?$")
DECIMAL = re.compile(r"^-?\d+(\.\d+)?([eE][-+]?\d+)?$")
# spendcap's provider-defined tag keys: they must carry its prefix (Tags-C-012-M).
SPENDCAP_TAG_KEYS = {"gpu", "gpus", "instance"}
ONE_MICRO = decimal.Decimal("0.000001")


def is_null(value):
    return value == ""


def starts_a_formula(cell):
    """OWASP's CSV injection trigger characters, on a cell that is not a plain number."""
    return cell[:1] in ("=", "+", "-", "@", "\t", "\r") and not DECIMAL.match(cell)


def focus_violations(rows):
    """The ids of the FOCUS 1.2 rules (the validator's ids, or spendcap's own for item 5) that the
    rows break; empty when they pass."""
    broken = set()
    sku_of_price = {}
    for row in rows:
        usage = row["ChargeCategory"] == "Usage" and row["ChargeClass"] != "Correction"
        # PricingCategory-C-004-C, -C-007-M: not null for usage, one of the allowed values.
        if usage and is_null(row["PricingCategory"]):
            broken.add("PricingCategory-C-004-C")
        if not is_null(row["PricingCategory"]) and row["PricingCategory"] not in PRICING_CATEGORIES:
            broken.add("PricingCategory-C-007-M")
        # PricingCategory-C-009-C: Committed is a charge subject to a commitment discount, which
        # CommitmentDiscountId names (CommitmentDiscountId-C-005-C).
        if row["PricingCategory"] == "Committed" and is_null(row["CommitmentDiscountId"]):
            broken.add("PricingCategory-C-009-C")
        if row["PricingCategory"] not in ("Committed", "") and not is_null(
                row["CommitmentDiscountId"]):
            broken.add("CommitmentDiscountId-C-004-C")
        # CommitmentDiscount{Category,Type,Status}-C-003/004: null exactly when the Id is null.
        for column in COMMITMENT_COLUMNS:
            if is_null(row["CommitmentDiscountId"]) != is_null(row[column]):
                broken.add(column + "-C-003-C")
        if not is_null(row["CommitmentDiscountCategory"]) and (
                row["CommitmentDiscountCategory"] not in COMMITMENT_CATEGORIES):
            broken.add("CommitmentDiscountCategory-C-005-M")
        if not is_null(row["CommitmentDiscountStatus"]) and (
                row["CommitmentDiscountStatus"] not in COMMITMENT_STATUSES):
            broken.add("CommitmentDiscountStatus-C-005-M")
        # SkuId-C-005-C, SkuPriceId-C-005-C: not null for usage; SkuPriceId-C-008-M: one parent.
        if usage and is_null(row["SkuId"]):
            broken.add("SkuId-C-005-C")
        if usage and is_null(row["SkuPriceId"]):
            broken.add("SkuPriceId-C-005-C")
        if not is_null(row["SkuPriceId"]):
            if sku_of_price.setdefault(row["SkuPriceId"], row["SkuId"]) != row["SkuId"]:
                broken.add("SkuPriceId-C-008-M")
        # Quantities and units: PricingUnit-C-005/006, ConsumedUnit-C-005/006, UnitFormat.
        for quantity, unit in (("PricingQuantity", "PricingUnit"),
                               ("ConsumedQuantity", "ConsumedUnit")):
            if is_null(row[quantity]) != is_null(row[unit]):
                broken.add(unit + "-C-005-C")
            if not is_null(row[unit]) and not UNIT.match(row[unit]):
                broken.add(unit + "-C-003-O")
            if not is_null(row[quantity]) and not DECIMAL.match(row[quantity]):
                broken.add(quantity + "-C-001-M")
        # Unit prices: non-negative decimals (ListUnitPrice-C-008-M, ContractedUnitPrice-C-009-C);
        # price x PricingQuantity matches the cost (ListCost-C-009-C, ContractedCost-C-009-C),
        # within the half micro-unit each side is rounded to; without a price the cost is the
        # BilledCost (ListCost-C-008-C, ContractedCost-C-008-C).
        for price_column, cost_column in (("ListUnitPrice", "ListCost"),
                                          ("ContractedUnitPrice", "ContractedCost")):
            cost = decimal.Decimal(row[cost_column])
            if is_null(row[price_column]):
                if cost != decimal.Decimal(row["BilledCost"]):
                    broken.add(cost_column + "-C-008-C")
                continue
            if not DECIMAL.match(row[price_column]) or decimal.Decimal(row[price_column]) < 0:
                broken.add(price_column + "-C-008-M")
                continue
            product = decimal.Decimal(row[price_column]) * decimal.Decimal(row["PricingQuantity"])
            if abs(product - cost) > ONE_MICRO:
                broken.add(cost_column + "-C-009-C")
        # Tags-C-012-M: provider-defined keys carry the provider's prefix.
        tags = json.loads(row["Tags"]) if row["Tags"] else {}
        if any(key in SPENDCAP_TAG_KEYS for key in tags):
            broken.add("Tags-C-012-M")
        # Issue 21 item 5: no cell starts a spreadsheet formula.
        if any(starts_a_formula(cell) for cell in row.values()):
            broken.add("spendcap-csv-formula")
    return broken


def read_rows(text):
    return list(csv.DictReader(io.StringIO(text)))


def job():
    return ["--", "python3", "-c", "pass"]


class FocusRulesTest(LedgerTest):
    def setUp(self):
        super().setUp()
        self.write_policy(POLICY)

    def seed(self):
        """One run of each pricing; returns {name: run id}."""
        runs = {
            "on-demand": ["--gpu", "a100", "--gpus", "2", "--team", "vision", "--experiment",
                          '=HYPERLINK("http://attacker.example/","open")', "--tag", "lr=-0.5"],
            "spot": ["--gpu", "a100", "--gpus", "1", "--pricing", "spot", "--team", "vision",
                     "--tag", "note=@SUM(1)"],
            "reserved": ["--gpu", "a100", "--gpus", "1", "--pricing", "reserved", "--team", "nlp",
                         "--tag", "cmd=+cmd|' /C calc'!A0"],
            "instance": ["--instance", "cpu8", "--team", "nlp"],
            "rate-reserved": ["--rate", "36", "--pricing", "reserved", "--team", "ops"],
            "rate": ["--rate", "36", "--team", "ops"],
        }
        ids = {}
        for name, args in runs.items():
            self.run_ok(["run", "--budget", "5", "--status-file", self.path(name + ".json")] +
                        args + job())
            ids[name] = self.read_json(name + ".json")["run_id"]
        return ids

    def focus(self, *args):
        return self.run_ok(["report", "--format", "focus"] + list(args)).stdout

    def test_pricing_per_run_and_the_spec_rules(self):
        ids = self.seed()
        ledger = {r["id"]: r for r in self.runs()}
        # The ledger keeps each run's pricing (schema v11).
        self.assertEqual({name: ledger[i]["pricing"] for name, i in ids.items()},
                         {"on-demand": "on-demand", "spot": "spot", "reserved": "reserved",
                          "instance": "on-demand", "rate-reserved": "reserved",
                          "rate": "on-demand"})
        text = self.focus()
        rows = check_focus(self, text)
        self.assertEqual(focus_violations(rows), set())
        by_run = {}
        for row in rows:
            by_run.setdefault(row["ResourceId"], []).append(row)
        first = {name: by_run[i][0] for name, i in ids.items()}
        self.assertEqual({name: row["PricingCategory"] for name, row in first.items()},
                         {"on-demand": "Standard", "spot": "Dynamic", "reserved": "Committed",
                          "instance": "Standard", "rate-reserved": "Other", "rate": "Standard"})
        # One SkuId per GPU type whatever the pricing; a SkuPriceId per type and pricing.
        self.assertEqual({first[n]["SkuId"] for n in ("on-demand", "spot", "reserved")},
                         {"spendcap/gpu/a100"})
        self.assertEqual(len({first[n]["SkuPriceId"] for n in ("on-demand", "spot",
                                                                "reserved")}), 3)
        self.assertEqual(first["instance"]["SkuId"], "spendcap/instance/cpu8")
        # The list (on-demand) unit price per GPU-hour, and 2 GPUs in the quantity.
        for name in ("on-demand", "spot", "reserved"):
            self.assertEqual(first[name]["ListUnitPrice"], "36.000000", name)
            self.assertEqual(first[name]["PricingUnit"], "GPU-Hours", name)
        seconds = sum(decimal.Decimal(r["ConsumedQuantity"]) for r in by_run[ids["on-demand"]])
        hours = sum(decimal.Decimal(r["PricingQuantity"]) for r in by_run[ids["on-demand"]])
        self.assertAlmostEqual(float(hours), 2 * float(seconds) / 3600, places=8)
        # Exact quantities: the run's own seconds, not a whole-second charge period.
        self.assertAlmostEqual(float(seconds), ledger[ids["on-demand"]]["elapsed_seconds"],
                               places=6)
        # The commitment: the policy's reserved price of the type, named per type.
        self.assertEqual(
            [first["reserved"][c] for c in ["CommitmentDiscountId"] + COMMITMENT_COLUMNS],
            ["spendcap/commitment/gpu/a100", "Usage", "Reserved", "Used"])
        for name in ("on-demand", "spot", "rate-reserved"):
            self.assertEqual(first[name]["CommitmentDiscountId"], "", name)
        # spendcap's own tag keys prefixed, the user's as given.
        tags = json.loads(first["on-demand"]["Tags"])
        self.assertEqual(tags, {"spendcap/gpu": "a100", "spendcap/gpus": "2", "lr": "-0.5"})
        # Rows still sum exactly to each run's spend.
        for name, run_id in ids.items():
            billed = sum(decimal.Decimal(r["BilledCost"]) for r in by_run[run_id])
            self.assertEqual(int(billed * MICROS), ledger[run_id]["spend_micros"], name)

        # Re-exported under a policy whose default pricing is spot: nothing changes (the runs'
        # pricing is the ledger's, not the report's policy).
        self.write_policy(dict(POLICY, defaults=dict(POLICY["defaults"], pricing="spot")))
        again = {r["ResourceId"]: r["PricingCategory"] for r in read_rows(self.focus())}
        self.assertEqual(again[ids["on-demand"]], "Standard")
        self.assertEqual(again[ids["reserved"]], "Committed")

        # A run recorded before the ledger kept pricing (NULL) is not guessed: Other, unknown.
        connection = sqlite3.connect(self.ledger_file())
        connection.execute("UPDATE runs SET pricing = NULL WHERE id = ?", (ids["rate"],))
        connection.commit()
        connection.close()
        old = [r for r in read_rows(self.focus()) if r["ResourceId"] == ids["rate"]][0]
        self.assertEqual((old["PricingCategory"], old["x_Pricing"]), ("Other", "unknown"))

    def test_a_reserved_run_is_committed_without_its_policy(self):
        # Issue 30, item 8: finance exports FOCUS on another machine, without the runs' policy,
        # or after the policy changed. The commitment a reserved run used is the ledger's
        # (schema v16), so its rows read the same on any day.
        ids = self.seed()
        ledger = {r["id"]: r for r in self.runs()}
        self.assertEqual(ledger[ids["reserved"]]["commitment_micros"], 24 * MICROS)
        for name in ("on-demand", "spot", "instance", "rate-reserved", "rate"):
            self.assertIsNone(ledger[ids[name]]["commitment_micros"], name)
        with_policy = {r["ResourceId"]: r for r in read_rows(self.focus())}
        os.remove(self.path("spendcap.json"))
        changed = dict(POLICY, rates={"gpu": {"a100": {"on_demand": 40}}})
        for policy in (None, changed):
            if policy:
                self.write_policy(policy)
            rows = read_rows(self.focus())
            self.assertEqual(focus_violations(rows), set(), policy)
            by_id = {r["ResourceId"]: r for r in rows}
            reserved = by_id[ids["reserved"]]
            self.assertEqual(reserved["PricingCategory"], "Committed", policy)
            self.assertEqual(reserved["CommitmentDiscountId"], "spendcap/commitment/gpu/a100")
            # One GPU at the committed price: the same quantity as with the policy.
            self.assertEqual(reserved["PricingUnit"], "GPU-Hours", policy)
            self.assertEqual(reserved["PricingQuantity"],
                             with_policy[ids["reserved"]]["PricingQuantity"])
            self.assertEqual(reserved["BilledCost"], with_policy[ids["reserved"]]["BilledCost"])
            # Negative control: a reserved run that named no type had no commitment to keep.
            self.assertEqual(by_id[ids["rate-reserved"]]["PricingCategory"], "Other")

    def test_formula_cells_neutralised_and_raw_on_request(self):
        ids = self.seed()
        text = self.focus()
        rows = read_rows(text)
        run = [r for r in rows if r["ResourceId"] == ids["on-demand"]][0]
        evil = '=HYPERLINK("http://attacker.example/","open")'
        # OWASP: a single quote in front, and the cell quoted.
        self.assertEqual(run["x_Experiment"], "'" + evil)
        self.assertIn('"\'=HYPERLINK(""http://attacker.example/"",""open"")"', text)
        self.assertNotIn("spendcap-csv-formula", focus_violations(rows))
        # The report's csv: the group key neutralised, the numbers left numbers.
        table = read_rows(self.run_ok(["report", "--by", "experiment", "--format",
                                       "csv"]).stdout)
        keys = [r["experiment"] for r in table]
        self.assertIn("'" + evil, keys)
        for r in table:
            self.assertFalse(any(starts_a_formula(c) for c in r.values()), r)
            float(r["spend"])  # a number, not quoted text
        by_tag = read_rows(self.run_ok(["report", "--by", "tag:lr", "--format", "csv"]).stdout)
        self.assertIn("-0.5", [r["tag:lr"] for r in by_tag])  # a number stays as it is
        # --csv-raw: exactly what the ledger holds, for machine pipelines; the formula rule
        # rejects it (the negative control of the guard).
        raw = read_rows(self.focus("--csv-raw"))
        run = [r for r in raw if r["ResourceId"] == ids["on-demand"]][0]
        self.assertEqual(run["x_Experiment"], evil)
        self.assertIn("spendcap-csv-formula", focus_violations(raw))
        raw_table = read_rows(self.run_ok(["report", "--by", "experiment", "--format", "csv",
                                           "--csv-raw"]).stdout)
        self.assertIn(evil, [r["experiment"] for r in raw_table])
        refused = self.run_spendcap(["report", "--csv-raw"])
        self.assertEqual(refused.returncode, 125)
        self.assertIn("--csv-raw", refused.stderr)

    def test_every_rule_rejects_a_broken_row(self):
        """Negative controls: each rule, on a copy of a valid dataset with one cell broken."""
        ids = self.seed()
        rows = read_rows(self.focus())
        self.assertEqual(focus_violations(rows), set())
        committed = next(i for i, r in enumerate(rows) if r["ResourceId"] == ids["reserved"])
        priced = next(i for i, r in enumerate(rows) if r["ResourceId"] == ids["on-demand"])
        plain = next(i for i, r in enumerate(rows) if r["ResourceId"] == ids["rate-reserved"])
        cases = [
            (priced, {"PricingCategory": ""}, "PricingCategory-C-004-C"),
            (priced, {"PricingCategory": "OnDemand"}, "PricingCategory-C-007-M"),
            (committed, {"CommitmentDiscountId": "", "CommitmentDiscountCategory": "",
                         "CommitmentDiscountType": "", "CommitmentDiscountStatus": ""},
             "PricingCategory-C-009-C"),
            (plain, {"CommitmentDiscountId": "x"}, "CommitmentDiscountId-C-004-C"),
            (committed, {"CommitmentDiscountStatus": ""}, "CommitmentDiscountStatus-C-003-C"),
            (committed, {"CommitmentDiscountCategory": "Reserved"},
             "CommitmentDiscountCategory-C-005-M"),
            (committed, {"CommitmentDiscountStatus": "Active"},
             "CommitmentDiscountStatus-C-005-M"),
            (priced, {"SkuId": ""}, "SkuId-C-005-C"),
            (priced, {"SkuPriceId": ""}, "SkuPriceId-C-005-C"),
            (priced, {"SkuPriceId": rows[committed]["SkuPriceId"], "SkuId": "other"},
             "SkuPriceId-C-008-M"),
            (priced, {"PricingUnit": ""}, "PricingUnit-C-005-C"),
            (priced, {"PricingUnit": "gpu hours"}, "PricingUnit-C-003-O"),
            (priced, {"ConsumedQuantity": "2 s"}, "ConsumedQuantity-C-001-M"),
            (priced, {"ListCost": "999.000000"}, "ListCost-C-009-C"),
            (priced, {"ContractedUnitPrice": "1.000000"}, "ContractedCost-C-009-C"),
            (priced, {"ListUnitPrice": "-36.000000"}, "ListUnitPrice-C-008-M"),
            (plain, {"ListCost": "999.000000"}, "ListCost-C-008-C"),
            (priced, {"Tags": '{"gpu": "a100"}'}, "Tags-C-012-M"),
            (priced, {"x_Experiment": "=1+1"}, "spendcap-csv-formula"),
        ]
        for index, change, rule in cases:
            broken = [dict(r) for r in rows]
            broken[index].update(change)
            self.assertIn(rule, focus_violations(broken), (rule, change))


if __name__ == "__main__":
    unittest.main()
