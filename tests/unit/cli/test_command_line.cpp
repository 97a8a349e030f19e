// cli/command_line.hpp: typos named with the likely flag or command; a stray word before `--`.
#include <doctest/doctest.h>

#include "spendcap/cli/command_line.hpp"

namespace spendcap {

namespace {

CommandSpec app_spec() {
  CommandSpec run{"run",
                  {{{"--budget"}, true},
                   {{"--team"}, true},
                   {{"--grace"}, true},
                   {{"--quiet", "-q"}, false},
                   {{"--title"}, false}},
                  {},
                  true,
                  false};
  CommandSpec apply{"apply", {}, {}, true, true};
  CommandSpec budgets{
      "budgets", {{{"--ledger"}, true}, {{"--json"}, false}}, {apply}, false, false};
  CommandSpec stop{
      "stop", {{{"--run"}, true}, {{"--experiment"}, true}, {{"--list"}, false}}, {}, false, false};
  return CommandSpec{"spendcap", {{{"--help", "-h"}, false}}, {run, budgets, stop}, false, false};
}

std::optional<CommandLineProblem> problem(std::vector<std::string> args) {
  return find_command_line_problem(app_spec(), args);
}

}  // namespace

TEST_CASE("edit distance counts a swap of two letters as one edit") {
  CHECK(edit_distance("rnu", "run") == 1);
  CHECK(edit_distance("--buget", "--budget") == 1);
  CHECK(edit_distance("--teem", "--team") == 1);
  CHECK(edit_distance("abc", "abc") == 0);
  CHECK(edit_distance("", "abc") == 3);
}

TEST_CASE("a misspelt flag names the likely one, in the subcommand it was given to") {
  auto p = problem({"run", "--buget", "5", "--", "true"});
  REQUIRE(p);
  CHECK(p->where == "run");
  CHECK(p->word == "--buget");
  CHECK(p->message == "no such flag: did you mean --budget?");
  CHECK(p->hint == "see spendcap run --help");
  p = problem({"run", "--teem=vision", "--", "true"});
  REQUIRE(p);
  CHECK(p->message == "no such flag: did you mean --team?");
  p = problem({"stop", "--experimnt", "x"});
  REQUIRE(p);
  CHECK(p->message == "no such flag: did you mean --experiment?");
  // Nothing close: no guess.
  p = problem({"run", "--zzzzzzzz", "--", "true"});
  REQUIRE(p);
  CHECK(p->message == "no such flag");
  // A subcommand's options do not leak into another's suggestions.
  p = problem({"stop", "--budgt", "5"});
  REQUIRE(p);
  CHECK(p->message == "no such flag");
}

TEST_CASE("a value that looks like a flag is refused; --flag=-x passes") {
  auto p = problem({"run", "--team", "--quiet", "--", "true"});
  REQUIRE(p);
  CHECK(p->word == "--team --quiet");
  CHECK(p->message == "the value looks like a flag");
  p = problem({"run", "--team", "-q", "--", "true"});
  REQUIRE(p);
  CHECK_FALSE(problem({"run", "--team=-q", "--", "true"}));
  CHECK_FALSE(problem({"run", "--budget", "-5", "--", "true"}));  // money's own check refuses it
}

TEST_CASE("a misspelt subcommand names the likely one") {
  auto p = problem({"rnu", "--budget", "5"});
  REQUIRE(p);
  CHECK(p->where == "spendcap");
  CHECK(p->message == "no such command: did you mean `spendcap run`?");
  p = problem({"budgest"});
  REQUIRE(p);
  CHECK(p->message == "no such command: did you mean `spendcap budgets`?");
  p = problem({"budgets", "aply", "p.json"});
  REQUIRE(p);
  CHECK(p->message == "no such command: did you mean `spendcap budgets apply`?");
}

TEST_CASE(
    "a word before a later `--` that is no flag's value is refused; the job's words are not read") {
  auto p = problem({"run", "--grace", "5", "min", "--", "true"});
  REQUIRE(p);
  CHECK(p->word == "min");
  CHECK(p->hint.find("after --") != std::string::npos);
  // Values, flags and the job's own arguments (its own typos and `--` included) pass.
  CHECK_FALSE(problem(
      {"run", "--grace", "5min", "-q", "--budget=5", "--", "python", "--buget", "--", "x"}));
  CHECK_FALSE(problem({"run", "--budget", "5", "python", "train.py", "--lr", "3"}));  // no `--`
  CHECK_FALSE(problem({"budgets", "--ledger", "x.db", "apply", "p.json"}));
  CHECK_FALSE(problem({"budgets", "apply", "--ledger", "x.db", "p.json"}));  // falls through
  CHECK_FALSE(problem({"--help"}));
  CHECK_FALSE(problem({"run", "--help"}));
}

}  // namespace spendcap
