// Nothing accepted that does nothing (issue 15, item 1): a locked policy refuses every key that is
// not implemented yet, by its row's mark in keys.cpp; the members of a budget are read and checked.
#include <sys/stat.h>

#include <fstream>
#include <string>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include "spendcap/policy/keys.hpp"
#include "spendcap/policy/layers.hpp"
#include "spendcap/policy/policy.hpp"
#include "test_support.hpp"

namespace spendcap {
namespace {

using json = nlohmann::json;
using testing::TempDir;

// A locked system policy at a path of the test's own (PolicySearch::system_path).
LoadedPolicy load_locked(const TempDir& dir, const json& document) {
  std::string path = dir.file("policy.json");
  std::ofstream(path) << document.dump();
  REQUIRE(chmod(path.c_str(), 0644) == 0);
  PolicySearch search;
  search.system_path = path;
  search.cwd_path = dir.file("none.json");
  return load_policy(search, PolicyLayer{});
}

TEST_CASE("locked policy: a key marked not implemented yet is refused, naming it") {
  TempDir dir("spendcap-locked", 0755);
  json locked = {{"locked", true}, {"ledger", "sqlite:" + dir.file("l.db")}};
  CHECK_NOTHROW(load_locked(dir, locked));

  for (const PolicyKey& key : policy_keys()) {
    if (key.no_effect_yet.empty()) continue;
    CAPTURE(key.path);
    // Every marked key is named by locked_keys_without_effect, whatever it holds.
    json document = locked;
    std::string concrete = key.path;  // "/budgets/*/*/metric" -> "/budgets/x/x/metric"
    for (std::size_t at = concrete.find("/*"); at != std::string::npos; at = concrete.find("/*")) {
      concrete.replace(at, 2, "/x");
    }
    document[json::json_pointer(concrete)] = 1;
    std::vector<std::string> errors = locked_keys_without_effect(document);
    REQUIRE(errors.size() == 1);
    CHECK(errors.front().starts_with(concrete + ": is not implemented yet ("));
    CHECK(errors.front().find(key.no_effect_yet) != std::string::npos);
  }

  json with_unbuilt = locked;
  with_unbuilt["metrics_dir"] = "/tmp";
  const PolicyKey* metrics = find_policy_key({"metrics_dir"});
  REQUIRE(metrics != nullptr);
  if (!metrics->no_effect_yet.empty()) {
    CHECK_THROWS_WITH_AS(load_locked(dir, with_unbuilt), doctest::Contains("invalid policy"),
                         PolicyError);
    try {
      load_locked(dir, with_unbuilt);
    } catch (const PolicyError& error) {
      REQUIRE(error.errors().size() == 1);
      CHECK(error.errors().front().starts_with("/metrics_dir: is not implemented yet"));
    }
  }
  // Measured billing acts (the GPU part by busy GPU time): neither value is reported.
  json measured = {{"defaults", {{"billing", "measured"}}}};
  CHECK(keys_without_effect(measured).empty());
  CHECK(locked_keys_without_effect(measured).empty());
  CHECK(keys_without_effect(json{{"defaults", {{"billing", "allocated"}}}}).empty());
}

TEST_CASE("policy: a budget's members are Unix group names") {
  auto errors_of = [](json members) {
    json document = {{"budgets", {{"team", {{"vision", {{"amount", 10}, {"members", members}}}}}}}};
    return validate_policy(document);
  };
  CHECK(errors_of({{"unix_groups", {"vision", "ml-admins"}}}).empty());
  Policy policy = parse_policy(
      json{
          {"budgets",
           {{"team", {{"vision", {{"amount", 10}, {"members", {{"unix_groups", {"vision"}}}}}}}}}}},
      "test");
  CHECK(policy.budgets[ScopeKind::team]["vision"].member_groups ==
        std::vector<std::string>{"vision"});
  CHECK(errors_of(json::object()).front().find("missing required key \"unix_groups\"") !=
        std::string::npos);
  CHECK(errors_of({{"unix_groups", json::array()}}).front().find("non-empty list") !=
        std::string::npos);
  CHECK(errors_of({{"unix_groups", {"a b"}}}).front().find("Unix group name") != std::string::npos);
  CHECK(errors_of({{"unix_groups", {"v", "v"}}}).front().find("listed twice") != std::string::npos);
  CHECK(errors_of({{"groups", {"v"}}}).front().find("unknown key") != std::string::npos);
  // A layer over a locked policy repeats its members; another list is refused.
  json locked = {
      {"budgets",
       {{"team", {{"vision", {{"amount", 10}, {"members", {{"unix_groups", {"a"}}}}}}}}}}};
  json same = locked;
  json other = {{"budgets", {{"team", {{"vision", {{"members", {{"unix_groups", {"b"}}}}}}}}}}};
  CHECK(loosening_violations(locked, same).empty());
  REQUIRE(loosening_violations(locked, other).size() == 1);
  CHECK(loosening_violations(locked, other)
            .front()
            .starts_with("/budgets/team/vision/members/unix_groups"));
}

}  // namespace
}  // namespace spendcap
