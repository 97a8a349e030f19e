#include "spendcap/cli/manual.hpp"

#include "manual_blocks.hpp"

#include <algorithm>
#include <cctype>
#include <sstream>

#include "spendcap/base/error.hpp"
#include "spendcap/base/exit_code.hpp"
#include "spendcap/policy/key_docs.hpp"
#include "spendcap/policy/keys.hpp"

namespace spendcap {

namespace {

constexpr const char* kVersion = "spendcap 0.1.0";

std::string upper(std::string text) {
  for (char& c : text) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return text;
}

using manual_blocks::code;
using manual_blocks::item;
using manual_blocks::paragraph;
ManBlock subheading(std::string title) {
  return {ManBlock::Kind::subheading, std::move(title), ""};
}

std::string join(const std::vector<std::string>& parts, const std::string& separator) {
  std::string out;
  for (const std::string& part : parts) out += (out.empty() ? "" : separator) + part;
  return out;
}

std::string word_of(const CommandDoc& command, const OptionDoc& positional);

// A verb's summary without the usage example some carry ("run a command under a budget: spendcap
// run --rate ...").
std::string short_summary(const std::string& summary) {
  return summary.substr(0, summary.find(": spendcap "));
}

// "--quiet, -q", "--budget USD"; a positional by its word ("FILE")
std::string option_term(const CommandDoc& command, const OptionDoc& option) {
  if (option.positional) return word_of(command, option);
  std::string term = join(option.names, ", ");
  if (!option.value.empty()) term += " " + option.value;
  return term;
}

std::string option_text(const OptionDoc& option) {
  std::string text = option.description;
  if (option.repeatable && !option.positional && text.find("repeatable") == std::string::npos) {
    text += " (repeatable)";
  }
  if (option.required) text += " (required)";
  return text;
}

// The exit-status table of --help (base/exit_code.hpp), one item per status.
std::vector<ManBlock> exit_status_items() {
  std::vector<ManBlock> items;
  std::istringstream lines(exit_code_table());
  std::string line;
  std::getline(lines, line);  // "Exit status:"
  while (std::getline(lines, line)) {
    std::size_t start = line.find_first_not_of(' ');
    if (start == std::string::npos) continue;
    if (start > 2 && !items.empty()) {  // a continuation line
      items.back().text += " " + line.substr(start);
      continue;
    }
    std::string rest = line.substr(start);
    std::size_t gap = rest.find("  ");
    items.push_back(gap == std::string::npos
                        ? item(rest, "")
                        : item(rest.substr(0, gap), rest.substr(rest.find_first_not_of(' ', gap))));
  }
  return items;
}

std::vector<ManBlock> environment_items(std::string_view verb, bool set_for_job) {
  std::vector<ManBlock> items;
  for (const EnvironmentVariable& variable : environment_variables()) {
    if (variable.set_for_job != set_for_job) continue;
    bool named = verb.empty() || std::find(variable.verbs.begin(), variable.verbs.end(), verb) !=
                                     variable.verbs.end();
    if (named) items.push_back(item(variable.name, variable.meaning));
  }
  return items;
}

ManSection environment_section(std::string_view verb) {
  ManSection section{"ENVIRONMENT", {}};
  std::vector<ManBlock> read = environment_items(verb, false);
  std::vector<ManBlock> job = environment_items(verb, true);
  if (!read.empty()) {
    section.blocks.push_back(paragraph("spendcap reads:"));
    section.blocks.insert(section.blocks.end(), read.begin(), read.end());
  }
  if (!job.empty()) {
    section.blocks.push_back(paragraph(
        "The job's environment gains (the webhook variables the policy names are removed from "
        "it):"));
    section.blocks.insert(section.blocks.end(), job.begin(), job.end());
  }
  return section;
}

// A positional's word in a synopsis: its hint ("RUN_ID"), or its name where two share a hint
// (ledger copy's FROM and TO).
std::string word_of(const CommandDoc& command, const OptionDoc& positional) {
  int sharing = 0;
  for (const OptionDoc& option : command.options) {
    sharing += option.positional && option.value == positional.value ? 1 : 0;
  }
  if (positional.value.empty() || sharing > 1) return upper(positional.names.front());
  return positional.value;
}

std::string usage_of(const CommandDoc& command) {
  std::string usage = "spendcap " + command.path;
  bool has_flags = false;
  for (const OptionDoc& option : command.options) has_flags = has_flags || !option.positional;
  if (has_flags) usage += " [OPTIONS]";
  for (const OptionDoc& option : command.options) {
    if (!option.positional) continue;
    std::string word = word_of(command, option);
    if (option.repeatable) word += "...";
    usage += option.required ? " " + word : " [" + word + "]";
  }
  return usage;
}

void add_options(ManSection& section, const CommandDoc& command, bool grouped) {
  if (!grouped) {
    for (const OptionDoc& option : command.options) {
      section.blocks.push_back(item(option_term(command, option), option_text(option)));
    }
    return;
  }
  // run: its words first, then its flags by purpose, in run_option_groups()'s order; the rest
  // under "Other".
  std::vector<const OptionDoc*> left;
  for (const OptionDoc& option : command.options) {
    if (option.positional) {
      section.blocks.push_back(item(option_term(command, option), option_text(option)));
    } else {
      left.push_back(&option);
    }
  }
  for (const OptionGroup& group : run_option_groups()) {
    std::vector<ManBlock> items;
    for (const std::string& name : group.options) {
      auto it = std::find_if(left.begin(), left.end(), [&](const OptionDoc* option) {
        return std::find(option->names.begin(), option->names.end(), name) != option->names.end();
      });
      if (it == left.end()) continue;
      items.push_back(item(option_term(command, **it), option_text(**it)));
      left.erase(it);
    }
    if (items.empty()) continue;
    section.blocks.push_back(subheading(group.title));
    section.blocks.insert(section.blocks.end(), items.begin(), items.end());
  }
  if (!left.empty()) {
    section.blocks.push_back(subheading("Other"));
    for (const OptionDoc* option : left) {
      section.blocks.push_back(item(option_term(command, *option), option_text(*option)));
    }
  }
}

ManSection examples_section(const VerbText& text) {
  ManSection section{"EXAMPLES", {}};
  for (const Example& example : text.examples) {
    section.blocks.push_back(paragraph(example.explanation));
    section.blocks.push_back(code(example.command));
  }
  return section;
}

const CommandDoc* find_verb(const CommandDoc& root, std::string_view verb) {
  for (const CommandDoc& sub : root.subcommands) {
    if (sub.path == verb) return &sub;
  }
  return nullptr;
}

std::string see_also_of(const std::vector<std::string>& pages) {
  return join(pages, ", ");
}

// ---- rendering ----

// roff's special characters in running text, and a line that would read as a request.
std::string roff_escape(std::string_view text) {
  std::string out;
  for (char c : text) {
    if (c == '\\') {
      out += "\\e";
    } else if (c == '-') {
      out += "\\-";
    } else {
      out += c;
    }
  }
  return out;
}

std::string roff_line(std::string_view text) {
  std::string line = roff_escape(text);
  if (!line.empty() && (line[0] == '.' || line[0] == '\'')) line = "\\&" + line;
  return line;
}

}  // namespace

std::vector<std::string> wrap_words(std::string_view text, std::size_t width) {
  std::vector<std::string> lines;
  std::string line;
  std::size_t at = 0;
  while (at < text.size()) {
    std::size_t start = text.find_first_not_of(' ', at);
    if (start == std::string_view::npos) break;
    std::size_t end = text.find(' ', start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view word = text.substr(start, end - start);
    if (!line.empty() && line.size() + 1 + word.size() > width) {
      lines.push_back(line);
      line.clear();
    }
    line += (line.empty() ? "" : " ") + std::string(word);
    at = end;
  }
  if (!line.empty()) lines.push_back(line);
  return lines;
}

std::string man_file_name(const ManPage& page) {
  return page.name + "." + std::to_string(page.section);
}

ManPage overview_page(const CommandDoc& root) {
  ManPage page{"spendcap", 1, "a hard dollar cap on any command", {}};
  page.sections.push_back({"SYNOPSIS",
                           {code("spendcap run [OPTIONS] -- COMMAND [ARGS...]\n"
                                 "spendcap VERB [OPTIONS] [ARGS...]\n"
                                 "spendcap help [VERB]")}});
  page.sections.push_back(
      {"DESCRIPTION",
       {paragraph("spendcap puts a hard dollar cap on a command, the way timeout(1) puts a time "
                  "limit on one: it launches the job, accrues its spend in real time, warns at "
                  "thresholds, and when a budget trips asks the job to checkpoint, waits a grace "
                  "period, then ends the whole process tree (escaped daemons included), never "
                  "over budget. Every run is recorded in a ledger (SQLite on one host, "
                  "PostgreSQL for many), so team, experiment, project and user budgets hold "
                  "across runs and concurrent jobs."),
        paragraph("It is not a scheduler and not a billing system: it prices a run from the "
                  "rate it is given or the policy's price sheet, and it stops only the tree the "
                  "job forks. Work the job hands to a server outside that tree (docker's "
                  "daemon, systemd-run, a tmux server already running, Slurm, a remote host) is "
                  "neither stopped nor charged."),
        paragraph("A run id is its UUID or any prefix of it no other run shares; a misspelt "
                  "flag or verb is named with the likely one. Each verb has its own page, "
                  "spendcap-VERB(1), which spendcap help VERB prints.")}});
  ManSection commands{"COMMANDS", {}};
  for (const CommandDoc& verb : root.subcommands) {
    commands.blocks.push_back(item(
        "spendcap " + verb.path, short_summary(verb.summary) + " (spendcap-" + verb.path + "(1))"));
  }
  page.sections.push_back(commands);
  page.sections.push_back(
      {"POLICY SEARCH ORDER",
       {paragraph("The policy in effect is the first file found of: --policy FILE, "
                  "$SPENDCAP_POLICY, ./spendcap.json, $XDG_CONFIG_HOME/spendcap/policy.json, "
                  "/etc/spendcap/policy.json. A /etc/spendcap/policy.json with \"locked\": true "
                  "always loads first, and every other layer (user files, $SPENDCAP_POLICY, "
                  "flags) may only tighten it. The format: spendcap-policy(5).")}});
  ManSection examples{"EXAMPLES", {}};
  for (const char* verb : {"run", "ps", "runs", "report"}) {
    if (const VerbText* text = find_verb_text(verb)) {
      examples.blocks.push_back(paragraph(text->examples.front().explanation));
      examples.blocks.push_back(code(text->examples.front().command));
    }
  }
  page.sections.push_back(examples);
  page.sections.push_back({"EXIT STATUS", exit_status_items()});
  page.sections.push_back(environment_section(""));
  page.sections.push_back(
      {"FILES",
       {item("/etc/spendcap/policy.json", "the host's policy (locked on a shared runner)"),
        item("$XDG_DATA_HOME/spendcap/ledger.db", "the default SQLite ledger"),
        item("$XDG_STATE_HOME/spendcap/spool",
             "final rows the ledger did not take, replayed by "
             "the next spendcap command"),
        item("/etc/spendcap/runner.json", "the shared runner's layout")}});
  std::vector<std::string> see_also;
  for (const CommandDoc& verb : root.subcommands)
    see_also.push_back("spendcap-" + verb.path + "(1)");
  see_also.push_back("spendcap-policy(5)");
  see_also.push_back("timeout(1)");
  page.sections.push_back({"SEE ALSO", {paragraph(see_also_of(see_also))}});
  return page;
}

ManPage verb_page(const CommandDoc& root, std::string_view verb) {
  const CommandDoc* command = find_verb(root, verb);
  if (!command) {
    std::vector<std::string> names;
    for (const CommandDoc& sub : root.subcommands) names.push_back(sub.path);
    throw Error("help " + std::string(verb), "no such page",
                "give a verb (" + join(names, ", ") + ") or " + std::string(kPolicyFilePage));
  }
  const VerbText* text = find_verb_text(verb);
  // "run a command under a budget: spendcap run --rate ...": NAME's line is the part before the
  // usage example.
  ManPage page{"spendcap-" + command->path, 1, short_summary(command->summary), {}};

  ManSection synopsis{"SYNOPSIS", {}};
  std::vector<std::string> lines;
  if (text && !text->synopsis.empty()) {
    lines.push_back("spendcap " + command->path + " " + text->synopsis);
  } else if (command->subcommands.empty() || !command->options.empty()) {
    lines.push_back(usage_of(*command));
  }
  for (const CommandDoc& sub : command->subcommands) lines.push_back(usage_of(sub));
  synopsis.blocks.push_back(code(join(lines, "\n")));
  page.sections.push_back(synopsis);

  ManSection description{"DESCRIPTION", {}};
  if (text) {
    for (const std::string& p : text->description) description.blocks.push_back(paragraph(p));
  } else {
    description.blocks.push_back(paragraph(short_summary(command->summary)));
  }
  page.sections.push_back(description);

  ManSection options{"OPTIONS", {}};
  add_options(options, *command, command->path == "run");
  for (const CommandDoc& sub : command->subcommands) {
    options.blocks.push_back(subheading("spendcap " + sub.path));
    options.blocks.push_back(paragraph(short_summary(sub.summary)));
    add_options(options, sub, false);
  }
  if (options.blocks.empty()) options.blocks.push_back(paragraph("None."));
  page.sections.push_back(options);

  if (text && !text->examples.empty()) page.sections.push_back(examples_section(*text));

  ManSection exit_status{"EXIT STATUS", {}};
  if (command->path != "run" && command->path != "estimate") {
    exit_status.blocks.push_back(
        paragraph("0 on success; 125 when spendcap failed (usage, "
                  "policy, ledger), with a message that says why."));
  }
  if (text) {
    for (const std::string& p : text->exit_status) exit_status.blocks.push_back(paragraph(p));
  }
  if (command->path == "run" || command->path == "estimate") {
    std::vector<ManBlock> items = exit_status_items();
    exit_status.blocks.insert(exit_status.blocks.end(), items.begin(), items.end());
  }
  page.sections.push_back(exit_status);

  ManSection environment = environment_section(command->path);
  if (environment.blocks.empty()) {
    environment.blocks.push_back(paragraph("spendcap " + command->path +
                                           " reads no variable of its own; those every verb "
                                           "reads are in spendcap(1)."));
  }
  page.sections.push_back(environment);

  std::vector<std::string> see_also = {"spendcap(1)"};
  if (text) see_also.insert(see_also.end(), text->see_also.begin(), text->see_also.end());
  page.sections.push_back({"SEE ALSO", {paragraph(see_also_of(see_also))}});
  return page;
}

std::vector<ManPage> all_pages(const CommandDoc& root) {
  std::vector<ManPage> pages = {overview_page(root)};
  for (const CommandDoc& verb : root.subcommands) pages.push_back(verb_page(root, verb.path));
  pages.push_back(policy_file_page());
  return pages;
}

std::string render_roff(const ManPage& page) {
  std::ostringstream out;
  out << ".\\\" Generated by spendcap help --man from the command line's option tables.\n";
  out << ".TH " << upper(roff_escape(page.name)) << " " << page.section << " \"\" \"" << kVersion
      << "\" \"spendcap manual\"\n";
  out << ".nh\n.ad l\n";  // no hyphens inside a flag's name, no stretched lines
  out << ".SH NAME\n" << roff_line(page.name + " - " + page.summary) << "\n";
  for (const ManSection& section : page.sections) {
    out << ".SH \"" << section.title << "\"\n";
    bool first = true;
    for (const ManBlock& block : section.blocks) {
      switch (block.kind) {
        case ManBlock::Kind::paragraph:
          if (!first) out << ".PP\n";
          out << roff_line(block.text) << "\n";
          break;
        case ManBlock::Kind::item:
          out << ".TP\n.B " << roff_line(block.term) << "\n" << roff_line(block.text) << "\n";
          break;
        case ManBlock::Kind::code: {
          out << ".PP\n.RS 4\n.nf\n";
          std::istringstream lines(block.text);
          std::string line;
          while (std::getline(lines, line)) out << roff_line(line) << "\n";
          out << ".fi\n.RE\n";
          break;
        }
        case ManBlock::Kind::subheading:
          out << ".SS \"" << roff_escape(block.term) << "\"\n";
          break;
      }
      first = false;
    }
  }
  return out.str();
}

std::string render_text(const ManPage& page, std::size_t width) {
  std::ostringstream out;
  const std::size_t indent = 7, item_indent = 14;
  auto put_wrapped = [&](const std::string& text, std::size_t at, std::size_t first_at) {
    std::vector<std::string> lines = wrap_words(text, width > at + 20 ? width - at : 20);
    for (std::size_t i = 0; i < lines.size(); ++i) {
      out << std::string(i == 0 ? first_at : at, ' ') << lines[i] << "\n";
    }
  };
  out << "NAME\n";
  put_wrapped(page.name + " - " + page.summary, indent, indent);
  for (const ManSection& section : page.sections) {
    out << "\n" << section.title << "\n";
    const ManBlock* previous = nullptr;
    for (const ManBlock& block : section.blocks) {
      // A blank line between blocks, but not between the items of a list.
      bool listed =
          previous && previous->kind == ManBlock::Kind::item && block.kind == ManBlock::Kind::item;
      bool after_heading = previous && previous->kind == ManBlock::Kind::subheading;
      if (previous && !listed && !after_heading) out << "\n";
      switch (block.kind) {
        case ManBlock::Kind::paragraph:
          put_wrapped(block.text, indent, indent);
          break;
        case ManBlock::Kind::item:
          // A short term shares its line with the text, as man(1) lays out a tagged paragraph.
          if (block.term.size() + 1 < item_indent - indent && !block.text.empty()) {
            out << std::string(indent, ' ') << block.term
                << std::string(item_indent - indent - block.term.size(), ' ');
            put_wrapped(block.text, item_indent, 0);
          } else {
            out << std::string(indent, ' ') << block.term << "\n";
            put_wrapped(block.text, item_indent, item_indent);
          }
          break;
        case ManBlock::Kind::code: {
          std::istringstream lines(block.text);
          std::string line;
          while (std::getline(lines, line)) out << std::string(indent + 4, ' ') << line << "\n";
          break;
        }
        case ManBlock::Kind::subheading:
          out << "   " << block.term << "\n";
          break;
      }
      previous = &block;
    }
  }
  return out.str();
}

}  // namespace spendcap
