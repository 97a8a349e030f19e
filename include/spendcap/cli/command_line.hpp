// What the command line means before CLI11 judges it: a misspelt flag or subcommand named with
// the likely one ("--buget: no such flag (did you mean --budget?)"), and a stray word before a
// later `--` refused instead of run as the command (`--grace 5 min -- true` would run `min`).
// Pure: main.cpp describes its CLI11 tree as a CommandSpec; nothing here prints or exits. Words
// after the first `--` are the job's and are never looked at.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace spendcap {

struct OptionSpec {
  std::vector<std::string> names;  // "--budget", "-q"
  bool takes_value = false;        // the next word is its value (unless given as --name=VALUE)
};

struct CommandSpec {
  std::string name;
  std::vector<OptionSpec> options;
  std::vector<CommandSpec> subcommands;
  bool has_positionals = false;  // takes words of its own (a file, a run id, the command)
  bool fallthrough = false;      // its parent's options are accepted after its name
};

// Levenshtein distance with adjacent transpositions counted as one edit ("rnu" -> "run": 1).
std::size_t edit_distance(std::string_view a, std::string_view b);
// The candidate closest to `word`, if it is close enough to be a likely typo.
std::optional<std::string> closest_name(std::string_view word,
                                        const std::vector<std::string>& candidates);

struct CommandLineProblem {
  std::string where;    // "run", "stop", "spendcap": the (sub)command the word was given to
  std::string word;     // the word as given
  std::string message;  // "no such flag (did you mean --budget?)"
  std::string hint;     // what to do
};

// The first problem in argv[1..]: an unknown flag, an unknown subcommand, or a word that is
// neither a flag's value nor the command's before a later `--`. nullopt when CLI11 should judge.
std::optional<CommandLineProblem> find_command_line_problem(const CommandSpec& app,
                                                            const std::vector<std::string>& args);

}  // namespace spendcap
