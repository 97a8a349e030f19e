// run/settings.hpp and run/summary.hpp: the flags and the policy resolved into a run's settings
// (errors name the flag typed), and the summary line a run ends with.
#include <doctest/doctest.h>

#include <fstream>

#include "spendcap/run/admission.hpp"
#include "spendcap/run/request.hpp"
#include "spendcap/run/settings.hpp"
#include "spendcap/run/summary.hpp"
#include "test_support.hpp"

namespace spendcap {

namespace {

// A policy file of the test's own, and a search that finds nothing else (no /etc, no ~/.config).
struct PolicyFixture {
  testing::TempDir dir;
  PolicySearch search;
  PolicyFixture() {
    std::ofstream(dir.file("policy.json"))
        << R"({"rates": {"gpu": {"a100": {"on_demand": 4.0, "spot": 1.5}},
                         "instance": {"cpu-8": {"on_demand": 0.5}}}})";
    search.flag_path = dir.file("policy.json");
    search.cwd_path = dir.file("none/spendcap.json");
    search.xdg_path = dir.file("none/xdg.json");
    search.system_path = dir.file("none/etc.json");
  }
};

RunRequest request_for(std::vector<std::string> command = {"true"}) {
  RunRequest request;
  request.command = std::move(command);
  return request;
}

Error settings_error(const RunRequest& request, const PolicyFixture& policy) {
  try {
    resolve_run_settings(request, {}, policy.search);
  } catch (const Error& error) {
    return error;
  }
  FAIL("resolve_run_settings accepted it");
  return Error("", "");
}

}  // namespace

TEST_CASE("the burn rate comes from the policy's prices for --gpu, --gpus and --instance") {
  PolicyFixture policy;
  RunRequest request = request_for();
  request.gpu = "a100";
  request.gpus = "2";
  request.instance = "cpu-8";
  request.team = "vision";
  RunSettings settings = resolve_run_settings(request, {}, policy.search);
  CHECK(settings.rate_per_hour == Money::from_micros(8'500'000));
  CHECK(settings.gpu_rate_per_hour == Money::from_micros(8'000'000));
  CHECK(settings.rate_source == "2 x a100 + cpu-8 on_demand");
  CHECK(settings.identity.tags.at("gpu") == "a100");
  CHECK(settings.identity.tags.at("gpus") == "2");
  CHECK(settings.identity.tags.at("instance") == "cpu-8");
  CHECK(settings.identity.team == "vision");

  request.pricing = "spot";
  request.instance.reset();
  CHECK(resolve_run_settings(request, {}, policy.search).rate_per_hour ==
        Money::from_micros(3'000'000));
}

TEST_CASE("a bad flag is named as typed, not as the policy path it sets") {
  PolicyFixture policy;
  RunRequest request = request_for();
  request.rate = "10";
  request.grace = "soon";
  CHECK(settings_error(request, policy).subject() == "--grace soon");

  request.grace.reset();
  request.gpus = "many";
  CHECK(settings_error(request, policy).subject() == "--gpus many");

  request.gpus.reset();
  request.rate.reset();
  request.gpu = "h100";
  Error unknown = settings_error(request, policy);
  CHECK(unknown.subject() == "--gpu h100");
}

TEST_CASE("a run needs a command and a burn rate") {
  PolicyFixture policy;
  CHECK(settings_error(request_for({}), policy).why() == "no command given");
  CHECK(settings_error(request_for(), policy).why() == "no burn rate");
  RunRequest zero = request_for();
  zero.rate = "0";
  CHECK(settings_error(zero, policy).why() == "a run needs a burn rate above 0");
}

TEST_CASE("the run's identity is made once and taken whole by its ledger start and its webhooks") {
  PolicyFixture policy;
  RunRequest request = request_for({"python3", "train.py"});
  request.rate = "36";
  request.team = "vision";
  request.experiment = "sweep";
  request.project = "p";
  request.job_key = "job-1";
  request.tags = {"lr=3e-4"};
  RunSettings settings = resolve_run_settings(request, {}, policy.search);
  const RunIdentity& identity = settings.identity;
  CHECK(identity.id.size() == 36);
  CHECK(identity.command == request.command);
  CHECK(identity.tags.at("lr") == "3e-4");
  CHECK(identity.job_key == "job-1");
  CHECK_FALSE(identity.user.empty());
  CHECK_FALSE(identity.host.empty());
  CHECK(resolve_run_settings(request, {}, policy.search).identity.id != identity.id);

  auto same = [&identity](const RunIdentity& other) {
    CHECK(other.id == identity.id);
    CHECK(other.job_key == identity.job_key);
    CHECK(other.team == identity.team);
    CHECK(other.experiment == identity.experiment);
    CHECK(other.project == identity.project);
    CHECK(other.user == identity.user);
    CHECK(other.host == identity.host);
    CHECK(other.tags == identity.tags);
    CHECK(other.command == identity.command);
  };
  RunStart start = make_run_start(settings);
  same(start);
  CHECK(start.rate_per_hour == Money::from_micros(36'000'000));
  Admission admission;
  admission.run_budget = Money::from_micros(5'000'000);
  RunFacts facts = run_facts(settings, admission);
  same(facts);
  CHECK(facts.budget == admission.run_budget);
}

TEST_CASE("the summary line says status, spend of the budget and the exit status") {
  RunOutcome outcome;
  outcome.run_id = "1a2b3c4d-0000-4000-8000-000000000000";
  outcome.status = RunStatus::killed;
  outcome.reason = "budget:run";
  outcome.stopped_by_spendcap = true;
  outcome.elapsed_seconds = 1.5;
  outcome.spend = Money::from_micros(2'000'000);
  outcome.budget = Money::from_micros(5'000'000);
  outcome.exit_code = 124;
  CHECK(summary_line(outcome) ==
        "run 1a2b3c4d killed (budget:run) after 1.50s: spent $2.00 of $5.00; exit 124");
}

}  // namespace spendcap
