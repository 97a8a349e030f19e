#include "spendcap/cli/command_line.hpp"

#include <algorithm>

namespace spendcap {

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::vector<std::size_t>> d(a.size() + 1, std::vector<std::size_t>(b.size() + 1));
  for (std::size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (std::size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    for (std::size_t j = 1; j <= b.size(); ++j) {
      std::size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[a.size()][b.size()];
}

std::optional<std::string> closest_name(std::string_view word,
                                        const std::vector<std::string>& candidates) {
  std::optional<std::string> best;
  std::size_t best_distance = 0;
  for (const std::string& candidate : candidates) {
    std::size_t distance = edit_distance(word, candidate);
    if (!best || distance < best_distance) {
      best = candidate;
      best_distance = distance;
    }
  }
  // A third of the word (at least 2 edits) is a typo; more is another word. A prefix of a name
  // ("--exp" for "--experiment") is a typo too.
  std::string_view bare = word.substr(
      word.find_first_not_of('-') == std::string_view::npos ? 0 : word.find_first_not_of('-'));
  std::size_t allowed = std::max<std::size_t>(2, bare.size() / 3);
  if (best && best_distance <= allowed) return best;
  for (const std::string& candidate : candidates) {
    if (bare.size() >= 3 && candidate.starts_with(word)) return candidate;
  }
  return std::nullopt;
}

namespace {

struct Scope {
  const CommandSpec* command;
  std::string path;  // "stop", "budgets apply"
};

const OptionSpec* find_option(const std::vector<Scope>& chain, std::string_view name) {
  // The innermost command's options, then its parents' while they fall through.
  for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
    for (const OptionSpec& option : it->command->options) {
      if (std::find(option.names.begin(), option.names.end(), name) != option.names.end()) {
        return &option;
      }
    }
    if (!it->command->fallthrough) break;
  }
  return nullptr;
}

std::vector<std::string> option_names(const std::vector<Scope>& chain) {
  std::vector<std::string> names;
  for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
    for (const OptionSpec& option : it->command->options) {
      for (const std::string& name : option.names) {
        if (name.starts_with("--")) names.push_back(name);
      }
    }
    if (!it->command->fallthrough) break;
  }
  return names;
}

std::string help_of(const std::vector<Scope>& chain) {
  return chain.size() == 1 ? "see spendcap --help"
                           : "see spendcap " + chain.back().path + " --help";
}

}  // namespace

std::optional<CommandLineProblem> find_command_line_problem(const CommandSpec& app,
                                                            const std::vector<std::string>& args) {
  std::vector<Scope> chain{{&app, "spendcap"}};
  auto dash_dash = std::find(args.begin(), args.end(), "--");
  for (auto it = args.begin(); it != dash_dash; ++it) {
    const std::string& word = *it;
    const CommandSpec& here = *chain.back().command;
    if (word.size() > 1 && word[0] == '-') {
      std::string name = word.substr(0, word.find('='));
      // -abc: CLI11's short flags may be joined; only the first is checked here.
      if (name[1] != '-' && name.size() > 2) name = name.substr(0, 2);
      const OptionSpec* option = find_option(chain, name);
      if (!option) {
        if (name == "--help" || name == "-h" || name == "--version") continue;
        CommandLineProblem problem{chain.back().path, word, "no such flag", help_of(chain)};
        if (auto likely = closest_name(name, option_names(chain))) {
          problem.message += ": did you mean " + *likely + "?";
        }
        return problem;
      }
      bool joined = word.find('=') != std::string::npos || (name.size() == 2 && word.size() > 2);
      if (option->takes_value && !joined && std::next(it) != dash_dash) {
        // `--title --quiet`, `--team --quiet`: CLI11 would take the flag as the value.
        const std::string& value = *std::next(it);
        std::string value_name = value.substr(0, value.find('='));
        if (value.starts_with("--") ||
            (value.size() == 2 && value[0] == '-' && find_option(chain, value_name))) {
          return CommandLineProblem{
              chain.back().path, word + " " + value, "the value looks like a flag",
              "give " + name + " its value (" + name + "=VALUE for one that starts with -)"};
        }
        ++it;
      }
      continue;
    }
    auto sub = std::find_if(here.subcommands.begin(), here.subcommands.end(),
                            [&](const CommandSpec& s) { return s.name == word; });
    if (sub != here.subcommands.end()) {
      std::string path = chain.size() == 1 ? sub->name : chain.back().path + " " + sub->name;
      chain.push_back({&*sub, path});
      continue;
    }
    if (!here.subcommands.empty() && !here.has_positionals) {
      std::vector<std::string> names;
      for (const CommandSpec& s : here.subcommands) names.push_back(s.name);
      CommandLineProblem problem{chain.back().path, word, "no such command", help_of(chain)};
      if (auto likely = closest_name(word, names)) {
        problem.message +=
            ": did you mean `" +
            (chain.size() == 1 ? "spendcap " : "spendcap " + chain.back().path + " ") + *likely +
            "`?";
      }
      return problem;
    }
    if (dash_dash != args.end()) {
      // A later `--` says where the command starts: a word before it is a mistake (a flag's
      // value split in two, "--grace 5 min"), never the command.
      return CommandLineProblem{
          chain.back().path, word, "a word before `--` that is no flag's value",
          "the command goes after --: spendcap " + chain.back().path + " [FLAGS] -- COMMAND ARGS"};
    }
    // The command's own words (run without `--`, a run id, a file): CLI11 judges them.
    if (here.has_positionals) return std::nullopt;
  }
  return std::nullopt;
}

}  // namespace spendcap
