// FOCUS rows, csv cells and the html page's cents, without a ledger (issue 21, items 1, 5, 6).
#include <doctest/doctest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "spendcap/report/report.hpp"

using namespace spendcap;

namespace {

// RFC 4180 rows of `text` as header -> cell maps.
std::vector<std::map<std::string, std::string>> parse_csv(const std::string& text) {
  std::vector<std::vector<std::string>> lines;
  std::vector<std::string> cells;
  std::string cell;
  bool quoted = false;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (quoted) {
      if (c == '"' && i + 1 < text.size() && text[i + 1] == '"') {
        cell += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        cell += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      cells.push_back(cell);
      cell.clear();
    } else if (c == '\n') {
      cells.push_back(cell);
      cell.clear();
      lines.push_back(cells);
      cells.clear();
    } else {
      cell += c;
    }
  }
  std::vector<std::map<std::string, std::string>> rows;
  for (size_t r = 1; r < lines.size(); ++r) {
    std::map<std::string, std::string> row;
    for (size_t c = 0; c < lines[0].size() && c < lines[r].size(); ++c)
      row[lines[0][c]] = lines[r][c];
    rows.push_back(row);
  }
  return rows;
}

std::vector<std::map<std::string, std::string>> focus_of(const ReportRow& row,
                                                         const FocusContext& context) {
  std::string out = focus_header();
  append_focus_rows(out, row, context);
  return parse_csv(out);
}

ReportRow finished_run(double started, double finished, double spend) {
  ReportRow r;
  r.id = "r1";
  r.team = "vision";
  r.status = RunStatus::succeeded;
  r.started_at = started;
  r.finished_at = finished;
  r.elapsed_seconds = finished - started;
  r.spend = money_from_number(spend).value();
  r.rate_per_hour = money_from_number(36).value();
  r.pricing = Pricing::on_demand;
  return r;
}

double number(const std::string& text) {
  return std::stod(text);
}

}  // namespace

TEST_CASE("csv cells: a formula is neutralised the OWASP way; numbers and plain text are not") {
  for (std::string evil :
       {"=HYPERLINK(\"http://x\")", "+cmd|calc", "-2+3", "@SUM(1)", "\tx", "\rx"}) {
    std::string cell = csv_field(evil);
    CHECK_MESSAGE(cell.rfind("\"'", 0) == 0, evil);  // quoted, a single quote in front
    CHECK(starts_a_formula(evil));
  }
  CHECK(csv_field("=1+1") == "\"'=1+1\"");
  CHECK(csv_field("=\"a\"") == "\"'=\"\"a\"\"\"");
  for (std::string number_text : {"-0.5", "+3", "1e-6", "-12", "0.25"}) {
    CHECK(csv_field(number_text) == number_text);
    CHECK_FALSE(starts_a_formula(number_text));
  }
  CHECK(csv_field("resnet") == "resnet");
  CHECK(csv_field("a,b") == "\"a,b\"");
  // --csv-raw: as stored (the negative control: raw output keeps the formula).
  CHECK(csv_field("=1+1", CsvCells::raw) == "=1+1");
  CHECK(csv_field("a,b", CsvCells::raw) == "\"a,b\"");
  // The report's csv goes through it: a group named like a formula, a numeric cell untouched.
  ReportRow r = finished_run(1'780'000'000, 1'780'000'010, 1.5);
  r.experiment = "@SUM(A1)";
  ReportOptions options;
  options.by = {*parse_group_by("experiment")};
  Report report = build_report({r}, options);
  std::string safe = report_csv(report, "USD");
  CHECK(safe.find("\"'@SUM(A1)\",") != std::string::npos);
  CHECK(safe.find(",1.500000,") != std::string::npos);
  CHECK(report_csv(report, "USD", CsvCells::raw).find("\n@SUM(A1),") != std::string::npos);
}

TEST_CASE("FOCUS: a 2.00 s run consumes 2 s, though its whole-second charge period spans 3 s") {
  FocusContext context;
  ReportRow r = finished_run(1'780'000'000.5, 1'780'000'002.5, 0.02);
  auto rows = focus_of(r, context);
  REQUIRE(rows.size() == 1);
  CHECK(rows[0]["ChargePeriodStart"] == "2026-05-28T20:26:40Z");
  CHECK(rows[0]["ChargePeriodEnd"] == "2026-05-28T20:26:43Z");
  CHECK(rows[0]["ConsumedQuantity"] == "2");
  CHECK(rows[0]["ConsumedUnit"] == "Seconds");
  CHECK(number(rows[0]["PricingQuantity"]) == doctest::Approx(2.0 / 3600).epsilon(1e-9));
  // --rate on demand: the rate is the list price; ListCost is price x quantity.
  CHECK(rows[0]["ListUnitPrice"] == "36.000000");
  CHECK(rows[0]["ListCost"] == "0.020000");
  CHECK(rows[0]["PricingCategory"] == "Standard");
  CHECK(rows[0]["SkuId"] == "spendcap/rate");
  CHECK(rows[0]["x_Pricing"] == "on-demand");
}

