// cli/verbs.hpp: the verb table is the one list of verbs, and each has its page's text.
#include <doctest/doctest.h>

#include <set>
#include <string>

#include "spendcap/cli/manual.hpp"
#include "spendcap/cli/verbs.hpp"

namespace spendcap {

TEST_CASE("the verb table: one row per verb, each with a summary and its page's text") {
  std::set<std::string> names;
  for (const Verb* verb : verb_table()) {
    INFO(verb->name);
    CHECK(names.insert(verb->name).second);
    CHECK(std::string(verb->summary).size() > 0);
    CHECK(static_cast<bool>(verb->add));
    CHECK(find_verb_text(verb->name) != nullptr);
  }
  CHECK(names.count("run") == 1);
  CHECK(names.count("help") == 1);
  // A verb's text names a verb of the table (or one of its own verbs: "budgets apply").
  for (const VerbText& text : verb_texts()) {
    INFO(text.verb);
    CHECK(names.count(text.verb.substr(0, text.verb.find(' '))) == 1);
  }
}

}  // namespace spendcap
