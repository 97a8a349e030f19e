// What each policy key means to the person writing a policy file: its type as written in JSON, its
// default where the key table (keys.hpp) does not carry one, and a line of meaning. One entry per
// row of policy_keys(), by the same path; spendcap-policy(5) is built from the two, and a unit test
// holds them to the same set of paths. Immutable; thread-safe.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace spendcap {

struct PolicyKeyDoc {
  std::string type;           // "duration", "money > 0", "object"
  std::string default_value;  // as written in a file, or a phrase; empty: none
  std::string meaning;
};

// The entry for a row's path ("/defaults/grace", "/budgets/*/*/amount"); nullptr for a path
// without one.
const PolicyKeyDoc* find_policy_key_doc(std::string_view path);

// Every documented path, in no particular order (for the test that they match the key table).
std::vector<std::string> documented_policy_paths();

}  // namespace spendcap
