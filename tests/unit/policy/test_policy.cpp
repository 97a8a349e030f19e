// The policy: validation (every error with its JSON path), conversion, the example files in
// policies/, the fixtures shared with the schema test (tests/fixtures/policies), and the layering
// rule that a locked system policy can only be tightened. Files live in temporary directories; the
// system path is injected through PolicySearch, so nothing here touches /etc.
#include <stdlib.h>  // mkdtemp, setenv
#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include "spendcap/policy/keys.hpp"
#include "spendcap/policy/layers.hpp"
#include "spendcap/policy/policy.hpp"
#include "test_support.hpp"

namespace spendcap {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

const std::string kSourceDir = SPENDCAP_SOURCE_DIR;
const std::string kFixtures = kSourceDir + "/tests/fixtures/policies";

// True when some error is at exactly `path` and mentions `text`.
bool has_error(const std::vector<std::string>& errors, const std::string& path,
               const std::string& text) {
  return std::any_of(errors.begin(), errors.end(), [&](const std::string& error) {
    return error.starts_with(path + ": ") && error.find(text) != std::string::npos;
  });
}

std::string all_lines(const std::vector<std::string>& lines) {
  std::string out;
  for (const std::string& line : lines) out += line + "\n";
  return out;
}

std::vector<std::string> json_files(const std::string& directory) {
  std::vector<std::string> files;
  for (const auto& entry : fs::directory_iterator(directory)) {
    if (entry.path().extension() == ".json") files.push_back(entry.path().string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

// A directory tree under /tmp (mode 0755, as a real /etc/spendcap would be), removed afterwards.
class TempTree {
 public:
  TempTree() : root_(dir_.path()) {}

  std::string path(const std::string& relative) const { return root_ + "/" + relative; }

  // Writes `document` at `relative` with `mode`; parent directories get 0755.
  std::string write(const std::string& relative, const json& document, mode_t mode = 0644) const {
    return write_text(relative, document.dump(2), mode);
  }
  std::string write_text(const std::string& relative, const std::string& text,
                         mode_t mode = 0644) const {
    std::string file = path(relative);
    fs::path directory = fs::path(file).parent_path();
    fs::create_directories(directory);
    for (fs::path p = directory; p.string().size() > root_.size(); p = p.parent_path()) {
      REQUIRE(chmod(p.c_str(), 0755) == 0);
    }
    std::ofstream(file) << text;
    REQUIRE(chmod(file.c_str(), mode) == 0);
    return file;
  }

 private:
  testing::TempDir dir_{"spendcap-policy-test", 0755};
  std::string root_;
};

// ---- validation ----

TEST_CASE("policy: the examples in policies/ are valid and load") {
  std::vector<std::string> examples;
  for (const std::string& file : json_files(kSourceDir + "/policies")) {
    if (!file.ends_with(".schema.json")) examples.push_back(file);
  }
  REQUIRE(examples.size() >= 2);
  for (const std::string& file : examples) {
    CAPTURE(file);
    json document = read_policy_file(file);
    CHECK_MESSAGE(validate_policy(document).empty(), all_lines(validate_policy(document)));
    CHECK_NOTHROW(parse_policy(document, file));
  }

  Policy lab = parse_policy(read_policy_file(kSourceDir + "/policies/lab.json"), "lab.json");
  CHECK_FALSE(lab.locked);
  CHECK(lab.gpu_rates.size() >= 2);
  REQUIRE(lab.gpu_rates.count("a100-80gb") == 1);
  CHECK(lab.gpu_rates.at("a100-80gb").price(Pricing::spot) == Money::from_micros(1'600'000));
  REQUIRE(lab.budgets[ScopeKind::team].count("vision") == 1);
  const BudgetSpec& vision = lab.budgets[ScopeKind::team].at("vision");
  CHECK(vision.amount == Money::from_micros(5'000'000'000));
  CHECK(vision.period == Period::month);
  CHECK(vision.max_run == Money::from_micros(500'000'000));
  CHECK(lab.budgets[ScopeKind::experiment].size() >= 1);
  CHECK(lab.guards.idle_gpu.has_value());
  REQUIRE(lab.webhooks.size() == 1);
  CHECK(lab.webhooks[0].url_env == "SPENDCAP_SLACK_URL");

  Policy runner = parse_policy(read_policy_file(kSourceDir + "/policies/shared-runner.json"),
                               "shared-runner.json");
  CHECK(runner.locked);
  CHECK(runner.ledger == "postgresql://spendcap@db.internal/spendcap");
  CHECK(runner.defaults.gpus.has_value());
  CHECK(runner.defaults.gpu.has_value());
  CHECK(runner.budgets[ScopeKind::team].size() >= 2);
}

TEST_CASE("policy: every bad fixture gives its JSON-path error, as EXPECTED.txt says") {
  const std::string directory = kFixtures + "/bad";
  std::ifstream expected(directory + "/EXPECTED.txt");
  REQUIRE(expected.good());
  std::vector<std::string> listed;
  std::string line;
  while (std::getline(expected, line)) {
    if (line.empty()) continue;
    std::istringstream fields(line);
    std::string file, path, text;
    REQUIRE(std::getline(fields, file, '\t'));
    REQUIRE(std::getline(fields, path, '\t'));
    REQUIRE(std::getline(fields, text));
    listed.push_back(directory + "/" + file);
    CAPTURE(file);
    std::vector<std::string> errors = validate_policy(read_policy_file(directory + "/" + file));
    CHECK_MESSAGE(has_error(errors, path, text), all_lines(errors));
  }
  std::sort(listed.begin(), listed.end());
  CHECK(listed == json_files(directory));  // every bad file is described, and nothing else
}

TEST_CASE("policy: every good fixture is valid") {
  std::vector<std::string> files = json_files(kFixtures + "/good");
  REQUIRE_FALSE(files.empty());
  for (const std::string& file : files) {
    CAPTURE(file);
    std::vector<std::string> errors = validate_policy(read_policy_file(file));
    CHECK_MESSAGE(errors.empty(), all_lines(errors));
  }
}

TEST_CASE("policy: each kind of mistake names its JSON path") {
  const json rates = {
      {"gpu", {{"a100-80gb", {{"on_demand", 4.10}}}, {"h100-80gb", {{"spot", 2}}}}}};
  struct Case {
    json document;
    std::string path;
    std::string text;
  };
  const Case cases[] = {
      // What the schema cannot say: cross-references and order.
      {{{"rates", rates}, {"defaults", {{"gpu", "h100"}}}},
       "/defaults/gpu",
       "unknown GPU type \"h100\" (rates.gpu has: a100-80gb, h100-80gb)"},
      {{{"rates", rates}, {"defaults", {{"gpu", "h100-80gb"}}}},
       "/defaults/gpu",
       "has no on_demand price"},
      {{{"defaults", {{"instance", "cpu-8"}}}},
       "/defaults/instance",
       "rates.instance has: nothing"},
      {{{"defaults", {{"warn_at", {0.8, 0.5}}}}},
       "/defaults/warn_at/1",
       "greater than the threshold"},
      {{{"webhooks", {{{"url_env", "HOOK"}, {"events", {"killed", "killed"}}}}}},
       "/webhooks/0/events/1",
       "listed twice"},
      // Values only a program can produce.
      {{{"budgets", {{"team", {{"vision", {{"amount", std::nan("")}}}}}}}},
       "/budgets/team/vision/amount",
       "must be a positive number (got a non-finite number)"},
      {{{"budgets", {{"team", {{"vision", {{"amount", 2e12}}}}}}}},
       "/budgets/team/vision/amount",
       "must be at most 1000000000000"},
      // JSON pointer escaping: "/" is ~1 and "~" is ~0.
      {{{"budgets", {{"project", {{"a/b~c", {{"amount", -1}}}}}}}},
       "/budgets/project/a~1b~0c/amount",
       "must be a positive number (got -1)"},
      // Spellings parse_signal takes on the command line but a file may not use.
      {{{"defaults", {{"checkpoint_signal", "SigUsr1"}}}},
       "/defaults/checkpoint_signal",
       "not a signal"},
      {{{"defaults", {{"checkpoint_signal", "010"}}}},
       "/defaults/checkpoint_signal",
       "not a signal"},
      {{{"defaults", {{"checkpoint_signal", 10}}}}, "/defaults/checkpoint_signal", "not a signal"},
      {{{"budgets", {{"team", {{"", {{"amount", 1}}}}}}}}, "/budgets/team/", "must not be empty"},
      {{{"rates", {{"gpu", {{"a100", {{"on_demand", 1}, {"peak_tflops", 0}}}}}}}},
       "/rates/gpu/a100/peak_tflops",
       "must be a number > 0"},
      {{{"guards", {{"burn_rate", {{"factor", 0.5}}}}}}, "/guards/burn_rate/factor", ">= 1"},
      {{{"guards", {{"stall", {{"after", "0ms"}}}}}}, "/guards/stall/after", "longer than 0s"},
      {{{"budgets", {{"job", json::object()}}}},
       "/budgets/job",
       "expected one of: team, experiment"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.document.dump(-1, ' ', false, json::error_handler_t::replace));
    std::vector<std::string> errors = validate_policy(c.document);
    CHECK_MESSAGE(has_error(errors, c.path, c.text), all_lines(errors));
  }
}

TEST_CASE("policy: a secret put where a variable name belongs is not echoed") {
  const json document = {{"webhooks",
                          {{{"url_env", "https://hooks.slack.com/services/T0/B0/SECRETXYZ"},
                            {"secret_env", "hunter2-SECRETXYZ"}}}}};
  std::vector<std::string> errors = validate_policy(document);
  CAPTURE(all_lines(errors));
  CHECK(has_error(errors, "/webhooks/0/url_env", "the name of an environment variable"));
  CHECK(has_error(errors, "/webhooks/0/secret_env", "the name of an environment variable"));
  CHECK(all_lines(errors).find("SECRETXYZ") == std::string::npos);

  std::vector<std::string> ledger = validate_policy({{"ledger", "postgresq://me:hunter2@db/x"}});
  CHECK(has_error(ledger, "/ledger", "must be"));
  CHECK(all_lines(ledger).find("hunter2") == std::string::npos);
}

TEST_CASE("policy: every error of a document is reported, not just the first") {
  const json document = {
      {"mode", "audit"},
      {"defaults", {{"grace", "soon"}, {"gpus", -2}}},
      {"budgets", {{"team", {{"vision", {{"amout", 5000}, {"period", "monthly"}}}}}}},
      {"webhooks", {{{"url", "https://hooks.slack.com/x"}}}},
  };
  std::vector<std::string> errors = validate_policy(document);
  CAPTURE(all_lines(errors));
  CHECK(has_error(errors, "/mode", "must be one of enforce, warn"));
  CHECK(has_error(errors, "/defaults/grace", "must be a duration"));
  CHECK(has_error(errors, "/defaults/gpus", "must be a positive integer"));
  CHECK(has_error(errors, "/budgets/team/vision/amout", "did you mean \"amount\""));
  CHECK(has_error(errors, "/budgets/team/vision", "missing required key \"amount\""));
  CHECK(has_error(errors, "/budgets/team/vision/period", "must be one of day, week, month"));
  CHECK(has_error(errors, "/webhooks/0/url", "url_env"));
  CHECK(has_error(errors, "/webhooks/0", "missing required key \"url_env\""));
  CHECK(errors.size() == 8);

  try {
    parse_policy(document, "team.json");
    FAIL("an invalid policy was accepted");
  } catch (const PolicyError& error) {
    CHECK(error.subject() == "team.json");
    CHECK(error.why() == "invalid policy (8 errors)");
    CHECK(error.hint() == "run `spendcap policy check FILE`");
    CHECK(error.code() == ExitCode::internal);
    CHECK(error.errors() == errors);
    CHECK(error.details == errors);
  }
}

TEST_CASE("policy: an unknown key suggests the closest known key") {
  struct Case {
    json document;
    std::string path;
    std::string text;
  };
  const Case cases[] = {
      {{{"budgets", {{"team", {{"vision", {{"amount", 1}, {"amout", 1}}}}}}}},
       "/budgets/team/vision/amout",
       "unknown key (did you mean \"amount\"?)"},
      {{{"defaults", {{"kill-after", "5s"}}}},
       "/defaults/kill-after",
       "did you mean \"kill_after\"?"},
      {{{"defaults", {{"Grace", "5s"}}}}, "/defaults/Grace", "did you mean \"grace\"?"},
      {{{"rates", {{"gpu", {{"a100", {{"ondemand", 1}}}}}}}},
       "/rates/gpu/a100/ondemand",
       "did you mean \"on_demand\"?"},
      {{{"webhook", json::array()}}, "/webhook", "did you mean \"webhooks\"?"},
      // Nothing close: the known keys are listed instead of a wild guess.
      {{{"energy", {{"solar", true}}}},
       "/energy/solar",
       "unknown key (expected one of: pue, kg_co2_per_kwh, usd_per_kwh)"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.document.dump());
    std::vector<std::string> errors = validate_policy(c.document);
    CHECK_MESSAGE(has_error(errors, c.path, c.text), all_lines(errors));
  }
}

TEST_CASE("policy: parse_policy fills in the defaults and converts every section") {
  Policy defaults = parse_policy(json::object(), "empty");
  CHECK(defaults.currency == "USD");
  CHECK(defaults.mode == Mode::enforce);
  CHECK(defaults.defaults.grace == std::chrono::seconds(60));
  CHECK(defaults.defaults.checkpoint_signal == SIGUSR1);
  CHECK(defaults.budgets.empty());
  CHECK_FALSE(defaults.guards.crash_loop.has_value());

  const json document = {
      {"currency", "EUR"},
      {"ledger", "sqlite:/srv/ledger.db"},
      {"mode", "warn"},
      {"rates",
       {{"gpu", {{"l4", {{"spot", 0.32}, {"reserved", 0.5}}}}},
        {"instance", {{"cpu-8", {{"on_demand", 0.4}, {"spot", 0.1}}}}},
        {"storage_per_gb_month", 0.023}}},
      {"defaults",
       {{"billing", "measured"},
        {"grace", "1h30m"},
        {"kill_after", "250ms"},
        {"checkpoint_signal", "usr2"},
        {"warn_at", {0.9}},
        {"gpu", "l4"},
        {"pricing", "spot"},
        {"gpus", 8.0},
        {"instance", "cpu-8"},
        {"instances", 2}}},
      {"budgets",
       {{"user", {{"alice", {{"amount", 12.5}, {"period", "day"}, {"metric_goal", "min"}}}}}}},
      {"guards", {{"stall", json::object()}, {"idle_gpu", {{"below_percent", 10}, {"for", "5m"}}}}},
      {"energy", {{"pue", 1.5}}},
      {"webhooks", {{{"url_env", "HOOK"}}}},
      {"metrics_dir", "/metrics"},
  };
  Policy policy = parse_policy(document, "test");
  CHECK(policy.currency == "EUR");
  CHECK(policy.ledger == "sqlite:/srv/ledger.db");
  CHECK(policy.mode == Mode::warn);
  CHECK(policy.gpu_rates.at("l4").spot == Money::from_micros(320'000));
  CHECK_FALSE(policy.gpu_rates.at("l4").on_demand.has_value());
  CHECK(policy.instance_rates.at("cpu-8").price(Pricing::on_demand) == Money::from_micros(400'000));
  CHECK(policy.storage_per_gb_month == Money::from_micros(23'000));
  CHECK(policy.defaults.pricing == Pricing::spot);
  CHECK(policy.defaults.billing == Billing::measured);
  CHECK(policy.defaults.grace == std::chrono::minutes(90));
  CHECK(policy.defaults.kill_after == std::chrono::milliseconds(250));
  CHECK(policy.defaults.grace_on_signal == std::chrono::seconds(15));  // untouched default
  CHECK(policy.defaults.checkpoint_signal == SIGUSR2);
  CHECK(policy.defaults.warn_at == std::vector<double>{0.9});
  CHECK(policy.defaults.gpus == 8);
  CHECK(policy.defaults.instances == 2);
  const BudgetSpec& alice = policy.budgets.at(ScopeKind::user).at("alice");
  CHECK(alice.amount == Money::from_micros(12'500'000));
  CHECK(alice.period == Period::day);
  CHECK(alice.metric_goal == "min");
  REQUIRE(policy.guards.stall.has_value());
  CHECK(policy.guards.stall->after == std::chrono::minutes(20));  // present, so on, with defaults
  REQUIRE(policy.guards.idle_gpu.has_value());
  CHECK(policy.guards.idle_gpu->below_percent == 10);
  CHECK(policy.guards.idle_gpu->for_duration == std::chrono::minutes(5));
  CHECK_FALSE(policy.guards.crash_loop.has_value());
  CHECK(policy.energy.pue == 1.5);
  REQUIRE(policy.webhooks.size() == 1);
  CHECK(policy.webhooks[0].format == "json");
  CHECK(policy.webhooks[0].events.size() == 4);
  CHECK(policy.metrics_dir == "/metrics");
}

TEST_CASE("policy: read_policy_file reports unreadable files, bad JSON and duplicate keys") {
  TempTree tree;
  try {
    read_policy_file(tree.path("missing.json"));
    FAIL("a missing file was read");
  } catch (const PolicyError&) {
    FAIL("a missing file is not an invalid policy");
  } catch (const Error& error) {
    CHECK(error.subject() == tree.path("missing.json"));
    CHECK(error.why() == "No such file or directory");
  }

  tree.write_text("dir/x.json", "{}");
  CHECK_THROWS_WITH_AS(read_policy_file(tree.path("dir")), doctest::Contains("Is a directory"),
                       Error);

  std::string broken =
      tree.write_text("broken.json", "{\n  \"mode\": \"warn\",\n  \"currency\" \"USD\"\n}\n");
  try {
    read_policy_file(broken);
    FAIL("bad JSON was accepted");
  } catch (const PolicyError& error) {
    CHECK(error.subject() == broken);
    REQUIRE(error.errors().size() == 1);
    CHECK(error.errors()[0].starts_with("line 3, column"));
  }

  std::string twice = tree.write_text(
      "twice.json",
      R"({"budgets": {"team": {"vision": {"amount": 50, "amount": 5000}}}, "webhooks": [{"url_env": "A"}, {"url_env": "B", "format": "json", "format": "slack"}]})");
  try {
    read_policy_file(twice);
    FAIL("duplicate keys were accepted");
  } catch (const PolicyError& error) {
    CAPTURE(all_lines(error.errors()));
    CHECK(has_error(error.errors(), "/budgets/team/vision/amount", "duplicate key"));
    CHECK(has_error(error.errors(), "/webhooks/1/format", "duplicate key"));
    CHECK(error.errors().size() == 2);
  }
}

// The schema is for editors and CI; the C++ validator is the authority. Where the schema spells a
// rule as a pattern, both must accept exactly the same strings.
TEST_CASE("policy: the schema's patterns agree with the validator") {
  json schema = read_policy_file(kSourceDir + "/policies/policy.schema.json");
  auto pattern = [&](const std::string& pointer) {
    return std::regex(schema.at(json::json_pointer(pointer)).get<std::string>());
  };
  struct Probe {
    std::string schema_pattern;  // JSON pointer into the schema
    std::vector<std::string> document_path;
    std::vector<std::string> samples;
  };
  const Probe probes[] = {
      {"/$defs/duration/pattern",
       {"defaults", "grace"},
       {"90s", "5m", "1h30m", "250ms", "1.5h", "90", ".5s", "5.s", "2d", "0s", "1h30", "5x", "",
        "-5s", "1.2.3s", "ms", "5 s", "1m30"}},
      {"/$defs/signal/pattern",
       {"defaults", "checkpoint_signal"},
       {"SIGUSR1",  "USR1",        "usr1",   "sigusr1", "SigUsr1", "none",     "NONE",
        "0",        "10",          "64",     "65",      "010",     "SIGRTMIN", "SIGRTMIN+2",
        "rtmin+30", "SIGRTMIN+31", "RTMIN2", "SIGFOO",  "SIGIO",   "sigwinch", ""}},
      {"/properties/ledger/pattern",
       {"ledger"},
       {"sqlite:/var/lib/l.db", "sqlite:", "postgresql://u@h/db", "postgres://h", "postgresql://",
        "/srv/ledger.db", "ledger.db", "mysql://h/db", "postgresql:/x", "postgres.db", ""}},
      {"/properties/currency/pattern", {"currency"}, {"USD", "EUR", "usd", "US", "USDT", "U5D"}},
      {"/$defs/envName/pattern",
       {"webhooks", "0", "url_env"},
       {"SPENDCAP_SLACK_URL", "_X", "x1", "1X", "A-B", "https://x", ""}},
  };
  for (const Probe& probe : probes) {
    std::regex regex = pattern(probe.schema_pattern);
    for (const std::string& sample : probe.samples) {
      json document = json::object();
      json* slot = &document;
      for (const std::string& key : probe.document_path) {
        if (key == "0") {
          *slot = json::array({json::object()});
          slot = &(*slot)[0];
        } else {
          slot = &(*slot)[key];
        }
      }
      *slot = sample;
      CAPTURE(probe.schema_pattern);
      CAPTURE(sample);
      bool schema_accepts = std::regex_search(sample, regex);
      std::vector<std::string> errors = validate_policy(document);
      CHECK_MESSAGE(schema_accepts == errors.empty(), all_lines(errors));
    }
  }
}

// ---- layering ----

// A runner's locked policy, as the layering tests install it.
json locked_policy() {
  return {
      {"locked", true},
      {"currency", "USD"},
      {"ledger", "postgresql://spendcap@db.internal/spendcap"},
      {"rates", {{"gpu", {{"a100-80gb", {{"on_demand", 4.10}, {"spot", 1.60}}}}}}},
      {"defaults",
       {{"grace", "60s"}, {"checkpoint_signal", "SIGUSR1"}, {"gpu", "a100-80gb"}, {"gpus", 4}}},
      {"budgets", {{"team", {{"vision", {{"amount", 5000}, {"max_run", 500}}}}}}},
      {"guards",
       {{"crash_loop", {{"max_failures", 5}, {"window", "10m"}}}, {"stall", json::object()}}},
      {"energy", {{"pue", 1.2}}},
      {"webhooks", {{{"url_env", "RUNNER_HOOK"}}}},
  };
}

TEST_CASE("policy layers: each way of loosening a locked policy is refused") {
  struct Case {
    json upper;
    std::string violation;  // the whole message
  };
  const Case cases[] = {
      {{{"defaults", {{"grace", "120s"}}}}, "/defaults/grace: 120s is longer than the locked 60s"},
      {{{"defaults", {{"grace", "1h"}}}}, "/defaults/grace: 1h is longer than the locked 60s"},
      // Not set by the locked policy: its built-in default is what is locked.
      {{{"defaults", {{"kill_after", "1m"}}}},
       "/defaults/kill_after: 1m is longer than the locked 10s"},
      {{{"defaults", {{"sync", "30s"}}}}, "/defaults/sync: 30s is longer than the locked 5s"},
      {{{"defaults", {{"claim_horizon", "1h"}}}},
       "/defaults/claim_horizon: 1h is longer than the locked 300s"},
      {{{"defaults", {{"checkpoint_signal", "none"}}}},
       "/defaults/checkpoint_signal: none would turn off the locked checkpoint signal SIGUSR1"},
      {{{"ledger", "sqlite:/tmp/mine.db"}},
       "/ledger: sqlite:/tmp/mine.db differs from the locked "
       "postgresql://spendcap@db.internal/spendcap (every run here is recorded in the locked "
       "ledger)"},
      {{{"rates", {{"gpu", {{"a100-80gb", {{"on_demand", 3.0}}}}}}}},
       "/rates/gpu/a100-80gb/on_demand: 3.0 differs from the locked 4.1 (rates cannot be changed)"},
      {{{"rates", {{"gpu", {{"a100-80gb", {{"reserved", 1.0}}}}}}}},
       "/rates/gpu/a100-80gb/reserved: 1.0 is not in the locked policy (rates cannot be changed)"},
      {{{"rates", {{"storage_per_gb_month", 0}}}},
       "/rates/storage_per_gb_month: 0 is not in the locked policy (rates cannot be changed)"},
      {{{"mode", "warn"}}, "/mode: warn would loosen the locked enforce mode"},
      {{{"currency", "EUR"}},
       "/currency: EUR differs from the locked USD (spend is counted in the locked currency)"},
      {{{"defaults", {{"pricing", "spot"}}}},
       "/defaults/pricing: spot differs from the locked on_demand"},
      {{{"defaults", {{"billing", "measured"}}}},
       "/defaults/billing: measured differs from the locked allocated"},
      {{{"defaults", {{"gpu", "h100"}}}},
       "/defaults/gpu: h100 differs from the locked a100-80gb (the runner's hardware is fixed)"},
      {{{"defaults", {{"gpus", 2}}}}, "/defaults/gpus: 2 is fewer than the locked 4"},
      {{{"budgets", {{"team", {{"vision", {{"amount", 9000}}}}}}}},
       "/budgets/team/vision/amount: 9000 is more than the locked 5000"},
      {{{"budgets", {{"team", {{"vision", {{"max_run", 500.01}}}}}}}},
       "/budgets/team/vision/max_run: 500.01 is more than the locked 500"},
      {{{"budgets", {{"team", {{"vision", {{"period", "total"}}}}}}}},
       "/budgets/team/vision/period: total differs from the locked month"},
      {{{"guards", {{"crash_loop", {{"max_failures", 10}}}}}},
       "/guards/crash_loop/max_failures: 10 is more than the locked 5"},
      {{{"guards", {{"crash_loop", {{"window", "5m"}}}}}},
       "/guards/crash_loop/window: 5m is shorter than the locked 10m"},
      // Crash-loop and respawn-loop guards are on by default: a locked policy keeps them on with
      // at least their defaults, whether it writes them down or not.
      {{{"guards", {{"crash_loop", {{"enabled", false}}}}}},
       "/guards/crash_loop/enabled: false would turn off what the locked policy keeps on"},
      {{{"guards", {{"respawn_loop", {{"enabled", false}}}}}},
       "/guards/respawn_loop/enabled: false would turn off what the locked policy keeps on"},
      // The idle-GPU guard too (on whenever GPUs are measured).
      {{{"guards", {{"idle_gpu", {{"enabled", false}}}}}},
       "/guards/idle_gpu/enabled: false would turn off what the locked policy keeps on"},
      {{{"guards", {{"respawn_loop", {{"max_restarts", 20}}}}}},
       "/guards/respawn_loop/max_restarts: 20 is more than the locked 10"},
      // The locked policy turned the stall guard on with its defaults.
      {{{"guards", {{"stall", {{"after", "1h"}}}}}},
       "/guards/stall/after: 1h is longer than the locked 1200s"},
      {{{"energy", {{"pue", 1.0}}}},
       "/energy/pue: 1.0 differs from the locked 1.2 (energy figures are the runner's)"},
      {{{"defaults", {{"grace", 30}}}},
       "/defaults/grace: 30 cannot be compared with the locked 60s"},
      {{{"ledger", "postgresql://me:hunter2@elsewhere/db"}},
       "/ledger: postgresql://me:***@elsewhere/db differs from the locked "
       "postgresql://spendcap@db.internal/spendcap (every run here is recorded in the locked "
       "ledger)"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.upper.dump());
    std::vector<std::string> violations = loosening_violations(locked_policy(), c.upper);
    CHECK(violations == std::vector<std::string>{c.violation});
  }

  // Several at once: all are reported.
  CHECK(loosening_violations(locked_policy(), {{"mode", "warn"}, {"defaults", {{"grace", "2m"}}}})
            .size() == 2);
}

TEST_CASE("policy layers: tightening a locked policy is allowed") {
  const json tightenings[] = {
      {{"defaults", {{"grace", "30s"}, {"kill_after", "5s"}, {"sync", "1s"}}}},
      {{"defaults", {{"grace", "1m"}}}},  // equal, written differently
      {{"defaults", {{"checkpoint_signal", "SIGUSR2"}}}},
      {{"defaults", {{"gpus", 8}, {"gpu", "a100-80gb"}, {"warn_at", {0.2}}}}},
      {{"budgets", {{"team", {{"vision", {{"amount", 100}, {"max_run", 50}}}}}}}},
      {{"budgets",
        {{"team", {{"nlp", {{"amount", 99999}}}}}, {"user", {{"bob", {{"amount", 5}}}}}}}},
      {{"budgets", {{"team", {{"vision", {{"expected_per_hour", 40}, {"metric", "val_acc"}}}}}}}},
      {{"guards", {{"crash_loop", {{"max_failures", 2}, {"window", "1h"}, {"enabled", true}}}}}},
      {{"guards", {{"respawn_loop", {{"max_restarts", 3}, {"min_life", "1m"}}}}}},
      // On by default: a locked policy keeps at least its defaults (5% for 30m).
      {{"guards", {{"idle_gpu", {{"below_percent", 10}, {"for", "10m"}}}}}},
      {{"guards", {{"idle_gpu", {{"enabled", true}}}}}},
      {{"rates", {{"gpu", {{"a100-80gb", {{"on_demand", 4.1}}}}}}}},  // the same rate
      {{"webhooks", {{{"url_env", "MY_HOOK"}}}}, {"metrics_dir", "/tmp/m"}},
      {{"mode", "enforce"}, {"locked", false}},  // "locked" in a layer is ignored
  };
  for (const json& upper : tightenings) {
    CAPTURE(upper.dump());
    CHECK(loosening_violations(locked_policy(), upper).empty());
  }
  // A locked policy in warn mode may be switched to enforce.
  CHECK(loosening_violations({{"locked", true}, {"mode", "warn"}}, {{"mode", "enforce"}}).empty());
}

// A locked policy may set only keys that act (locked_keys_without_effect): the runner's file leaves
// out the keys whose rows are still marked not built, so that it keeps each one once it is built.
json without_unbuilt_keys(json document, std::vector<std::string> path = {}) {
  if (!document.is_object()) return document;
  for (auto it = document.begin(); it != document.end();) {
    path.push_back(it.key());
    const PolicyKey* key = find_policy_key(path);
    if (key && !key->no_effect_yet.empty()) {
      it = document.erase(it);
    } else {
      *it = without_unbuilt_keys(*it, path);
      ++it;
    }
    path.pop_back();
  }
  return document;
}

// A locked runner policy in a temporary "/etc", and a search that looks there.
struct LockedRunner {
  TempTree tree;
  PolicySearch search;
  json document = without_unbuilt_keys(locked_policy());
  LockedRunner() {
    search.system_path = tree.write("etc/spendcap/policy.json", document);
    search.cwd_path = tree.path("work/spendcap.json");
    search.xdg_path = tree.path("home/.config/spendcap/policy.json");
  }
};

// The Error load_policy throws, or a failed check.
Error load_error(const PolicySearch& search, const PolicyLayer& flags) {
  try {
    load_policy(search, flags);
  } catch (const PolicyError& error) {
    FAIL("expected a loosening error, got an invalid policy: " << format_error(error) << "\n"
                                                               << all_lines(error.errors()));
  } catch (const Error& error) {
    return error;
  }
  FAIL("load_policy accepted a loosening layer");
  return Error("", "");
}

TEST_CASE("policy layers: a locked system policy cannot be loosened by any layer") {
  LockedRunner runner;
  const std::string locked_path = runner.search.system_path;
  const PolicyLayer no_flags{"command line", json::object()};

  SUBCASE("by ./spendcap.json") {
    runner.tree.write("work/spendcap.json", {{"defaults", {{"grace", "120s"}}}});
    Error error = load_error(runner.search, no_flags);
    CHECK(error.subject() == runner.search.cwd_path);
    CHECK(error.why() ==
          "would loosen the locked policy: /defaults/grace: 120s is longer than the locked 60s");
    CHECK(error.hint() == "the locked policy " + locked_path + " is set by the runner's owner");
    CHECK(error.code() == ExitCode::internal);
  }
  SUBCASE("by the XDG config file") {
    runner.tree.write("home/.config/spendcap/policy.json",
                      {{"rates", {{"gpu", {{"a100-80gb", {{"spot", 0.5}}}}}}}});
    Error error = load_error(runner.search, no_flags);
    CHECK(error.subject() == *runner.search.xdg_path);
    CHECK(error.why().find("/rates/gpu/a100-80gb/spot: 0.5 differs from the locked 1.6") !=
          std::string::npos);
  }
  SUBCASE("by a file found through $SPENDCAP_POLICY") {
    runner.search.env_path =
        runner.tree.write("elsewhere/mine.json", {{"ledger", "sqlite:/tmp/x.db"}});
    Error error = load_error(runner.search, no_flags);
    CHECK(error.subject() == "$SPENDCAP_POLICY=" + *runner.search.env_path);
    CHECK(error.why().find("/ledger: sqlite:/tmp/x.db differs from the locked") !=
          std::string::npos);
  }
  SUBCASE("by --policy") {
    runner.search.flag_path = runner.tree.write("elsewhere/flag.json", {{"mode", "warn"}});
    Error error = load_error(runner.search, no_flags);
    CHECK(error.subject() == *runner.search.flag_path);
    CHECK(error.why().find("/mode: warn would loosen the locked enforce mode") !=
          std::string::npos);
    // One violation is said once: in the message, not again under it.
    CHECK(error.details.empty());
  }
  SUBCASE("by command-line flags, each violation listed") {
    PolicyLayer flags{
        "command line",
        {{"defaults", {{"checkpoint_signal", "none"}, {"gpus", 1}}}, {"mode", "warn"}}};
    Error error = load_error(runner.search, flags);
    CHECK(error.subject() == "command line");
    CHECK(error.why().find("would loosen the locked policy in 3 keys") != std::string::npos);
    CAPTURE(all_lines(error.details));
    CHECK(error.details.size() == 3);
    CHECK(has_error(error.details, "/defaults/checkpoint_signal", "would turn off"));
    CHECK(has_error(error.details, "/defaults/gpus", "1 is fewer than the locked 4"));
    CHECK(has_error(error.details, "/mode", "warn would loosen"));
  }
  SUBCASE("by flags, even when the user file tightened first") {
    // Flags are checked against the locked policy, not against the (tighter) user file.
    runner.tree.write("work/spendcap.json", {{"defaults", {{"grace", "10s"}}}});
    Error error = load_error(runner.search, {"command line", {{"defaults", {{"grace", "90s"}}}}});
    CHECK(error.subject() == "command line");
    CHECK(error.why().find("90s is longer than the locked 60s") != std::string::npos);
  }
}

TEST_CASE("policy layers: tightening a locked policy takes effect, merged") {
  LockedRunner runner;
  runner.tree.write(
      "work/spendcap.json",
      {{"locked", false},
       {"defaults", {{"grace", "30s"}, {"gpus", 8}}},
       {"budgets", {{"team", {{"vision", {{"amount", 1000}}}, {"nlp", {{"amount", 300}}}}}}},
       {"webhooks", {{{"url_env", "MY_HOOK"}, {"format", "slack"}}}}});
  PolicyLayer flags{"command line",
                    {{"defaults", {{"grace", "10s"}, {"checkpoint_signal", "SIGUSR2"}}}}};
  LoadedPolicy loaded = load_policy(runner.search, flags);

  CHECK(loaded.locked);
  CHECK(loaded.locked_source == runner.search.system_path);
  CHECK(loaded.sources == std::vector<std::string>{runner.search.system_path + " (locked)",
                                                   runner.search.cwd_path, "command line"});
  const Policy& policy = loaded.policy;
  CHECK(policy.locked);  // the user file's "locked": false is ignored
  CHECK(policy.defaults.grace == std::chrono::seconds(10));  // flags over the user file
  CHECK(policy.defaults.checkpoint_signal == SIGUSR2);
  CHECK(policy.defaults.gpus == 8);
  CHECK(policy.defaults.gpu == "a100-80gb");  // from the locked policy
  CHECK(policy.ledger == "postgresql://spendcap@db.internal/spendcap");
  const BudgetSpec& vision = policy.budgets.at(ScopeKind::team).at("vision");
  CHECK(vision.amount == Money::from_micros(1'000'000'000));
  CHECK(vision.max_run == Money::from_micros(500'000'000));  // kept from the locked entry
  CHECK(policy.budgets.at(ScopeKind::team).count("nlp") == 1);
  // Appended, the runner's first (once webhooks are built, the runner's file keeps its own).
  const bool runner_hooks = runner.document.contains("webhooks");
  REQUIRE(policy.webhooks.size() == (runner_hooks ? 2u : 1u));
  if (runner_hooks) CHECK(policy.webhooks[0].url_env == "RUNNER_HOOK");
  CHECK(policy.webhooks.back().url_env == "MY_HOOK");
  CHECK(loaded.document.at("defaults").at("grace") == "10s");
}

TEST_CASE("policy layers: layer errors name their source; the merge is validated too") {
  LockedRunner runner;
  SUBCASE("an invalid user file") {
    runner.tree.write("work/spendcap.json", {{"defaults", {{"grace", "soon"}}}});
    try {
      load_policy(runner.search, {});
      FAIL("an invalid user file was accepted");
    } catch (const PolicyError& error) {
      CHECK(error.subject() == runner.search.cwd_path);
      CHECK(has_error(error.errors(), "/defaults/grace", "must be a duration"));
    }
  }
  SUBCASE("a new budget without an amount is caught on the merged document") {
    PolicyLayer flags{"command line", {{"budgets", {{"team", {{"nlp", {{"max_run", 5}}}}}}}}};
    try {
      load_policy(runner.search, flags);
      FAIL("a budget without an amount was accepted");
    } catch (const PolicyError& error) {
      CHECK(error.subject() == runner.search.system_path + " (locked) + command line");
      CHECK(has_error(error.errors(), "/budgets/team/nlp", "missing required key \"amount\""));
    }
  }
  SUBCASE("a lock that is not a boolean fails closed") {
    json mistyped = locked_policy();
    mistyped["locked"] = "true";
    runner.tree.write("etc/spendcap/policy.json", mistyped);
    runner.tree.write("work/spendcap.json", {{"mode", "warn"}});
    try {
      load_policy(runner.search, {});
      FAIL("a mistyped lock opened the runner");
    } catch (const PolicyError& error) {
      CHECK(error.subject() == runner.search.system_path);
      CHECK(has_error(error.errors(), "/locked", "must be true or false"));
    }
  }
}

TEST_CASE("policy layers: a locked policy that others can write is refused") {
  LockedRunner runner;
  const std::string& file = runner.search.system_path;
  const std::string directory = fs::path(file).parent_path().string();
  CHECK_FALSE(unsafe_permissions(file).has_value());
  CHECK_NOTHROW(load_policy(runner.search, {}));

  SUBCASE("a world-writable file") {
    REQUIRE(chmod(file.c_str(), 0666) == 0);
    std::optional<std::string> unsafe = unsafe_permissions(file);
    REQUIRE(unsafe.has_value());
    CHECK(unsafe->find(file + " is writable by its group and others (mode 0666)") !=
          std::string::npos);
    CHECK(unsafe->find("chmod go-w " + file) != std::string::npos);
    CHECK_THROWS_WITH_AS(load_policy(runner.search, {}),
                         doctest::Contains(("chmod go-w " + file).c_str()), Error);
  }
  SUBCASE("a group-writable file") {
    REQUIRE(chmod(file.c_str(), 0664) == 0);
    CHECK_THROWS_WITH_AS(load_policy(runner.search, {}), doctest::Contains("writable by its group"),
                         Error);
  }
  SUBCASE("a world-writable directory") {
    REQUIRE(chmod(directory.c_str(), 0777) == 0);
    std::optional<std::string> unsafe = unsafe_permissions(file);
    REQUIRE(unsafe.has_value());
    CHECK(unsafe->find(directory + " is writable") != std::string::npos);
    CHECK_THROWS_WITH_AS(load_policy(runner.search, {}),
                         doctest::Contains(("chmod go-w " + directory).c_str()), Error);
  }
  SUBCASE("a symlink into a world-writable directory") {
    std::string target = runner.tree.write("open/policy.json", locked_policy());
    REQUIRE(chmod(fs::path(target).parent_path().c_str(), 0777) == 0);
    fs::remove(file);
    fs::create_symlink(target, file);
    CHECK_THROWS_WITH_AS(load_policy(runner.search, {}), doctest::Contains("chmod go-w"), Error);
  }
  SUBCASE("an unlocked system policy is not held to the rule") {
    json unlocked = locked_policy();
    unlocked["locked"] = false;
    runner.tree.write("etc/spendcap/policy.json", unlocked, 0666);
    CHECK_NOTHROW(load_policy(runner.search, {}));
  }
}

TEST_CASE("policy layers: without a lock, the first file found is the policy") {
  TempTree tree;
  PolicySearch search;
  search.system_path = tree.path("etc/spendcap/policy.json");
  search.cwd_path = tree.path("work/spendcap.json");
  search.xdg_path = tree.path("home/.config/spendcap/policy.json");
  auto grace_of = [](const json& grace) { return json{{"defaults", {{"grace", grace}}}}; };

  SUBCASE("nothing anywhere: the built-in defaults") {
    LoadedPolicy loaded = load_policy(search, {});
    CHECK_FALSE(loaded.locked);
    CHECK(loaded.sources.empty());
    CHECK(loaded.policy.defaults.grace == std::chrono::seconds(60));
  }
  SUBCASE("search order: --policy, $SPENDCAP_POLICY, ./spendcap.json, XDG, /etc") {
    tree.write("etc/spendcap/policy.json", grace_of("5s"));
    CHECK(load_policy(search, {}).policy.defaults.grace == std::chrono::seconds(5));
    tree.write("home/.config/spendcap/policy.json", grace_of("4s"));
    CHECK(load_policy(search, {}).policy.defaults.grace == std::chrono::seconds(4));
    tree.write("work/spendcap.json", grace_of("3s"));
    CHECK(load_policy(search, {}).policy.defaults.grace == std::chrono::seconds(3));
    search.env_path = tree.write("env.json", grace_of("2s"));
    CHECK(load_policy(search, {}).policy.defaults.grace == std::chrono::seconds(2));
    search.flag_path = tree.write("flag.json", grace_of("1s"));
    LoadedPolicy loaded = load_policy(search, {});
    CHECK(loaded.policy.defaults.grace == std::chrono::seconds(1));
    CHECK(loaded.sources == std::vector<std::string>{*search.flag_path});
  }
  SUBCASE("flags are laid over the file without the locked rules") {
    tree.write("work/spendcap.json", {{"mode", "enforce"}, {"webhooks", {{{"url_env", "A"}}}}});
    LoadedPolicy loaded = load_policy(
        search, {"command line", {{"mode", "warn"}, {"webhooks", {{{"url_env", "B"}}}}}});
    CHECK(loaded.policy.mode == Mode::warn);
    CHECK(loaded.policy.webhooks.size() == 2);
    CHECK(loaded.sources == std::vector<std::string>{search.cwd_path, "command line"});
  }
  SUBCASE("a combination that is wrong together names both layers") {
    tree.write("work/spendcap.json", {{"rates", {{"gpu", {{"l4", {{"on_demand", 0.8}}}}}}}});
    try {
      load_policy(search, {"command line", {{"defaults", {{"gpu", "a100"}}}}});
      FAIL("an unknown GPU type was accepted");
    } catch (const PolicyError& error) {
      CHECK(error.subject() == search.cwd_path + " + command line");
      CHECK(has_error(error.errors(), "/defaults/gpu",
                      "unknown GPU type \"a100\" (rates.gpu has: l4)"));
    }
  }
  SUBCASE("a --policy or $SPENDCAP_POLICY that does not exist is an error, not a skip") {
    tree.write("work/spendcap.json", grace_of("3s"));
    search.flag_path = tree.path("nope.json");
    CHECK_THROWS_WITH_AS(load_policy(search, {}), doctest::Contains("no such policy file"), Error);
    search.flag_path.reset();
    search.env_path = tree.path("nope.json");
    CHECK_THROWS_WITH_AS(load_policy(search, {}),
                         doctest::Contains(("$SPENDCAP_POLICY=" + tree.path("nope.json")).c_str()),
                         Error);
  }
}

TEST_CASE("policy layers: the search comes from the environment, except the system path") {
  testing::ScopedEnv policy("SPENDCAP_POLICY", "/srv/team.json");
  testing::ScopedEnv home("HOME", "/home/alice");
  {
    testing::ScopedEnv xdg("XDG_CONFIG_HOME", "/cfg");
    PolicySearch search = PolicySearch::from_environment("/x/flag.json");
    CHECK(search.flag_path == "/x/flag.json");
    CHECK(search.env_path == "/srv/team.json");
    CHECK(search.xdg_path == "/cfg/spendcap/policy.json");
    CHECK(search.cwd_path == "spendcap.json");
    CHECK(search.system_path == "/etc/spendcap/policy.json");
  }
  {
    testing::ScopedEnv xdg("XDG_CONFIG_HOME", "relative/cfg");  // invalid per the XDG spec: ignored
    testing::ScopedEnv empty_policy("SPENDCAP_POLICY", "");
    PolicySearch search = PolicySearch::from_environment(std::nullopt);
    CHECK_FALSE(search.flag_path.has_value());
    CHECK_FALSE(search.env_path.has_value());
    CHECK(search.xdg_path == "/home/alice/.config/spendcap/policy.json");
    CHECK(search.system_path == "/etc/spendcap/policy.json");
  }
}

}  // namespace
}  // namespace spendcap

TEST_CASE("policy: a locked policy that names no ledger refuses any ledger from above") {
  nlohmann::json locked = {{"locked", true}};
  auto violations = spendcap::loosening_violations(locked, {{"ledger", "/tmp/elsewhere.db"}});
  REQUIRE(violations.size() == 1);
  CHECK(violations[0].find("/ledger") == 0);
  nlohmann::json same = {{"locked", true}, {"ledger", "sqlite:/var/lib/spendcap/ledger.db"}};
  CHECK(spendcap::loosening_violations(same, {{"ledger", "sqlite:/var/lib/spendcap/ledger.db"}})
            .empty());
}

namespace spendcap {

TEST_CASE("policy layers: a locked policy names its ledger and its GPU count") {
  testing::TempDir dir("spendcap-policy-test", 0755);
  PolicySearch search;
  search.system_path = dir.file("policy.json");
  search.cwd_path = dir.file("none.json");
  auto write_locked = [&](const json& document) {
    std::ofstream(search.system_path) << document.dump();
    REQUIRE(chmod(search.system_path.c_str(), 0644) == 0);
  };
  auto errors_of = [&]() -> std::string {
    try {
      load_policy(search, PolicyLayer{"command line", json::object()});
    } catch (const PolicyError& error) {
      return all_lines(error.errors());
    }
    return "";
  };
  json locked = {{"locked", true},
                 {"rates", {{"gpu", {{"a100-80gb", {{"on_demand", 4.1}}}}}}},
                 {"defaults", {{"gpu", "a100-80gb"}}}};
  write_locked(locked);
  std::string errors = errors_of();
  CHECK(errors.find("/ledger: a locked policy must name its ledger") != std::string::npos);
  CHECK(errors.find("/defaults/gpus: a locked policy that sets defaults.gpu") != std::string::npos);
  locked["ledger"] = "sqlite:/var/lib/spendcap/ledger.db";
  locked["defaults"]["gpus"] = 8;
  write_locked(locked);
  CHECK(errors_of() == "");
  // An unlocked system policy needs neither: the user's environment is theirs to decide.
  write_locked({{"rates", {{"gpu", {{"a100-80gb", {{"on_demand", 4.1}}}}}}},
                {"defaults", {{"gpu", "a100-80gb"}}}});
  CHECK(errors_of() == "");
}

TEST_CASE("policy: signals are spelled one way in files and on the command line") {
  CHECK(parse_signal("SIGUSR1") == SIGUSR1);
  CHECK(parse_signal("usr2") == SIGUSR2);
  CHECK(parse_signal("10") == 10);
  CHECK(parse_signal("none") == 0);
  CHECK(parse_signal("SIGRTMIN+2") == SIGRTMIN + 2);
  for (const char* bad : {"SigUsr1", "010", "RTMIN2", "SIGRTMIN+2abc", "SIGFOO", "", "999"}) {
    CAPTURE(bad);
    CHECK_FALSE(parse_signal(bad).has_value());
  }
  // SIGKILL and SIGSTOP can never be caught: a checkpoint signal must be one a job can handle.
  auto errors = validate_policy({{"defaults", {{"checkpoint_signal", "SIGKILL"}}}});
  REQUIRE(errors.size() == 1);
  CHECK(errors[0].find("/defaults/checkpoint_signal: cannot be caught") == 0);
}

}  // namespace spendcap
