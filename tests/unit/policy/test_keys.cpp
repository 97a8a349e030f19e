// The table of policy keys (keys.hpp) drives the reader, the locked-policy check and the
// command-line flags: these tests hold all three to it, row by row.
#include <algorithm>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include "spendcap/base/duration.hpp"
#include "spendcap/policy/keys.hpp"
#include "spendcap/policy/layers.hpp"
#include "spendcap/policy/policy.hpp"

namespace spendcap {
namespace {

using json = nlohmann::json;

std::vector<std::string> segments(std::string_view pattern) {
  std::vector<std::string> out;
  while (!pattern.empty()) {
    pattern.remove_prefix(1);
    out.emplace_back(pattern.substr(0, pattern.find('/')));
    pattern.remove_prefix(out.back().size());
  }
  return out;
}

// A concrete path for a pattern: a budget kind "*" becomes "team", a webhook "0", any other "*" a
// name.
std::vector<std::string> instantiate(std::string_view pattern) {
  std::vector<std::string> path = segments(pattern);
  for (std::size_t i = 0; i < path.size(); ++i) {
    if (path[i] != "*") continue;
    std::string above = i > 0 ? path[i - 1] : "";
    path[i] = above == "budgets" ? "team" : above == "webhooks" ? "0" : "entry";
  }
  return path;
}

json::json_pointer pointer(const std::vector<std::string>& path) {
  json::json_pointer at;
  for (const std::string& key : path) at /= key;
  return at;
}

std::string text(const std::vector<std::string>& path) {
  return pointer(path).to_string();
}

// A document with `value` at `path`.
json with(const std::vector<std::string>& path, json value) {
  json document = json::object();
  document[pointer(path)] = std::move(value);
  return document;
}

// The keys the reader lists for the object at `path` ("unknown key (expected one of: a, b)").
std::vector<std::string> reader_keys(const std::vector<std::string>& path) {
  std::vector<std::string> probe = path;
  probe.push_back("zzzzzzzzzzzzzzzzzzzz");
  std::vector<std::string> errors = validate_policy_layer(with(probe, 1));
  const std::string marker = text(probe) + ": unknown key (expected one of: ";
  for (const std::string& error : errors) {
    if (!error.starts_with(marker)) continue;
    std::vector<std::string> keys;
    std::string list = error.substr(marker.size(), error.size() - marker.size() - 1);
    for (std::size_t at = 0; at <= list.size();) {
      std::size_t comma = list.find(", ", at);
      if (comma == std::string::npos) comma = list.size();
      keys.push_back(list.substr(at, comma - at));
      at = comma + 2;
    }
    return keys;
  }
  FAIL("no unknown-key error for " << text(probe) << " among " << json(errors).dump());
  return {};
}

bool some_row_at_or_under(const std::vector<std::string>& path) {
  for (const PolicyKey& key : policy_keys()) {
    std::vector<std::string> row = segments(key.path);
    if (row.size() >= path.size() &&
        std::equal(path.begin(), path.end(), row.begin(),
                   [](const std::string& a, const std::string& b) { return b == "*" || a == b; })) {
      return true;
    }
  }
  return false;
}

TEST_CASE("policy keys: the reader accepts exactly the keys the table has") {
  // Every object on the way to a row, probed for the keys the reader knows there (except objects
  // of named entries, "rates.gpu" or "budgets.team", whose keys are names).
  std::set<std::vector<std::string>> objects;
  for (const PolicyKey& key : policy_keys()) {
    std::vector<std::string> pattern = segments(key.path), path = instantiate(key.path);
    for (std::size_t n = 0; n < path.size(); ++n) {
      if (pattern[n] == "*") continue;
      objects.insert(std::vector<std::string>(path.begin(), path.begin() + n));
    }
  }
  for (const auto& object : objects) {
    for (const std::string& key : reader_keys(object)) {
      std::vector<std::string> path = object;
      path.push_back(key);
      CAPTURE(text(path));
      CHECK(some_row_at_or_under(path));
    }
  }
  // And every row is a key the reader knows (not an unknown key).
  for (const PolicyKey& key : policy_keys()) {
    std::vector<std::string> path = instantiate(key.path);
    CAPTURE(key.path);
    for (const std::string& error : validate_policy_layer(with(path, key.default_value))) {
      CHECK(error.find("unknown key") == std::string::npos);
    }
  }
}

TEST_CASE("policy keys: a default a locked policy implies is valid and is the reader's default") {
  for (const PolicyKey& key : policy_keys()) {
    if (key.implied == Implied::no) continue;
    CAPTURE(key.path);
    REQUIRE(!key.default_value.is_null());
    CHECK(validate_policy_layer(with(instantiate(key.path), key.default_value)).empty());
    // Setting the default explicitly changes nothing in the policy read.
    std::vector<std::string> path = instantiate(key.path);
    json bare = json::object(), explicit_default = with(path, key.default_value);
    if (path.size() > 1) {
      bare[pointer(std::vector<std::string>(path.begin(), path.end() - 1))] = json::object();
    }
    if (path[0] == "budgets") {  // an entry needs its amount
      bare[pointer({"budgets", "team", "entry", "amount"})] = 1;
      explicit_default[pointer({"budgets", "team", "entry", "amount"})] = 1;
    }
    CHECK(loosening_violations(bare, explicit_default).empty());
    CHECK(loosening_violations(explicit_default, bare).empty());
  }
}

TEST_CASE("policy keys: every flag names one concrete key that the locked check covers") {
  std::set<std::string> flags;
  for (const PolicyKey& key : policy_keys()) {
    if (key.flag.empty()) continue;
    CAPTURE(key.flag);
    CHECK(key.flag.starts_with("--"));
    CHECK(flags.insert(key.flag).second);
    CHECK(key.path.find('*') == std::string::npos);
    CHECK(policy_key_for_flag(key.flag) == &key);
    CHECK(find_policy_key(segments(key.path)) == &key);
    CHECK(key.tightening != Tightening::ignore);
  }
  // The flags `spendcap run` documents as policy settings.
  CHECK(flags == std::set<std::string>{"--grace", "--kill-after", "--interval", "--sync",
                                       "--claim-horizon", "--checkpoint-signal", "--pricing",
                                       "--billing", "--gpus", "--gpu", "--instances", "--instance",
                                       "--mode", "--ledger", "--isolation", "--stall-after",
                                       "--metrics-dir"});
  CHECK(policy_key_for_flag("--job-key") == nullptr);
}

// A value that loosens `locked` under `key`'s rule; nullopt for rules that refuse nothing.
std::optional<json> loosened(const PolicyKey& key, const json& locked) {
  bool up = key.tightening == Tightening::at_most;
  switch (key.tightening) {
    case Tightening::by_key:  // an object: its keys have their own rows
    case Tightening::any:
    case Tightening::ignore:
      return std::nullopt;
    case Tightening::same:
    case Tightening::same_present:
      return locked.is_string() ? json(locked.get<std::string>() + "-other")
                                : json(locked.get<double>() + 1);
    case Tightening::at_most:
    case Tightening::at_least:
      if (key.scale == Scale::duration) {
        auto seconds = std::chrono::duration_cast<std::chrono::seconds>(
                           *parse_duration(locked.get<std::string>()))
                           .count();
        return std::to_string(up ? seconds * 2 : seconds / 2) + "s";
      }
      return up ? locked.get<double>() * 2 : locked.get<double>() / 2;
    case Tightening::enforce_kept:
      return "warn";
    case Tightening::on_kept:
      return false;
    case Tightening::signal_kept:
    case Tightening::pid_kept:
      return "none";
  }
  return std::nullopt;
}

TEST_CASE("policy keys: each locked rule refuses a loosening and keeps the locked value") {
  for (const PolicyKey& key : policy_keys()) {
    if (key.tightening == Tightening::by_key) continue;
    CAPTURE(key.path);
    std::vector<std::string> path = instantiate(key.path);
    json value = key.default_value;
    if (value.is_null()) value = key.scale == Scale::duration ? json("60s") : json(4);
    if (key.tightening == Tightening::pid_kept) value = "pid";
    if (key.tightening == Tightening::on_kept) value = true;  // what a locked policy keeps on
    if (key.tightening == Tightening::same || key.tightening == Tightening::same_present) {
      if (value.is_null() || value == 4) value = "locked-value";
    }
    json locked = with(path, value);

    CHECK(loosening_violations(locked, locked).empty());
    std::optional<json> looser = loosened(key, value);
    if (!looser) {
      CHECK(loosening_violations(locked, with(path, "anything")).empty());
      continue;
    }
    std::vector<std::string> violations = loosening_violations(locked, with(path, *looser));
    REQUIRE(violations.size() == 1);
    CHECK(violations[0].starts_with(text(path) + ": "));

    // A default the locked policy implies is locked even where the policy does not write it.
    if (key.implied != Implied::no) {
      json silent = json::object();
      if (key.implied == Implied::with_parent) {
        silent[pointer(std::vector<std::string>(path.begin(), path.end() - 1))] = json::object();
      }
      std::optional<json> past_default = loosened(key, key.default_value);
      CHECK(loosening_violations(silent, with(path, *past_default)).size() == 1);
    }
  }
}

TEST_CASE(
    "policy keys: a checkpoint signal that is ignored by default counts as none when locked") {
  json locked = {{"defaults", {{"checkpoint_signal", "SIGUSR1"}}}};
  // A signal whose default action is to ignore reaches no job that does not catch it: the same as
  // turning the checkpoint signal off, which a locked policy refuses.
  for (const char* ignored : {"SIGCHLD", "SIGWINCH", "SIGURG", "SIGCONT", "none"}) {
    CAPTURE(ignored);
    json upper = {{"defaults", {{"checkpoint_signal", ignored}}}};
    CHECK(loosening_violations(locked, upper).size() == 1);
  }
  // Another signal that terminates by default is a fine change.
  json other = {{"defaults", {{"checkpoint_signal", "SIGUSR2"}}}};
  CHECK(loosening_violations(locked, other).empty());
}

}  // namespace
}  // namespace spendcap
