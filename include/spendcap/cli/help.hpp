// `spendcap help` and `--help`: the manual (cli/manual.hpp) over the CLI11 tree the verb table
// builds (cli/verbs.hpp; `help` is its row kHelpVerb).
// document() reads the tree's option tables, so each page lists exactly what the parser accepts;
// install_help_format() gives every command's --help the layout of a page: run's options grouped
// by purpose, every line within 100 columns, the verb's first examples at the end.
#pragma once

#include <optional>
#include <string>

#include "spendcap/cli/manual.hpp"

namespace CLI {
class App;
}

namespace spendcap {

struct HelpRequest {
  std::optional<std::string> page;     // a verb, kPolicyFilePage, or none: the overview
  bool man = false;                    // roff instead of text
  bool options = false;                // the parser's option names for the page's verb
  std::optional<std::string> man_dir;  // write every page here
  bool completion = false;             // the bash completion script (cli/completion.hpp)
};

// The tree as the manual reads it (--help flags left out).
CommandDoc document(const CLI::App& app);

// Every command of `app`: grouped, wrapped --help with examples. Call once the tree is complete.
void install_help_format(CLI::App& app);

// Prints the page (or writes every page); returns the exit status. Throws Error for an unknown
// page or a directory it cannot write.
int help_command(const CLI::App& app, const HelpRequest& request);

}  // namespace spendcap
