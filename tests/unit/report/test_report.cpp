// Aggregation without a ledger: totals, waste, accepted results, cost per metric point, and the
// rule that an unmeasured figure is absent, never 0.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "spendcap/report/report.hpp"

using namespace spendcap;

namespace {

ReportRow row(std::string id, std::string team, std::string experiment, RunStatus status,
              double spend, double started_at = 1'780'000'000) {
  ReportRow r;
  r.id = std::move(id);
  r.team = std::move(team);
  r.experiment = std::move(experiment);
  r.status = status;
  r.spend = Money{static_cast<std::int64_t>(spend * 1e6)};
  r.started_at = started_at;
  return r;
}

GroupTotals group(const Report& report, const std::vector<std::string>& key) {
  for (const GroupTotals& g : report.groups) {
    if (g.key == key) return g;
  }
  FAIL("no group");
  return report.total;
}

}  // namespace

TEST_CASE("cost per metric point: 125 for 0.82 -> 0.85 is 4,166.67 per point") {
  CostPerPoint up = cost_per_metric_point(Money{125'000'000}, {"acc", 0.82, MetricGoal::max}, 0.85);
  REQUIRE(up.per_point);
  CHECK(*up.per_point == doctest::Approx(4166.6667));
  CHECK(up.text == "4,166.67");
  // No improvement: undefined, not a division by zero.
  CostPerPoint flat =
      cost_per_metric_point(Money{125'000'000}, {"acc", 0.82, MetricGoal::max}, 0.82);
  CHECK_FALSE(flat.per_point);
  CHECK(flat.text == "undefined: no improvement");
  CostPerPoint worse =
      cost_per_metric_point(Money{125'000'000}, {"acc", 0.82, MetricGoal::max}, 0.80);
  CHECK(worse.text == "undefined: no improvement");
  // A loss improves downward: 2.0 -> 1.5 is half a point.
  CostPerPoint loss =
      cost_per_metric_point(Money{100'000'000}, {"loss", 2.0, MetricGoal::min}, 1.5);
  REQUIRE(loss.per_point);
  CHECK(*loss.per_point == doctest::Approx(200));
  CostPerPoint loss_up =
      cost_per_metric_point(Money{100'000'000}, {"loss", 2.0, MetricGoal::min}, 2.5);
  CHECK(loss_up.text == "undefined: no improvement");
  CHECK(cost_per_metric_point(Money{1}, {"acc", 0.8, MetricGoal::max}, std::nullopt).text ==
        "not measured");
}

