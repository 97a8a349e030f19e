#include "spendcap/cli/help.hpp"

#include "spendcap/cli/completion.hpp"
#include "spendcap/cli/verbs.hpp"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string_view>
#include <unordered_map>

#include "spendcap/base/error.hpp"

namespace spendcap {

namespace {

constexpr std::size_t kHelpWidth = 100;
constexpr std::size_t kNameColumn = 32;

// The verb a command belongs to: "budgets" for `budgets apply`, "" for spendcap itself.
const CLI::App* verb_of(const CLI::App* app) {
  if (!app->get_parent()) return nullptr;
  while (app->get_parent() && app->get_parent()->get_parent()) app = app->get_parent();
  return app;
}

// CLI11's layout, with run's options by purpose, descriptions wrapped within kHelpWidth, and the
// verb's first two examples after the options.
class HelpFormatter : public CLI::Formatter {
 public:
  HelpFormatter() { column_width(kNameColumn); }

  std::string make_option(const CLI::Option* opt, bool is_positional) const override {
    return two_columns(make_option_name(opt, is_positional) + make_option_opts(opt),
                       make_option_desc(opt));
  }

  std::string make_subcommand(const CLI::App* sub) const override {
    return two_columns(sub->get_display_name(true), sub->get_description());
  }

  // "  NAME  description", the description wrapped in its column.
  static std::string two_columns(const std::string& left, const std::string& description) {
    std::string name = "  " + left;
    std::vector<std::string> lines = wrap_words(description, kHelpWidth - kNameColumn);
    std::string out = name;
    if (name.size() >= kNameColumn && !lines.empty()) {
      out += "\n" + std::string(kNameColumn, ' ');
    } else {
      out += std::string(kNameColumn - std::min(name.size(), kNameColumn), ' ');
    }
    for (std::size_t i = 0; i < lines.size(); ++i) {
      if (i > 0) out += "\n" + std::string(kNameColumn, ' ');
      out += lines[i];
    }
    return out + "\n";
  }

  std::string make_help(const CLI::App* app, std::string name,
                        CLI::AppFormatMode mode) const override {
    if (mode == CLI::AppFormatMode::Sub) return make_expanded(app);
    std::stringstream out;
    out << make_description(app);
    out << make_usage(app, name);
    out << make_positionals(app);
    // Groups: run's in run_option_groups()'s order, then any other in the tree's order.
    std::vector<std::string> groups;
    for (const OptionGroup& group : run_option_groups()) groups.push_back(group.title);
    for (const std::string& group : app->get_groups()) {
      if (std::find(groups.begin(), groups.end(), group) == groups.end()) groups.push_back(group);
    }
    for (const std::string& group : groups) {
      std::vector<const CLI::Option*> options = app->get_options([&](const CLI::Option* option) {
        return option->get_group() == group && option->nonpositional();
      });
      if (!group.empty() && !options.empty()) out << make_group(group, false, options);
    }
    out << make_subcommands(app, mode);
    const CLI::App* verb = verb_of(app);
    if (const VerbText* text = verb == app ? find_verb_text(app->get_name()) : nullptr) {
      std::size_t shown = std::min<std::size_t>(2, text->examples.size());
      if (shown > 0) out << "\nExamples:\n";
      for (std::size_t i = 0; i < shown; ++i) {
        for (const std::string& line : wrap_words(text->examples[i].explanation, kHelpWidth - 2)) {
          out << "  " << line << "\n";
        }
        std::istringstream lines(text->examples[i].command);
        std::string line;
        while (std::getline(lines, line)) out << "    " << line << "\n";
      }
      out << "\nThe whole page: spendcap help " << app->get_name() << " (man spendcap-"
          << app->get_name() << ")\n";
    }
    if (!app->get_parent()) {
      out << "\nThe manual: spendcap help [VERB] (man spendcap, man spendcap-VERB)\n";
    }
    std::string footer = make_footer(app);
    if (!footer.empty()) out << (footer.front() == '\n' ? "" : "\n") << footer;
    return out.str();
  }
};

void set_format(CLI::App& app, const std::shared_ptr<HelpFormatter>& formatter) {
  app.formatter(formatter);
  for (CLI::App* sub : app.get_subcommands({})) set_format(*sub, formatter);
}

OptionDoc document(const CLI::Option& option) {
  OptionDoc doc;
  doc.positional = !option.nonpositional();
  if (doc.positional) {
    doc.names.push_back(option.get_name(true, false));
  } else {
    for (const std::string& name : option.get_lnames()) doc.names.push_back("--" + name);
    for (const std::string& name : option.get_snames()) doc.names.push_back("-" + name);
  }
  if (option.get_type_size() != 0 && option.get_items_expected_max() > 0) {
    doc.value = option.get_type_name();
  }
  doc.description = option.get_description();
  doc.required = option.get_required();
  doc.repeatable = option.get_expected_max() >= CLI::detail::expected_max_vector_size;
  return doc;
}

CommandDoc document_at(const CLI::App& app, const std::string& path) {
  CommandDoc doc;
  doc.path = path;
  doc.summary = app.get_description();
  for (const CLI::Option* option : app.get_options()) {
    if (option == app.get_help_ptr() || option == app.get_help_all_ptr()) continue;
    if (option->get_name() == "--version") continue;
    doc.options.push_back(document(*option));
  }
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
    doc.subcommands.push_back(
        document_at(*sub, path.empty() ? sub->get_name() : path + " " + sub->get_name()));
  }
  return doc;
}

ManPage page_for(const CommandDoc& root, const std::optional<std::string>& name) {
  if (!name || *name == "spendcap") return overview_page(root);
  if (*name == kPolicyFilePage) return policy_file_page();
  return verb_page(root, *name);
}

void list_options(const CommandDoc& command, std::ostream& out) {
  for (const OptionDoc& option : command.options) {
    if (option.positional) continue;
    out << command.path;
    for (const std::string& name : option.names) out << "\t" << name;
    out << "\n";
  }
  for (const CommandDoc& sub : command.subcommands) list_options(sub, out);
}

}  // namespace

