// cli/manual.hpp: pages built from a command tree and the per-verb text; roff that man(1) reads.
#include <doctest/doctest.h>

#include "spendcap/base/error.hpp"
#include "spendcap/cli/manual.hpp"

namespace spendcap {

namespace {

CommandDoc tree() {
  CommandDoc run{"run",
                 "run a command under a budget",
                 {{{"--budget"}, "USD", "the most this run may spend", false, false, false},
                  {{"--tag"}, "KEY=VALUE", "a free tag", false, false, true},
                  {{"--quiet", "-q"}, "", "print errors only", false, false, false},
                  {{"--frobnicate"}, "", "a flag no group names", false, false, false},
                  {{"command"}, "COMMAND", "the command", true, false, true}},
                 {}};
  CommandDoc apply{"budgets apply",
                   "set the budgets",
                   {{{"policy_file"}, "FILE", "the policy", true, true, false}},
                   {}};
  CommandDoc budgets{
      "budgets", "each budget", {{{"--json"}, "", "print JSON", false, false, false}}, {apply}};
  return CommandDoc{"", "spendcap", {}, {run, budgets}};
}

std::string section_of(const std::string& text, const std::string& title) {
  std::size_t start = text.find("\n" + title + "\n");
  REQUIRE(start != std::string::npos);
  std::size_t end = text.find("\n\n", start + title.size() + 2);
  return text.substr(start, end == std::string::npos ? std::string::npos : end - start);
}

}  // namespace

TEST_CASE("a verb's page lists each of its options, run's by purpose") {
  std::string text = "\n" + render_text(verb_page(tree(), "run"));
  for (const char* section : {"NAME", "SYNOPSIS", "DESCRIPTION", "OPTIONS", "EXAMPLES",
                              "EXIT STATUS", "ENVIRONMENT", "SEE ALSO"}) {
    CHECK(text.find("\n" + std::string(section) + "\n") != std::string::npos);
  }
  CHECK(text.find("--budget USD") != std::string::npos);
  CHECK(text.find("a free tag (repeatable)") != std::string::npos);
  CHECK(text.find("--quiet, -q") != std::string::npos);
  // Grouped: --budget under "Budget and price", the unlisted flag under "Other".
  std::size_t budget_group = text.find("Budget and price");
  std::size_t other = text.find("   Other");
  REQUIRE(budget_group != std::string::npos);
  REQUIRE(other != std::string::npos);
  CHECK(text.find("--budget USD") > budget_group);
  CHECK(text.find("--frobnicate") > other);
  CHECK(text.find("SPENDCAP_TEAM") != std::string::npos);
  for (const std::string& line : wrap_words(text, 1000)) CHECK(line.size() <= 1000);
}

TEST_CASE("a verb's subcommands are on its page, and an unknown verb is refused") {
  std::string text = render_text(verb_page(tree(), "budgets"));
  CHECK(text.find("spendcap budgets apply") != std::string::npos);
  CHECK(text.find("policy_file") == std::string::npos);  // the positional by its hint
  CHECK(text.find("FILE") != std::string::npos);
  CHECK_THROWS_AS(verb_page(tree(), "bugdets"), Error);
}

TEST_CASE("roff: hyphens and backslashes escaped, no line read as a request") {
  CommandDoc root = tree();
  root.subcommands[0].options[0].description = ".starts with a dot \\ and 'a quote";
  std::string roff = render_roff(verb_page(root, "run"));
  CHECK(roff.find(".TH SPENDCAP\\-RUN 1") == 0 + roff.find(".TH"));
  CHECK(roff.find("\\-\\-budget") != std::string::npos);
  CHECK(roff.find("\n\\&.starts with a dot \\e and") != std::string::npos);
  CHECK(roff.find("\n.starts") == std::string::npos);
  CHECK(man_file_name(verb_page(root, "run")) == "spendcap-run.1");
  CHECK(man_file_name(policy_file_page()) == "spendcap-policy.5");
}

TEST_CASE("text pages stay within their width, but a long word is kept whole") {
  for (const ManPage& page : all_pages(tree())) {
    std::string text = render_text(page, 80);
    std::size_t start = 0;
    bool in_code = false;
    while (start < text.size()) {
      std::size_t end = text.find('\n', start);
      std::string line = text.substr(start, end - start);
      in_code = line.rfind("           ", 0) == 0;  // code is indented 11 and not wrapped
      if (!in_code && line.find(' ', 14) != std::string::npos) CHECK(line.size() <= 80);
      start = end + 1;
    }
  }
  CHECK(wrap_words("a bb ccc", 4) == std::vector<std::string>{"a bb", "ccc"});
  CHECK(wrap_words("abcdefgh ij", 4) == std::vector<std::string>{"abcdefgh", "ij"});
}

TEST_CASE("every verb's text has examples, short enough for --help") {
  for (const VerbText& text : verb_texts()) {
    INFO(text.verb);
    CHECK_FALSE(text.description.empty());
    CHECK_FALSE(text.examples.empty());
    for (const Example& example : text.examples) {
      std::size_t start = 0;
      while (start <= example.command.size()) {
        std::size_t end = example.command.find('\n', start);
        if (end == std::string::npos) end = example.command.size();
        CHECK(end - start <= 96);  // 4 columns of indent in --help, within 100
        start = end + 1;
      }
    }
  }
}

TEST_CASE("the exit-status section holds every status of the one list") {
  std::string text = render_text(overview_page(tree()));
  std::string exit = section_of(text, "EXIT STATUS");
  for (const char* code : {"120", "121", "122", "123", "124", "125", "126", "127"}) {
    CHECK(exit.find(code) != std::string::npos);
  }
  CHECK(text.find("spendcap budgets") != std::string::npos);
  CHECK(text.find("POLICY SEARCH ORDER") != std::string::npos);
}

}  // namespace spendcap