TEST_CASE(
    "report: a killed run that wrote its checkpoint counts as waste only the spend after it") {
  std::vector<ReportRow> rows = {
      row("kept", "vision", "resnet", RunStatus::killed, 2.41),
      row("lost", "vision", "resnet", RunStatus::killed, 2.41),
      row("pre", "vision", "resnet", RunStatus::preempted, 1),
  };
  // Tripped at 60 s; the first wrote its checkpoint at 50 s, the second none (and so the
  // preempted run: its outcome keeps the whole spend as waste, checkpoint or not).
  for (ReportRow& r : rows) r.elapsed_seconds = 60;
  rows[0].checkpoint_written_seconds = 50;
  rows[2].checkpoint_written_seconds = 50;
  ReportOptions options;
  options.by = {*parse_group_by("team")};
  Report report = build_report(rows, options);
  CHECK(report.total.killed == 2);
  CHECK(report.total.waste.micros == 401'666 + 2'410'000 + 1'000'000);
  CHECK(build_report({rows[0]}, options).total.waste.micros == 401'666);
  CHECK(build_report({rows[0]}, options).total.waste_share() ==
        doctest::Approx(1.0 / 6).epsilon(1e-5));
}

TEST_CASE("report: groups sum to the total; waste, accepted and running are counted") {
  std::vector<ReportRow> rows = {
      row("a", "vision", "resnet", RunStatus::succeeded, 10),
      row("b", "vision", "resnet", RunStatus::failed, 3),
      row("c", "vision", "resnet", RunStatus::killed, 2),
      row("d", "vision", "vit", RunStatus::lost, 1.5),
      row("e", "nlp", "bert", RunStatus::succeeded, 7),
      row("f", "nlp", "bert", RunStatus::running, 0.25),
      row("g", "nlp", "bert", RunStatus::refused, 0),
  };
  rows[0].accepted = true;
  ReportOptions options;
  options.by = {*parse_group_by("team"), *parse_group_by("experiment")};
  Report report = build_report(rows, options);
  REQUIRE(report.groups.size() == 3);
  CHECK(report.total.spend.micros == 23'750'000);
  std::int64_t sum = 0;
  for (const GroupTotals& g : report.groups) sum += g.spend.micros;
  CHECK(sum == report.total.spend.micros);
  // Biggest spend first.
  CHECK(report.groups.front().key == std::vector<std::string>{"vision", "resnet"});
  const GroupTotals& resnet = group(report, {"vision", "resnet"});
  CHECK(resnet.runs == 3);
  CHECK(resnet.succeeded == 1);
  CHECK(resnet.failed == 1);
  CHECK(resnet.killed == 1);
  CHECK(resnet.waste.micros == 5'000'000);
  CHECK(resnet.waste_share() == doctest::Approx(1.0 / 3));
  CHECK(resnet.accepted == 1);
  REQUIRE(resnet.cost_per_accepted());
  CHECK(resnet.cost_per_accepted()->micros == 15'000'000);  // every try included
  const GroupTotals& bert = group(report, {"nlp", "bert"});
  CHECK(bert.running == 1);
  CHECK(bert.running_spend.micros == 250'000);
  CHECK(bert.refused == 1);
  CHECK(bert.waste.micros == 0);
  CHECK_FALSE(bert.cost_per_accepted());
  CHECK(group(report, {"vision", "vit"}).lost == 1);
  // Nothing measured GPUs, energy or units: absent, not 0.
  CHECK_FALSE(report.total.gpu_hours_allocated.value());
  CHECK_FALSE(report.total.utilisation());
  CHECK_FALSE(report.total.energy_kwh.value());
  CHECK_FALSE(report.total.cost_per_thousand_units());
  auto json = nlohmann::json::parse(report_json(report, "USD"));
  CHECK(json["total"]["energy_kwh"].is_null());
  CHECK(json["total"]["gpu_hours_busy"].is_null());
  CHECK(json["total"]["spend"].get<double>() == doctest::Approx(23.75));
  std::string table = report_table(report, "USD", 200);
  CHECK(table.find("$23.75") != std::string::npos);
  CHECK(table.find("not measured:") != std::string::npos);
  CHECK(table.find("energy_kwh  ") == std::string::npos);  // no column of blanks
}

TEST_CASE("report: measured figures sum over the runs that measured them") {
  std::vector<ReportRow> rows = {row("a", "t", "e", RunStatus::succeeded, 10),
                                 row("b", "t", "e", RunStatus::succeeded, 10),
                                 row("c", "t", "e", RunStatus::succeeded, 5)};
  rows[0].gpu_seconds_allocated = 7200;
  rows[0].gpu_seconds_busy = 3600;
  rows[1].gpu_seconds_allocated = 3600;
  rows[1].gpu_seconds_busy = 3600;
  rows[0].units = 1e6;
  rows[0].energy_kwh = 0;  // measured as 0: shown as 0
  Report report = build_report(rows, {});
  CHECK(report.total.gpu_hours_allocated.total == doctest::Approx(3));
  CHECK(report.total.gpu_hours_allocated.runs == 2);
  REQUIRE(report.total.utilisation());
  CHECK(*report.total.utilisation() == doctest::Approx(2.0 / 3));
  REQUIRE(report.total.energy_kwh.value());
  CHECK(*report.total.energy_kwh.value() == 0);
  REQUIRE(report.total.cost_per_thousand_units());
  // Only the spend of the run that reported units: 10 for a million units.
  CHECK(*report.total.cost_per_thousand_units() == doctest::Approx(0.01));
}

TEST_CASE("report: a policy baseline per experiment; --baseline for every group") {
  std::vector<ReportRow> rows = {row("a", "t", "exp1", RunStatus::succeeded, 100),
                                 row("b", "t", "exp1", RunStatus::failed, 25),
                                 row("c", "t", "exp2", RunStatus::succeeded, 50)};
  rows[0].metric_name = "acc";
  rows[0].metric_value = 0.85;
  rows[1].metric_name = "acc";
  rows[1].metric_value = 0.83;
  rows[2].metric_name = "acc";
  rows[2].metric_value = 0.70;
  ReportOptions options;
  options.by = {*parse_group_by("experiment")};
  options.experiment_baselines["exp1"] = {"acc", 0.82, MetricGoal::max};
  options.experiment_baselines["exp2"] = {"acc", 0.75, MetricGoal::max};
  Report report = build_report(rows, options);
  const GroupTotals& exp1 = group(report, {"exp1"});
  REQUIRE(exp1.per_point);
  CHECK(exp1.per_point->text == "4,166.67");
  CHECK(group(report, {"exp2"}).per_point->text == "undefined: no improvement");
  // The total mixes experiments: no baseline of its own.
  CHECK_FALSE(report.total.per_point);
}

TEST_CASE("report: filters, period, tags and days") {
  std::vector<ReportRow> rows = {row("a", "t1", "e", RunStatus::succeeded, 1, 86400 * 10 + 5),
                                 row("b", "t2", "e", RunStatus::succeeded, 2, 86400 * 11 + 5),
                                 row("c", "t1", "e", RunStatus::succeeded, 4, 86400 * 12 + 5)};
  rows[0].tags["lr"] = "3e-4";
  ReportOptions options;
  options.by = {*parse_group_by("day"), *parse_group_by("tag:lr")};
  options.since = 86400 * 10;
  options.until = 86400 * 12;  // a run belongs to the period it started in
  Report report = build_report(rows, options);
  CHECK(report.total.runs == 2);
  CHECK(group(report, {"1970-01-11", "3e-4"}).runs == 1);
  CHECK(group(report, {"1970-01-12", ""}).runs == 1);
  options.team = "t1";
  options.since.reset();
  options.until.reset();
  CHECK(build_report(rows, options).total.spend.micros == 5'000'000);
  CHECK_FALSE(parse_group_by("colour"));
  CHECK_FALSE(parse_group_by("tag:"));
}

TEST_CASE("report csv quotes fields and carries the same numbers") {
  std::vector<ReportRow> rows = {row("a", "a,b", "e\"x", RunStatus::succeeded, 1.5)};
  ReportOptions options;
  options.by = {*parse_group_by("team"), *parse_group_by("experiment")};
  std::string csv = report_csv(build_report(rows, options), "USD");
  CHECK(csv.find("\"a,b\",\"e\"\"x\",1,") != std::string::npos);
  CHECK(csv.find(",1.500000,") != std::string::npos);
}

namespace spendcap::testing {

TEST_CASE("report table: a group of negative spend (a ledger edited by hand) draws no bar") {
  std::vector<ReportRow> rows = {
      row("a", "vision", "resnet", RunStatus::succeeded, 10),
      row("b", "nlp", "bert", RunStatus::succeeded, -2),
  };
  ReportOptions options;
  options.by = {*parse_group_by("team")};
  Report report = build_report(rows, options);
  std::string table = report_table(report, "USD", 100);
  // The bar of the biggest group is drawn; the negative group's line has no block.
  std::string vision = table.substr(table.find("vision"));
  vision = vision.substr(0, vision.find('\n'));
  std::string nlp = table.substr(table.find("nlp"));
  nlp = nlp.substr(0, nlp.find('\n'));
  CHECK(vision.find("\u2588") != std::string::npos);
  CHECK(nlp.find("\u2588") == std::string::npos);
}

TEST_CASE("report table: a width cuts long names to name~; no width (not a terminal) keeps them") {
  const std::string name = "experiment-with-a-name-far-too-long-for-eighty-columns-lr3e-4";
  std::vector<ReportRow> rows = {row("a", "vision", name, RunStatus::succeeded, 10)};
  ReportOptions options;
  options.by = {*parse_group_by("team"), *parse_group_by("experiment")};
  Report report = build_report(rows, options);
  std::string narrow = report_table(report, "USD", 80);
  CHECK(narrow.find(name) == std::string::npos);
  CHECK(narrow.find("experim~") != std::string::npos);
  CHECK(narrow.find('~') != std::string::npos);
  for (std::string_view rest = narrow; !rest.empty();) {
    std::string_view line = rest.substr(0, rest.find('\n'));
    CHECK(line.size() <= 80 + 3 * 40);  // bytes: a bar's block is 3 bytes of UTF-8
    rest.remove_prefix(std::min(rest.size(), line.size() + 1));
  }
  std::string whole = report_table(report, "USD", 0);
  CHECK(whole.find(name) != std::string::npos);
  CHECK(whole.find('~') == std::string::npos);
  CHECK(whole.find("\u2588") != std::string::npos);  // the bar at its full length
}

}  // namespace spendcap::testing

TEST_CASE("report table: a money column prints all its cells with the same decimals") {
  // Issue 40 item 7: $1.00 beside $0.0042 in one column is printed $1.0000 beside $0.0042.
  std::vector<ReportRow> rows = {row("a", "vision", "e", RunStatus::succeeded, 1),
                                 row("b", "nlp", "e", RunStatus::failed, 0.0042)};
  ReportOptions options;
  options.by = {*parse_group_by("team")};
  std::string table = report_table(build_report(rows, options), "USD", 0);
  CHECK(table.find("$1.0000 ") != std::string::npos);
  CHECK(table.find("$0.0042 ") != std::string::npos);
  CHECK(table.find("$1.0042 ") != std::string::npos);  // the total
  CHECK(table.find("$1.00 ") == std::string::npos);
  // waste: nlp's failed run, and none for vision: $0.0000 beside $0.0042, never $0.00.
  CHECK(table.find("$0.0000") != std::string::npos);
  CHECK(table.find("$0.00 ") == std::string::npos);
  // Every line of the table is as wide up to the bar: the columns line up.
  std::string vision = table.substr(table.find("vision"));
  std::string nlp = table.substr(table.find("nlp"));
  CHECK(vision.find("$1.0000") == nlp.find("$0.0042"));
  // Cents throughout where no cell needs more.
  rows[1].spend = Money{20'000};
  std::string cents = report_table(build_report(rows, options), "USD", 0);
  CHECK(cents.find("$1.00 ") != std::string::npos);
  CHECK(cents.find("$0.02 ") != std::string::npos);
  CHECK(cents.find("$0.00 ") != std::string::npos);  // vision's waste
  CHECK(cents.find("$0.0000") == std::string::npos);
}