namespace {

VerbRun add_help(CLI::App& command, CLI::App& root, VerbContext&) {
  auto request = std::make_shared<HelpRequest>();
  CLI::App* help = &command;
  help->add_option("page", request->page,
                   "a verb, or policy-file for the policy's format (default: the overview)");
  help->add_flag("--man", request->man, "print the page as roff for man(1)");
  help->add_flag("--options", request->options,
                 "list the options the parser accepts for the page's verb, one a line");
  help->add_option("--man-dir", request->man_dir, "write every page into this directory")
      ->type_name("DIR");
  help->add_flag("--completion", request->completion,
                 "print the bash completion script (written from this parser's verbs and flags)");
  return [request, &root] { return help_command(root, *request); };
}

}  // namespace

const Verb kHelpVerb = {"help", "the manual: a page per verb, as text or for man(1)", add_help};

CommandDoc document(const CLI::App& app) {
  return document_at(app, "");
}

void install_help_format(CLI::App& app) {
  set_format(app, std::make_shared<HelpFormatter>());
  for (CLI::App* run :
       app.get_subcommands([](const CLI::App* sub) { return sub->get_name() == "run"; })) {
    // One pass over the options with a table of names: a look-up by name per listed option
    // (get_option_no_throw compares every option's names, copying strings) cost every run about
    // 0.4M instructions (callgrind), 3% of `spendcap run -- true`.
    std::unordered_map<std::string_view, const std::string*> titles;
    for (const OptionGroup& group : run_option_groups()) {
      for (const std::string& name : group.options) titles[name] = &group.title;
    }
    for (CLI::Option* option : run->get_options({})) {
      const std::string* title = nullptr;
      for (const std::string& name : option->get_lnames()) {
        auto found = titles.find("--" + name);
        if (found != titles.end()) title = found->second;
      }
      if (title) {
        option->group(*title);
      } else if (option->get_group() == "Options" && option != run->get_help_ptr()) {
        option->group("Other");
      }
    }
  }
}

int help_command(const CLI::App& app, const HelpRequest& request) {
  CommandDoc root = document(app);
  if (request.completion) {
    std::cout << bash_completion(root);
    return 0;
  }
  if (request.man_dir) {
    for (const ManPage& page : all_pages(root)) {
      std::string path = *request.man_dir + "/" + man_file_name(page);
      std::ofstream file(path);
      file << render_roff(page);
      file.close();
      if (!file) throw Error(path, "cannot be written", "check that the directory exists");
    }
    return 0;
  }
  if (request.options) {
    if (!request.page || *request.page == "spendcap" || *request.page == kPolicyFilePage) {
      throw Error("help --options", "needs a verb", "e.g. spendcap help --options run");
    }
    page_for(root, request.page);  // an unknown verb is refused as it is for its page
    for (const CommandDoc& verb : root.subcommands) {
      if (verb.path == *request.page) list_options(verb, std::cout);
    }
    return 0;
  }
  ManPage page = page_for(root, request.page);
  std::cout << (request.man ? render_roff(page) : render_text(page, kHelpWidth));
  return 0;
}

}  // namespace spendcap
