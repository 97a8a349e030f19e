// `report`: showback (report_commands.hpp).
#include "spendcap/cli/report_commands.hpp"

#include <CLI/CLI.hpp>
#include <memory>

#include "spendcap/cli/command_tree.hpp"
#include "spendcap/cli/runs.hpp"
#include "spendcap/cli/verbs.hpp"

#include "admin_parts.hpp"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <iostream>
#include <limits>
#include <nlohmann/json.hpp>
#include <unordered_set>

#include "spendcap/base/json_text.hpp"
#include "spendcap/base/text.hpp"
#include "spendcap/ledger/ledger_store.hpp"
#include "spendcap/policy/layers.hpp"
#include "spendcap/report/estimate.hpp"
#include "spendcap/report/report.hpp"
#include "spendcap/report/report_rollup.hpp"
#include "spendcap/run/estimate_fit.hpp"
#include "spendcap/supervise/run_env.hpp"

namespace spendcap {

using admin_parts::load_chosen_policy;
using admin_parts::utc_now;

namespace {

// "2026-12-01", "2026-12-01T10:00:00Z", or a duration ago ("30d", "12h").
double parse_when(const std::string& text, const std::string& flag, bool end_of_day) {
  std::tm tm{};
  int y = 0, mo = 0, d = 0, h = 0, mi = 0, s = 0;
  char z = 0;
  int n = 0;
  if (std::sscanf(text.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d%c%n", &y, &mo, &d, &h, &mi, &s, &z, &n) ==
          7 &&
      z == 'Z' && static_cast<size_t>(n) == text.size()) {
  } else if (std::sscanf(text.c_str(), "%4d-%2d-%2d%n", &y, &mo, &d, &n) == 3 &&
             static_cast<size_t>(n) == text.size()) {
    h = mi = s = 0;
  } else if (auto ago = parse_duration(text)) {
    return utc_now() - to_seconds(*ago);
  } else {
    throw usage_error(flag + " " + text, "not a date",
                      "write 2026-12-01, 2026-12-01T10:00:00Z (UTC), or a time ago like 30d");
  }
  if (mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || s > 60) {
    throw usage_error(flag + " " + text, "not a valid date");
  }
  tm.tm_year = y - 1900;
  tm.tm_mon = mo - 1;
  tm.tm_mday = d;
  tm.tm_hour = h;
  tm.tm_min = mi;
  tm.tm_sec = s;
  double at = static_cast<double>(::timegm(&tm));
  bool date_only = text.size() == 10;
  return date_only && end_of_day ? at + 86400 : at;
}

}  // namespace

int report_command(const ReportRequest& request) {
  ReportOptions options;
  for (const std::string& by : request.by) {
    auto parsed = parse_group_by(by);
    if (!parsed) {
      throw usage_error("--by " + by, "not a grouping",
                        "team, experiment, project, user, host, day, tag:KEY or tracker");
    }
    options.by.push_back(*parsed);
  }
  if (request.format != "table" && request.format != "csv" && request.format != "json" &&
      request.format != "focus" && request.format != "html") {
    throw usage_error("--format " + request.format, "not a report format",
                      "table, csv, json, focus or html");
  }
  double since = request.since ? parse_when(*request.since, "--since", false) : 0;
  double until = request.until ? parse_when(*request.until, "--until", true)
                               : std::numeric_limits<double>::max();
  if (request.since) options.since = since;
  if (request.until) options.until = until;
  if (until <= since) throw usage_error("--until", "is not after --since");
  options.team = request.team;
  options.experiment = request.experiment;

  LoadedPolicy loaded = load_chosen_policy(for_reading(request.choice));
  const Policy& policy = loaded.policy;
  auto experiments = policy.budgets.find(ScopeKind::experiment);
  if (experiments != policy.budgets.end()) {
    for (const auto& [name, spec] : experiments->second) {
      if (!spec.baseline_metric) continue;
      Baseline b;
      b.metric = spec.metric.value_or("");
      b.value = *spec.baseline_metric;
      b.goal = parse_metric_goal(spec.metric_goal.value_or("max")).value_or(MetricGoal::max);
      options.experiment_baselines[name] = b;
    }
  }
  if (request.baseline) {
    char* end = nullptr;
    double value = std::strtod(request.baseline->c_str(), &end);
    if (request.baseline->empty() || end != request.baseline->c_str() + request.baseline->size() ||
        !std::isfinite(value)) {
      throw usage_error("--baseline " + *request.baseline, "not a number", "e.g. --baseline 0.82");
    }
    Baseline b;
    b.value = value;
    b.metric = request.metric.value_or("");
    if (request.metric_goal) {
      auto goal = parse_metric_goal(*request.metric_goal);
      if (!goal) {
        throw usage_error("--metric-goal " + *request.metric_goal, "not a direction",
                          "max (accuracy: improves upward) or min (loss: improves downward)");
      }
      b.goal = *goal;
    }
    options.baseline = b;
  } else if (request.metric || request.metric_goal) {
    throw usage_error("--metric", "needs --baseline VALUE",
                      "e.g. --baseline 0.82 --metric-goal max");
  }

  if (request.csv_raw && request.format != "csv" && request.format != "focus") {
    throw usage_error("--csv-raw", "applies to --format csv and --format focus only",
                      "add --format csv or --format focus, or leave it out");
  }
  const CsvCells cells = request.csv_raw ? CsvCells::raw : CsvCells::safe;
  std::unique_ptr<Ledger> ledger = open_ledger_session(for_reading(request.choice)).ledger;
  if (request.format == "focus") {
    // One row per run and charge period, streamed: nothing is grouped.
    if (!request.by.empty() || request.baseline) {
      throw usage_error("--format focus",
                        "has one row per run and day: --by and --baseline do not apply",
                        "leave them out, or use --format csv");
    }
    FocusContext context{policy.currency, &policy, utc_now(), cells};
    std::string out = focus_header();
    ledger->for_each_run_started(since, until, [&](const RunRecord& run) {
      ReportRow row = report_row_of(run);
      if (!report_includes(options, row)) return;
      append_focus_rows(out, row, context);
      if (out.size() > (1 << 20)) {
        std::cout << out;
        out.clear();
      }
    });
    std::cout << out;
    return 0;
  }
  std::unordered_set<std::string> accepted;
  for (const AcceptedResult& a : ledger->accepted_results()) accepted.insert(a.run_id);
  ReportBuilder builder(options);
  // html: the same runs by day too, for the chart.
  ReportOptions day_options = options;
  day_options.by.insert(day_options.by.begin(), GroupBy{GroupBy::Kind::day, {}});
  std::optional<ReportBuilder> by_day;
  if (request.format == "html") by_day.emplace(day_options);
  std::map<std::string, Money> team_spend;  // html: budget against actual
  ReportSource source;
  // The ledger's rollups where a cut keeps what the report groups by (report_rollup.hpp); the
  // runs themselves for a tag, or a ledger without rollups.
  source.read = report_rollup_read(by_day ? day_options : options, by_day.has_value());
  if (!source.read) {
    std::cerr << "spendcap: report: a tag is not in the ledger's rollups: reading every run of "
                 "the period\n";
  }
  source.since = since;
  source.until = until;
  source.accepted = std::move(accepted);
  source.egress_price = policy.egress_per_gb;
  if (by_day) {
    source.on_row = [&](const ReportRow& row) {
      if (report_includes(options, row)) team_spend[row.team] += row.spend;
    };
    source.on_cell = [&](const RollupCell& cell) { team_spend[cell.key.team] += cell.spend; };
  }
  std::vector<ReportBuilder*> builders = {&builder};
  if (by_day) builders.push_back(&*by_day);
  add_ledger_runs(*ledger, source, builders);
  Report report = std::move(builder).finish();
  if (by_day) {
    HtmlContext html;
    html.currency = policy.currency;
    html.since = options.since;
    html.until = options.until;
    for (BudgetView& budget : ledger->budgets()) {
      if (budget.rule.scope.kind != ScopeKind::team) continue;
      if (options.team && budget.rule.scope.name != *options.team) continue;
      html.team_budgets.push_back(std::move(budget));
    }
    html.team_spend = std::move(team_spend);
    std::cout << report_html(report, std::move(*by_day).finish(), html);
    return 0;
  }
  if (request.format == "csv") {
    std::cout << report_csv(report, policy.currency, cells);
  } else if (request.format == "json") {
    std::cout << report_json(report, policy.currency);
  } else {
    write_report_table(report, policy.currency, terminal_width(),
                       [](std::string_view part) { std::cout << part; });
  }
  return 0;
}

double parse_report_time(const std::string& text, const std::string& flag, bool end_of_day) {
  return parse_when(text, flag, end_of_day);
}

namespace {

VerbRun add_report(CLI::App& command, CLI::App&, VerbContext&) {
  auto request = std::make_shared<ReportRequest>();
  auto& r = *request;
  CLI::App* report = &command;
  add_ledger_options(*report, r.choice);
  report->add_option("--by", r.by,
                     "team|experiment|project|user|host|day|tag:KEY|tracker (repeatable)");
  report->add_option("--since", r.since, "runs started from (2026-12-01, ...T10:00:00Z, 30d)");
  report->add_option("--until", r.until, "runs started before (a date: through that day)");
  report->add_option("--team", r.team, "only the team's runs");
  report->add_option("--experiment", r.experiment, "only the experiment's runs");
  report->add_option("--format", r.format, "table, csv, json, focus (FOCUS 1.2 CSV) or html");
  report->add_option("--baseline", r.baseline, "metric baseline for cost per metric point");
  report->add_option("--metric", r.metric, "the metric the baseline is of");
  report->add_option("--metric-goal", r.metric_goal, "max (improves upward) or min (a loss)");
  report->add_flag("--csv-raw", r.csv_raw,
                   "csv/focus: cells as stored, no formula guard (for machine pipelines)");
  return [request] { return report_command(*request); };
}

}  // namespace

const Verb kReportVerb = {"report", "showback: spend by team, experiment, ...", add_report};

}  // namespace spendcap
