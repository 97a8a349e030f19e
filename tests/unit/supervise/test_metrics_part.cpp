#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "spendcap/supervise/metrics_part.hpp"
#include "spendcap/supervise/metrics_part_writer.hpp"
#include "test_support.hpp"

using namespace spendcap;

TEST_CASE("metrics: label values escaped as the exposition format asks") {
  CHECK(prometheus_label_value("plain") == "plain");
  CHECK(prometheus_label_value("a\"b\\c\nd") == "a\\\"b\\\\c\\nd");
}

TEST_CASE("metrics: a run's file carries what was measured, and nothing else") {
  RunMetrics m;
  m.run_id = "r1";
  m.team = "vision";
  m.experiment = "x\"y";
  m.spend = Money{1'500'000};
  m.ceiling = Money{2'000'000};
  m.rate_per_hour = Money{36'000'000};
  std::string text = run_metrics_text(m);
  CHECK(text.find("spendcap_run_spend_usd{run_id=\"r1\",team=\"vision\",experiment=\"x\\\"y\","
                  "currency=\"USD\"} 1.500000\n") != std::string::npos);
  CHECK(text.find("spendcap_run_burn_rate_usd_per_hour{") != std::string::npos);
  CHECK(text.find("# TYPE spendcap_run_ceiling_usd gauge\n") != std::string::npos);
  // Not measured: left out, never 0.
  CHECK(text.find("budget") == std::string::npos);
  CHECK(text.find("utilisation") == std::string::npos);
  CHECK(text.find("energy") == std::string::npos);
  m.budget = Money{5'000'000};
  m.gpu_utilisation = 0.8;
  m.energy_joules = 0;  // measured as 0: written
  text = run_metrics_text(m);
  CHECK(text.find("spendcap_run_budget_usd{") != std::string::npos);
  CHECK(text.find("spendcap_run_gpu_utilisation_ratio{") != std::string::npos);
  CHECK(text.find("} 0.80000000000000004\n") != std::string::npos);
  CHECK(text.find("spendcap_run_gpu_energy_joules{") != std::string::npos);
}

TEST_CASE("metrics: the team summary adds each run to what the file held") {
  std::string first = team_summary_text("", "vision", "USD", Money{1'250'000});
  CHECK(first.find("spendcap_team_runs_finished_total{team=\"vision\"} 1\n") != std::string::npos);
  CHECK(first.find("spendcap_team_spend_usd_total{team=\"vision\",currency=\"USD\"} 1.250000\n") !=
        std::string::npos);
  std::string second = team_summary_text(first, "vision", "USD", Money{2'000'001});
  CHECK(second.find("spendcap_team_runs_finished_total{team=\"vision\"} 2\n") != std::string::npos);
  CHECK(second.find("} 3.250001\n") != std::string::npos);
}

TEST_CASE("metrics: file names keep only safe bytes") {
  CHECK(run_metrics_file("3f2a-11") == "spendcap_3f2a-11.prom");
  CHECK(team_metrics_file("a/b c") == "spendcap_team_a%2Fb%20c.prom");
  CHECK(team_metrics_file("") == "spendcap_team_.prom");
}

TEST_CASE("metrics: a heartbeat's refresh replaces the team's gauges and keeps its counters") {
  std::vector<TeamBudget> budgets = {
      {"month", Money{100'000'000}, Money{90'000'000}, Money{7'500'000}}};
  // Before any run ended: no run counted, the currency's counter at 0, the gauges written.
  std::string first = team_gauges_text("", "vision", "USD", budgets);
  CHECK(first.find("spendcap_team_runs_finished_total{team=\"vision\"} 0\n") != std::string::npos);
  CHECK(first.find("spendcap_team_spend_usd_total{team=\"vision\",currency=\"USD\"} 0.000000\n") !=
        std::string::npos);
  CHECK(first.find("# TYPE spendcap_team_budget_spent_usd gauge\n") != std::string::npos);
  CHECK(first.find("spendcap_team_budget_spent_usd{team=\"vision\",currency=\"USD\","
                   "period=\"month\"} 7.500000\n") != std::string::npos);
  // A run ends: counted once; a later refresh keeps that count and total, and moves the gauges.
  std::string ended = team_summary_text(first, "vision", "USD", Money{1'250'000}, budgets);
  budgets[0].spent = Money{9'000'000};
  budgets[0].remaining = Money{80'000'000};
  std::string refreshed = team_gauges_text(ended, "vision", "USD", budgets);
  CHECK(refreshed.find("spendcap_team_runs_finished_total{team=\"vision\"} 1\n") !=
        std::string::npos);
  CHECK(refreshed.find("spendcap_team_spend_usd_total{team=\"vision\",currency=\"USD\"} "
                       "1.250000\n") != std::string::npos);
  CHECK(refreshed.find("period=\"month\"} 9.000000\n") != std::string::npos);
  CHECK(refreshed.find("period=\"month\"} 80.000000\n") != std::string::npos);
  CHECK(refreshed.find("7.500000") == std::string::npos);
  // A spend not known: no spent gauge at all.
  budgets[0].spent.reset();
  CHECK(team_gauges_text("", "vision", "USD", budgets).find("budget_spent") == std::string::npos);
}

namespace {

std::string read_or_empty(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

TEST_CASE("metrics: the runner's writer writes only its own run's file and team") {
  spendcap::testing::TempDir dir("spendcap-writer", 02770);
  std::string run_file = run_metrics_file("r1");
  {
    std::shared_ptr<MetricsSink> writer =
        start_runner_metrics_writer(dir.path(), MetricsBinding{"r1", "vision", "USD"});
    writer->write_run(run_file, "own\n");
    writer->write_run(run_metrics_file("r2"), "another run's\n");
    writer->refresh_team("nlp", "USD", {{"month", Money{1}, Money{1}, Money{1}}});
    writer->refresh_team("vision", "EUR", {{"month", Money{1}, Money{1}, Money{1}}});
    writer->refresh_team("vision", "USD",
                         {{"month", Money{100'000'000}, Money{1}, Money{2'000'000}}});
    writer->add_to_team("vision", "USD", Money{1'000'000}, {});
    writer->add_to_team("vision", "USD", Money{1'000'000}, {});  // a second end: refused
    writer->refresh_team("vision", "USD", {{"month", Money{1}, Money{1}, Money{1}}});  // after it
  }  // waits until the writer has written everything sent
  CHECK(read_or_empty(dir.file(run_file)) == "own\n");
  CHECK_FALSE(std::filesystem::exists(dir.file(run_metrics_file("r2"))));
  CHECK_FALSE(std::filesystem::exists(dir.file(team_metrics_file("nlp"))));
  std::string team = read_or_empty(dir.file(team_metrics_file("vision")));
  CHECK(team.find("spendcap_team_runs_finished_total{team=\"vision\"} 1\n") != std::string::npos);
  CHECK(team.find("spendcap_team_spend_usd_total{team=\"vision\",currency=\"USD\"} 1.000000\n") !=
        std::string::npos);
  CHECK(team.find("eur") == std::string::npos);
}
