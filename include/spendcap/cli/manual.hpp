// The manual: spendcap(1), a page per verb (spendcap-run(1), ...) and spendcap-policy(5). A page
// is built from two sources and nothing else: the command line's own option tables (the CLI11
// tree, handed in as a CommandDoc by cli/help.hpp, so a flag cannot be missing from its page) and
// the one table of per-verb text here (description, examples, exit status), which `spendcap help
// VERB`, `--help` and the man pages share. The policy page comes from policy_keys() and
// policy/key_docs.hpp. Pure: no I/O; immutable tables; thread-safe.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace spendcap {

// One option or positional of a command, as the parser holds it.
struct OptionDoc {
  std::vector<std::string> names;  // "--quiet", "-q"; a positional's name ("command")
  std::string value;               // the value's hint ("USD"); empty for a flag
  std::string description;
  bool positional = false;
  bool required = false;
  bool repeatable = false;
};

// A command of the tree: spendcap itself (path ""), a verb ("budgets"), a verb's verb
// ("budgets apply").
struct CommandDoc {
  std::string path;
  std::string summary;
  std::vector<OptionDoc> options;  // --help left out
  std::vector<CommandDoc> subcommands;
};

struct Example {
  std::string command;      // one shell line (or a few, joined by "\n")
  std::string explanation;  // what it does, one sentence
};

// The hand-written part of a verb's page.
struct VerbText {
  std::string verb;
  std::string synopsis;                  // after "spendcap VERB": "[OPTIONS] -- COMMAND [ARGS...]"
  std::vector<std::string> description;  // paragraphs
  std::vector<Example> examples;         // the first two are also in --help
  std::vector<std::string> exit_status;  // paragraphs before the common table
  std::vector<std::string> see_also;     // "spendcap-runs(1)"
};

// Every verb's text; a verb of the tree without one gets no EXAMPLES (the docs test fails).
const std::vector<VerbText>& verb_texts();
const VerbText* find_verb_text(std::string_view verb);

// `spendcap run --help`'s groups, in the order they are shown: a title and its options' long
// names. An option of run no group names is shown under "Other".
struct OptionGroup {
  std::string title;
  std::vector<std::string> options;
};
const std::vector<OptionGroup>& run_option_groups();

// An environment variable spendcap reads, or sets for the job.
struct EnvironmentVariable {
  std::string name;
  std::string meaning;
  bool set_for_job = false;        // spendcap sets it in the job's environment
  std::vector<std::string> verbs;  // the verbs whose pages name it; empty: spendcap(1) only
};
const std::vector<EnvironmentVariable>& environment_variables();

// A page, before it is rendered.
struct ManBlock {
  enum class Kind { paragraph, item, code, subheading };
  Kind kind = Kind::paragraph;
  std::string term;  // item: the term ("--budget USD"); subheading: the title
  std::string text;  // paragraph, item: the text; code: lines joined by "\n"
};
struct ManSection {
  std::string title;  // "OPTIONS"
  std::vector<ManBlock> blocks;
};
struct ManPage {
  std::string name;     // "spendcap-run"
  int section = 1;      // 1, or 5 for the policy file
  std::string summary;  // NAME's line after the dash
  std::vector<ManSection> sections;
};

// The pages' names: "spendcap" (the overview), "run", ..., "policy-file" (spendcap-policy(5)).
inline constexpr std::string_view kPolicyFilePage = "policy-file";
// The file a page is installed as: "spendcap.1", "spendcap-run.1", "spendcap-policy.5".
std::string man_file_name(const ManPage& page);

ManPage overview_page(const CommandDoc& root);
// The page of one verb of `root` (its subcommands included); throws Error for an unknown verb.
ManPage verb_page(const CommandDoc& root, std::string_view verb);
ManPage policy_file_page();
// Every page: the overview, each verb in the tree's order, the policy file.
std::vector<ManPage> all_pages(const CommandDoc& root);

// roff for man(1) (-man macros); renders without warnings under groff -ww.
std::string render_roff(const ManPage& page);
// Plain text as man(1) would lay it out, within `width` columns (code lines are not wrapped).
std::string render_text(const ManPage& page, std::size_t width = 100);

// `text` broken into lines of at most `width` columns (a longer word stays whole on its line).
std::vector<std::string> wrap_words(std::string_view text, std::size_t width);

}  // namespace spendcap
