// policy/key_docs.hpp: spendcap-policy(5) documents every row of the key table, and nothing else.
#include <algorithm>
#include <set>
#include <string>

#include <doctest/doctest.h>

#include "spendcap/policy/key_docs.hpp"
#include "spendcap/policy/keys.hpp"

namespace spendcap {

TEST_CASE("every policy key has its documentation, and every documented path is a key") {
  std::set<std::string> keys;
  for (const PolicyKey& key : policy_keys()) {
    keys.insert(key.path);
    const PolicyKeyDoc* doc = find_policy_key_doc(key.path);
    INFO("no entry in src/policy/key_docs.cpp for ", key.path);
    REQUIRE(doc != nullptr);
    CHECK_FALSE(doc->type.empty());
  }
  for (const std::string& path : documented_policy_paths()) {
    INFO("src/policy/key_docs.cpp documents ", path, ", which no row of keys.cpp has");
    CHECK(keys.count(path) == 1);
  }
  CHECK(find_policy_key_doc("/defaults/grcae") == nullptr);  // the check can fail
}

}  // namespace spendcap
