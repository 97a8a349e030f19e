// The policy's keys, one row each: where a key is (its JSON path), what it is worth where a locked
// policy does not write it down, how a layer over a locked policy may change it, and which
// command-line flag sets it. The locked-policy check (layers.cpp) and the command-line layer
// (cli/run.cpp) read these rows; a unit test holds the reader (policy.cpp) to the same list, so a
// key the reader accepts but the table lacks fails the build's tests. Immutable; thread-safe.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace spendcap {

// How a layer over a locked policy may change a value.
enum class Tightening {
  any,           // a layer may set anything
  ignore,        // a layer's value is dropped (/locked: only the system file locks)
  same,          // must equal the locked value, if the locked policy has one
  same_present,  // must equal a locked value; values the locked policy lacks are refused too
  at_most,       // may only go down
  at_least,      // may only go up
  enforce_kept,  // enforce may not become warn
  signal_kept,   // a checkpoint signal may change, but not to none
};
// How at_most / at_least compare: durations as durations ("2m" > "90s"), the rest as numbers.
enum class Scale { none, duration, number };

// Where a locked policy that does not write a key down still enforces its built-in default.
enum class Implied {
  no,           // the key is free where the locked policy lacks it
  always,       // a locked policy is in enforce mode unless it says otherwise
  with_parent,  // where the locked policy has the enclosing object (a guard it turns on)
};

struct PolicyKey {
  std::string path;  // a JSON pointer; "*" stands for any one key ("/budgets/*/*/amount")
  Tightening tightening;
  Scale scale = Scale::none;
  // at_most / at_least: the word for a violation ("longer"); same: why it must stay.
  std::string note = {};
  Implied implied = Implied::no;
  nlohmann::json default_value = nullptr;  // as written in a file: "60s", 5, "on_demand"
  std::string flag = {};                   // the `spendcap run` flag that sets it: "--grace"
};

// Every key, in the order of policies/README.md.
const std::vector<PolicyKey>& policy_keys();

// The row for a path (its keys unescaped), or nullptr for a path no row names.
const PolicyKey* find_policy_key(const std::vector<std::string>& path);

// Whether `pattern` ("/budgets/*/*/amount") names `path` ({"budgets", "team", "vision", "amount"}).
bool path_matches(std::string_view pattern, const std::vector<std::string>& path);

// The row a flag sets ("--grace" -> /defaults/grace); nullptr for a flag that sets no policy key.
const PolicyKey* policy_key_for_flag(std::string_view flag);

}  // namespace spendcap
