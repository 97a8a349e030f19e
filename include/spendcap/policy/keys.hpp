// The policy's keys, one row each: where a key is (its JSON path), how it is read and checked,
// what it is worth where a locked policy does not write it down, how a layer over a locked policy
// may change it, and which command-line flag sets it. The reader (policy.cpp), the locked-policy
// check (layers.cpp) and the command-line layer (run/settings.cpp) all work from these rows: a new
// key is a new row (and, for the reader, a member in policy.hpp's struct). Immutable; thread-safe.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <typeinfo>
#include <vector>

#include <nlohmann/json.hpp>

namespace spendcap {

namespace policy_reader {
class Reader;  // src/policy/reader.hpp
}
// Reads a key's value into `owner`, the struct of the enclosing object (a Defaults for
// /defaults/grace), reporting what is wrong with it to the reader.
using ReadKey = std::function<void(policy_reader::Reader& reader, const nlohmann::json& value,
                                   const nlohmann::json::json_pointer& at, void* owner)>;

// How a layer over a locked policy may change a value.
enum class Tightening {
  by_key,        // an object: each key by its own row (a value that is not an object: as same)
  any,           // a layer may set anything
  ignore,        // a layer's value is dropped (/locked: only the system file locks)
  same,          // must equal the locked value, if the locked policy has one
  same_present,  // must equal a locked value; values the locked policy lacks are refused too
  at_most,       // may only go down
  at_least,      // may only go up
  enforce_kept,  // enforce may not become warn
  signal_kept,   // a checkpoint signal may change, but not to none
  pid_kept,      // a locked "pid" isolation may not become "none"
  on_kept,       // a locked true (a guard that is on) may not become false
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
  // Reading: how, into which struct, and whether a whole document must have it.
  ReadKey read = nullptr;
  const std::type_info* owner = nullptr;
  bool required = false;
  bool listed = true;  // offered in "expected one of" (not for keys refused with a hint)
  // Layering over a locked policy.
  Tightening tightening = Tightening::same;
  Scale scale = Scale::none;
  // at_most / at_least: the word for a violation ("longer"); same: why it must stay.
  std::string note = {};
  Implied implied = Implied::no;
  nlohmann::json default_value = nullptr;  // as written in a file: "60s", 5, "on_demand"
  std::string flag = {};                   // the `spendcap run` flag that sets it: "--grace"
  // Not implemented yet: what will make it act ("the runaway guards"). Such a key is validated,
  // said to have no effect (policy check, the start line), and refused in a locked policy.
  std::string no_effect_yet = {};
};

// Every key, objects too, in the order of policies/README.md (the order errors come out in).
const std::vector<PolicyKey>& policy_keys();

// The row for a path (its keys unescaped), or nullptr for a path no row names.
const PolicyKey* find_policy_key(const std::vector<std::string>& path);

// Whether `pattern` ("/budgets/*/*/amount") names `path` ({"budgets", "team", "vision", "amount"}).
bool path_matches(std::string_view pattern, const std::vector<std::string>& path);

// The keys of `document` that are accepted but do nothing yet, one message each
// ("/guards: has no effect yet (not built: the runaway guards)"); the outermost such key of
// a subtree only. Empty once every key acts.
std::vector<std::string> keys_without_effect(const nlohmann::json& document);

// The same keys as errors of a locked policy, which may set only keys that act (a runner's owner
// must not believe a guard protects the runner when none does): "/guards: is not implemented yet
// (the runaway guards): ...". Keys lose their no_effect_yet mark as they are built, and are then
// allowed without another change.
std::vector<std::string> locked_keys_without_effect(const nlohmann::json& document);

// The row a flag sets ("--grace" -> /defaults/grace); nullptr for a flag that sets no policy key.
const PolicyKey* policy_key_for_flag(std::string_view flag);

}  // namespace spendcap
