// run/run_defaults.hpp: flags > $SPENDCAP_* > the policy's defaults > built-in, and where each term
// came from; under a locked policy a layer's rate is refused, the locked policy's own is not.
#include <doctest/doctest.h>

#include <fstream>

#include "spendcap/run/run_defaults.hpp"
#include "spendcap/run/settings.hpp"
#include "test_support.hpp"

namespace spendcap {

namespace {

struct Project {
  testing::TempDir dir;
  PolicySearch search;
  explicit Project(const std::string& project_policy, const std::string& system_policy = "") {
    std::ofstream(dir.file("spendcap.json")) << project_policy;
    search.cwd_path = dir.file("spendcap.json");
    search.xdg_path = dir.file("none/xdg.json");
    search.system_path = dir.file("none/etc.json");
    if (!system_policy.empty()) {
      std::ofstream(dir.file("etc.json")) << system_policy;
      search.system_path = dir.file("etc.json");
    }
  }
};

RunRequest command_only() {
  RunRequest request;
  request.command = {"true"};
  return request;
}

}  // namespace

TEST_CASE("run defaults: flags beat variables, variables beat the project's file") {
  Project project(R"({"defaults": {"team": "file-team", "experiment": "file-exp",
                                   "project": "file-proj", "rate": 2, "budget": 5,
                                   "grace": "3s"}})");
  RunRequest request = command_only();
  request.team = "flag-team";
  Environment env = {{"SPENDCAP_TEAM", "env-team"},
                     {"SPENDCAP_EXPERIMENT", "env-exp"},
                     {"SPENDCAP_BUDGET", "4"},
                     {"SPENDCAP_PROJECT", ""}};
  RunSettings settings = resolve_run_settings(request, env, project.search);
  CHECK(settings.identity.team == "flag-team");
  CHECK(settings.identity.experiment == "env-exp");
  CHECK(settings.identity.project == "file-proj");  // an empty variable counts as unset
  CHECK(settings.budget == Money::from_micros(4'000'000));
  CHECK(settings.rate_per_hour == Money::from_micros(2'000'000));
  CHECK(settings.on_trip.grace == std::chrono::seconds(3));
  CHECK(settings.term_sources.at("team") == "--team");
  CHECK(settings.term_sources.at("experiment") == "SPENDCAP_EXPERIMENT");
  CHECK(settings.term_sources.at("project") == project.search.cwd_path);
  CHECK(settings.term_sources.at("budget") == "SPENDCAP_BUDGET");
  CHECK(settings.term_sources.at("rate") == project.search.cwd_path);
}

TEST_CASE("run defaults: a GPU named by a flag or variable hides a rate further down") {
  Project project(R"({"rates": {"gpu": {"a100": {"on_demand": 4.0}}},
                      "defaults": {"rate": 2, "budget": 5}})");
  RunSettings by_env =
      resolve_run_settings(command_only(), {{"SPENDCAP_GPU", "a100"}}, project.search);
  CHECK(by_env.rate_per_hour == Money::from_micros(4'000'000));
  RunRequest request = command_only();
  request.gpu = "a100";
  RunSettings by_flag = resolve_run_settings(request, {{"SPENDCAP_RATE", "9"}}, project.search);
  CHECK(by_flag.rate_per_hour == Money::from_micros(4'000'000));
  RunSettings by_rate =
      resolve_run_settings(command_only(), {{"SPENDCAP_RATE", "9"}}, project.search);
  CHECK(by_rate.rate_per_hour == Money::from_micros(9'000'000));
}

TEST_CASE("run defaults: a bad variable is named") {
  Project project(R"({"defaults": {"rate": 2}})");
  for (const auto& [name, value] : std::vector<std::pair<std::string, std::string>>{
           {"SPENDCAP_BUDGET", "lots"}, {"SPENDCAP_GRACE", "soon"}, {"SPENDCAP_RATE", "-1"}}) {
    CAPTURE(name);
    try {
      resolve_run_settings(command_only(), {{name, value}}, project.search);
      FAIL("accepted");
    } catch (const Error& error) {
      CHECK(error.subject() == name + " " + value);
    }
  }
}

TEST_CASE("run defaults: under a locked policy a layer's rate is refused, its own is not") {
  const std::string user = R"({"defaults": {"rate": 2, "budget": 5}})";
  Project no_rate(user, R"({"locked": true, "ledger": "sqlite:/tmp/x.db"})");
  try {
    resolve_run_settings(command_only(), {}, no_rate.search);
    FAIL("accepted");
  } catch (const Error& error) {
    INFO(format_error(error));
    CHECK(error.why().find("would loosen the locked policy: /defaults/rate: 2 is not in the "
                           "locked policy (rates cannot be changed)") != std::string::npos);
  }
  Project own_rate(R"({"defaults": {"budget": 5}})",
                   R"({"locked": true, "ledger": "sqlite:/tmp/x.db", "defaults": {"rate": 3}})");
  RunSettings settings = resolve_run_settings(command_only(), {}, own_rate.search);
  CHECK(settings.rate_per_hour == Money::from_micros(3'000'000));
  // The locked policy's run budget may only be lowered.
  Project budget(R"({"defaults": {"budget": 50}})",
                 R"({"locked": true, "ledger": "sqlite:/tmp/x.db", "defaults": {"budget": 10,
                     "rate": 3}})");
  CHECK_THROWS_AS(resolve_run_settings(command_only(), {}, budget.search), Error);
}

}  // namespace spendcap
