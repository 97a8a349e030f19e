// The bash completion from the command tree (completion.hpp).
#include "spendcap/cli/completion.hpp"

#include <string_view>

namespace spendcap {

namespace {

// What the value of these options completes to: a compgen action (-f files, -d directories, -v
// variables) or -W and its words.
struct ValueCompletion {
  const char* options;  // a bash case pattern: "--policy|--ledger"
  const char* compgen;
};

constexpr ValueCompletion kValues[] = {
    {"--policy|--status-file|--ledger|--log", "-f"},
    {"--metrics-dir|--checkpoint-dir|--man-dir", "-d"},
    {"--billing", "-W \"allocated measured\""},
    {"--mode", "-W \"enforce warn\""},
    {"--pricing", "-W \"on-demand spot reserved\""},
    {"--isolation", "-W \"pid none\""},
    {"--spot-notice", "-W \"aws gcp http://\""},
    {"--checkpoint-signal", "-W \"SIGUSR1 SIGUSR2 SIGINT SIGTERM none\""},
    {"--forward", "-W \"SIGUSR1 SIGUSR2 SIGHUP SIGINT SIGCONT SIGWINCH\""},
    {"--webhook-env", "-v"},
    {"--format", "-W \"table csv json focus html\""},
    {"--status", "-W \"running succeeded failed killed refused lost preempted\""},
    {"--by", "-W \"team experiment project user host day tag:\""},
    {"--metric-goal", "-W \"max min\""},
};

constexpr std::string_view kPreamble =
    R"(# bash completion for spendcap(1): subcommands, and the flags of each. Installed as
# share/bash-completion/completions/spendcap. After `--`, `spendcap run` completes the command.
# Written by `spendcap help --completion` from the parser's own tree (cli/completion.hpp): do not
# edit; tests/integration/test_packaging.py checks that this file is that text.
_spendcap() {
  local cur prev words cword
  cur=${COMP_WORDS[COMP_CWORD]}
  prev=${COMP_WORDS[COMP_CWORD-1]}
  words=("${COMP_WORDS[@]}")
  cword=$COMP_CWORD

  local subcommand="" sub2="" i
  for ((i = 1; i < cword; i++)); do
    case ${words[i]} in
      --) # the command being wrapped: complete it as a command of its own
        if [[ $subcommand == run ]]; then
          if ((cword == i + 1)); then
            mapfile -t COMPREPLY < <(compgen -c -- "$cur")
          else
            mapfile -t COMPREPLY < <(compgen -f -- "$cur")
          fi
          return 0
        fi ;;
      -*) ;;
      *) if [[ -z $subcommand ]]; then subcommand=${words[i]}; elif [[ -z $sub2 ]]; then sub2=${words[i]}; fi ;;
    esac
  done

  case $prev in
)";

constexpr std::string_view kFiles = "mapfile -t COMPREPLY < <(compgen -f -- \"$cur\"); return 0";

std::string last_word(const std::string& path) {
  return path.substr(path.rfind(' ') + 1);
}

// The words a command offers: its verbs, its flags, --help; `extra` after them.
std::string words_of(const CommandDoc& command, const std::string& extra = "") {
  std::string words;
  auto add = [&words](const std::string& word) { words += (words.empty() ? "" : " ") + word; };
  for (const CommandDoc& sub : command.subcommands) add(last_word(sub.path));
  for (const OptionDoc& option : command.options) {
    if (option.positional) continue;
    for (const std::string& name : option.names) {
      if (name.starts_with("--")) add(name);
    }
  }
  add("--help");
  if (!extra.empty()) add(extra);
  return words;
}

bool takes_files(const CommandDoc& command) {
  for (const OptionDoc& option : command.options) {
    if (option.positional && (option.value == "FILE" || option.value == "LEDGER")) return true;
  }
  return false;
}

// One command's branch: files where it takes files (after its flags while a word starts with
// `-`), else its words.
std::string branch_of(const CommandDoc& command, const std::string& extra = "") {
  std::string words = "options=\"" + words_of(command, extra) + "\"";
  if (!takes_files(command)) return words;
  return words + "; [[ $cur != -* ]] && { " + std::string(kFiles) + "; }";
}

}  // namespace

std::string bash_completion(const CommandDoc& root) {
  std::string out(kPreamble);
  for (const ValueCompletion& value : kValues) {
    out += "    " + std::string(value.options) + ") mapfile -t COMPREPLY < <(compgen " +
           value.compgen + " -- \"$cur\"); return 0 ;;\n";
  }
  out += "  esac\n\n  local options\n  case $subcommand in\n";
  out += "    \"\") options=\"" + words_of(root, "--version") + "\" ;;\n";
  for (const CommandDoc& verb : root.subcommands) {
    std::string name = last_word(verb.path);
    std::string extra;
    if (name == "run") extra = "--";
    if (name == "help") {
      for (const CommandDoc& page : root.subcommands) extra += last_word(page.path) + " ";
      extra += std::string(kPolicyFilePage);
    }
    if (verb.subcommands.empty()) {
      out += "    " + name + ") " + branch_of(verb, extra) + " ;;\n";
      continue;
    }
    out += "    " + name + ") case $sub2 in\n";
    for (const CommandDoc& sub : verb.subcommands) {
      out += "        " + last_word(sub.path) + ") " + branch_of(sub) + " ;;\n";
    }
    out += "        *) " + branch_of(verb, extra) + " ;;\n      esac ;;\n";
  }
  out += "    *) options=\"\" ;;\n  esac\n";
  out += "  mapfile -t COMPREPLY < <(compgen -W \"$options\" -- \"$cur\")\n}\n";
  out += "complete -F _spendcap spendcap\n";
  return out;
}

}  // namespace spendcap