TEST_CASE("FOCUS: a run across midnight splits its spend and its seconds, summing exactly") {
  FocusContext context;
  const double midnight = 1'780'012'800;  // 2026-05-29T00:00:00Z
  ReportRow r = finished_run(midnight - 900.25, midnight + 2700.25, 1.000001);
  auto rows = focus_of(r, context);
  REQUIRE(rows.size() == 2);
  std::int64_t billed = 0;
  double seconds = 0;
  for (auto& row : rows) {
    billed += std::llround(number(row["BilledCost"]) * 1e6);
    seconds += number(row["ConsumedQuantity"]);
  }
  CHECK(billed == 1'000'001);
  CHECK(seconds == doctest::Approx(3600.5));
  CHECK(number(rows[0]["ConsumedQuantity"]) == doctest::Approx(900.25));
}

TEST_CASE("FOCUS: storage is a charge of its own; compute and storage sum to the spend") {
  Policy policy;
  policy.storage_per_gb_month = money_from_number(2.592).value();  // 0.000001 per GB-second
  policy.gpu_rates["a100"].on_demand = money_from_number(36).value();
  policy.gpu_rates["a100"].reserved = money_from_number(24).value();
  FocusContext context;
  context.policy = &policy;
  ReportRow r = finished_run(1'780'000'000, 1'780'000'100, 1.4);
  r.rate_per_hour = money_from_number(48).value();  // 2 x 24 reserved
  r.pricing = Pricing::reserved;
  r.tags = {{"gpu", "a100"}, {"gpus", "2"}, {"team_lead", "ana"}};
  r.storage_spend = money_from_number(0.4).value();
  r.storage_peak_gb = 4000;
  auto rows = focus_of(r, context);
  REQUIRE(rows.size() == 2);
  auto& compute = rows[0];
  auto& storage = rows[1];
  CHECK(compute["BilledCost"] == "1.000000");
  CHECK(storage["BilledCost"] == "0.400000");
  CHECK(compute["PricingCategory"] == "Committed");
  CHECK(compute["CommitmentDiscountId"] == "spendcap/commitment/gpu/a100");
  CHECK(compute["PricingUnit"] == "GPU-Hours");
  CHECK(number(compute["PricingQuantity"]) == doctest::Approx(200.0 / 3600));
  CHECK(compute["ListUnitPrice"] == "36.000000");  // the on-demand price, not the reserved one
  CHECK(compute["Tags"] ==
        "{\"spendcap/gpu\":\"a100\",\"spendcap/gpus\":\"2\",\"team_lead\":\"ana\"}");
  CHECK(storage["SkuId"] == "spendcap/storage/checkpoint");
  CHECK(storage["ServiceCategory"] == "Storage");
  CHECK(storage["PricingUnit"] == "GB-Months");
  CHECK(storage["CommitmentDiscountId"] == "");
  // price x quantity is the cost: 0.4 / 2.592 GB-months.
  CHECK(number(storage["ListUnitPrice"]) * number(storage["PricingQuantity"]) ==
        doctest::Approx(0.4).epsilon(1e-7));
  // A reserved run whose type has no reserved price in the policy has no commitment: Other.
  policy.gpu_rates["a100"].reserved.reset();
  CHECK(focus_of(r, context)[0]["PricingCategory"] == "Other");
  CHECK(focus_of(r, context)[0]["CommitmentDiscountId"] == "");
}

TEST_CASE("html: cents add up to the printed total (largest remainder), the period is the title") {
  std::vector<ReportRow> rows;
  const double day = 1'780'000'000;
  for (auto [team, spend] : {std::pair{"a", 0.424}, {"b", 0.204}, {"c", 0.114}}) {
    ReportRow r = finished_run(day, day + 10, spend);
    r.id = team;
    r.team = team;
    rows.push_back(r);
  }
  // The case is one where rounding each row alone does not add up: 0.42 + 0.20 + 0.11 = 0.73.
  CHECK(std::lround(0.424 * 100) + std::lround(0.204 * 100) + std::lround(0.114 * 100) == 73);
  CHECK(std::lround(0.742 * 100) == 74);
  ReportOptions options;
  options.by = {*parse_group_by("team")};
  Report report = build_report(rows, options);
  ReportOptions day_options = options;
  day_options.by.insert(day_options.by.begin(), *parse_group_by("day"));
  HtmlContext context;
  context.since = 1'777'593'600;  // 2026-05-01
  context.until = 1'780'272'000;  // 2026-06-01
  std::string page = report_html(report, build_report(rows, day_options), context);
  CHECK(page.find("<title>spendcap showback, 2026-05-01 to 2026-05-31</title>") !=
        std::string::npos);
  CHECK(page.find(">0.43 USD</td>") != std::string::npos);
  CHECK(page.find(">0.20 USD</td>") != std::string::npos);
  CHECK(page.find(">0.11 USD</td>") != std::string::npos);
  CHECK(page.find(">0.74 USD</td>") != std::string::npos);
  CHECK(page.find(">0.42 USD</td>") == std::string::npos);
  CHECK(page.find("largest-remainder") != std::string::npos);
  // No accepted results: no "per accepted" column at all.
  CHECK(page.find("per accepted") == std::string::npos);
  rows[0].accepted = true;
  page = report_html(build_report(rows, options), build_report(rows, day_options), context);
  CHECK(page.find("<th>per accepted</th>") != std::string::npos);
  CHECK(page.find(">none accepted</td>") != std::string::npos);
}
