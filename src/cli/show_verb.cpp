// `show`: one run (admin.hpp).
#include "admin_parts.hpp"

#include <CLI/CLI.hpp>
#include <memory>

#include "spendcap/cli/admin.hpp"
#include "spendcap/cli/command_tree.hpp"
#include "spendcap/cli/verbs.hpp"

#include <sys/time.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>

#include "spendcap/base/json_numbers.hpp"
#include "spendcap/base/json_text.hpp"
#include "spendcap/base/text.hpp"
#include "spendcap/cli/runs.hpp"
#include "spendcap/ledger/backends.hpp"
#include "spendcap/ledger/spool.hpp"
#include "spendcap/notify/runner_files.hpp"
#include "spendcap/policy/keys.hpp"
#include "spendcap/policy/layers.hpp"
#include "spendcap/run/ledger_group.hpp"
#include "spendcap/run/lost_runs.hpp"
#include "spendcap/run/membership.hpp"
#include "spendcap/supervise/run_env.hpp"

namespace spendcap {

using namespace admin_parts;  // NOLINT: the shared helpers of the admin verbs

namespace {

// ▁▂▃▄▅▆▇█ for 0..1 of `top`; a minute not measured is a space.
std::string sparkline(const std::vector<std::optional<double>>& values, double top) {
  static const char* const kBars[] = {"▁", "▂", "▃", "▄", "▅", "▆", "▇", "█"};
  std::string line;
  for (const auto& value : values) {
    if (!value || top <= 0) {
      line += " ";
      continue;
    }
    int level = static_cast<int>(std::lround(std::clamp(*value / top, 0.0, 1.0) * 7));
    line += kBars[level];
  }
  return line;
}

std::string fixed_text(double value, int digits) {
  char text[64];
  std::snprintf(text, sizeof text, "%.*f", digits, value);
  return text;
}

}  // namespace

namespace {

nlohmann::json optional_json(const auto& value) {
  return value ? nlohmann::json(*value) : nlohmann::json();
}
nlohmann::json optional_money_json(const std::optional<Money>& value) {
  return value ? nlohmann::json(money_to_json(*value)) : nlohmann::json();
}
nlohmann::json text_or_null(const std::string& text) {
  return text.empty() ? nlohmann::json() : nlohmann::json(text);
}

double run_duration(const RunView& run, double now) {
  return std::max(0.0, run.finished_at.value_or(now) - run.started_at);
}

// The command as one line: a word with spaces, quotes or shell operators in single quotes (glob
// characters are left as they are: "***" is the redaction's mark, command_redaction.hpp).
std::string command_text(const std::vector<std::string>& argv) {
  std::string text;
  for (const std::string& word : argv) {
    bool plain =
        !word.empty() && word.find_first_of(" \t\n'\"\\$`(){}<>|&;#!") == std::string::npos;
    std::string quoted = word;
    if (!plain) {
      quoted = "'";
      for (char c : word) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
      quoted += "'";
    }
    text += (text.empty() ? "" : " ") + quoted;
  }
  return text;
}

std::string seconds_text(double seconds) {
  return fixed_text(seconds, 1) + "s";
}

// The budget as recorded at admission (or, for a run recorded before, derived from the budgets
// now: said so), and where it came from.
struct ShowBudget {
  std::optional<Money> amount;
  std::string source;  // "" when the run has no budget of its own and nothing was recorded
  bool recorded = false;
};
ShowBudget show_budget(const RunView& run, const std::vector<BudgetRule>& rules) {
  if (!run.budget_source.empty()) {
    return {run.run_budget, run.budget_source == "none" ? "" : run.budget_source, true};
  }
  ShownBudget derived = run_budget_of(run, rules);
  return {derived.amount, derived.source, false};
}

nlohmann::json show_json(const RunView& run, const std::vector<BudgetRule>& rules,
                         const std::string& currency, double now) {
  ShowBudget budget = show_budget(run, rules);
  nlohmann::json gpu = nullptr;
  if (run.gpu) {
    const RunGpu& g = *run.gpu;
    gpu = {{"measured", g.not_measured.empty()},
           {"not_measured", text_or_null(g.not_measured)},
           {"devices", g.devices},
           {"allocated_gpu_seconds", g.allocated_seconds},
           {"busy_gpu_seconds", optional_json(g.busy_seconds)},
           {"mean_utilisation", optional_json(g.mean_utilisation())},
           {"idle_spend", optional_money_json(g.idle_spend)},
           {"energy_kwh", optional_json(g.energy_kwh)},
           {"co2_kg", optional_json(g.co2_kg)},
           {"energy_cost_usd", optional_money_json(g.energy_cost)},
           {"sources", text_or_null(g.sources)}};
  }
  nlohmann::json progress = nullptr;
  if (run.last_progress) {
    progress = {{"step", optional_json(run.last_progress->step)},
                {"total_steps", optional_json(run.last_progress->total_steps)},
                {"line", run.last_progress->line}};
  }
  nlohmann::json metric = nullptr;
  if (run.metric_name) {
    metric = {{"name", *run.metric_name}, {"value", optional_json(run.metric_value)}};
  }
  nlohmann::json checkpoint = nullptr;
  if (run.checkpoint) {
    const RunCheckpoint& c = *run.checkpoint;
    checkpoint = {{"signal", c.signal == "none" ? nlohmann::json() : nlohmann::json(c.signal)},
                  {"signalled_processes", c.signalled},
                  {"signalled_after_seconds", std::round(c.signal_seconds * 1000) / 1000},
                  {"written", c.written_seconds.has_value()},
                  {"written_after_seconds",
                   c.written_seconds ? nlohmann::json(std::round(*c.written_seconds * 1000) / 1000)
                                     : nlohmann::json()}};
  }
  return {{"id", run.id},
          {"status", to_string(run.status)},
          {"reason", run.reason},
          {"user", run.user},
          {"uid", optional_json(run.uid)},
          {"team", run.team},
          {"experiment", run.experiment},
          {"project", run.project},
          {"job_key", text_or_null(run.job_key)},
          {"tags", run.tags},
          {"command", run.command.empty() ? nlohmann::json() : nlohmann::json(run.command)},
          {"working_directory", text_or_null(run.cwd)},
          {"host", run.host},
          {"pid", run.pid},
          {"mode", to_string(run.mode)},
          {"started_at", iso_time(run.started_at)},
          {"finished_at",
           run.finished_at ? nlohmann::json(iso_time(*run.finished_at)) : nlohmann::json()},
          {"duration_seconds", std::round(run_duration(run, now) * 1000) / 1000},
          {"exit_code", optional_json(spendcap_exit_of(run))},
          {"command_exit_code", optional_json(run.exit_code)},
          {"currency", currency},
          {"spend", money_to_json(run.spend)},
          {"rate_per_hour", money_to_json(run.rate_per_hour)},
          {"pricing", run.pricing ? nlohmann::json(to_string(*run.pricing)) : nlohmann::json()},
          {"budget", optional_money_json(budget.amount)},
          {"budget_source", text_or_null(budget.source)},
          {"budget_recorded", budget.recorded},
          {"ceiling", money_to_json(run.ceiling)},
          {"overrun", run.overrun},
          {"progress", progress},
          {"metric", metric},
          {"checkpoint", checkpoint},
          {"gpu", gpu}};
}

// show's lines: "  label:      value", the value wrapped under itself so that no line is wider
// than kShowColumns (a command or a directory can be long).
constexpr std::size_t kShowColumns = 100;
constexpr std::size_t kShowLabel = 15;  // "  " + the label and its padding

std::size_t columns_of(std::string_view text) {
  std::size_t count = 0;
  for (char c : text) count += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return count;
}

// `text` cut into pieces of at most `width` columns, at a space where there is one.
std::vector<std::string> wrap(const std::string& text, std::size_t width) {
  std::vector<std::string> lines;
  std::string_view rest = text;
  while (columns_of(rest) > width) {
    std::size_t cut = 0, columns = 0;
    while (cut < rest.size() && columns < width) {
      ++cut;
      while (cut < rest.size() && (static_cast<unsigned char>(rest[cut]) & 0xC0) == 0x80) ++cut;
      ++columns;
    }
    std::size_t space = rest.substr(0, cut + 1).rfind(' ');
    if (space != std::string_view::npos && space > 0) cut = space;
    lines.emplace_back(rest.substr(0, cut));
    rest.remove_prefix(cut);
    while (!rest.empty() && rest.front() == ' ') rest.remove_prefix(1);
  }
  if (!rest.empty() || lines.empty()) lines.emplace_back(rest);
  return lines;
}

void print_field(const std::string& name, const std::string& value) {
  std::string padded = "  " + name + ":";
  padded.resize(std::max<std::size_t>(padded.size() + 1, kShowLabel), ' ');
  std::vector<std::string> lines = wrap(escape_for_terminal(value), kShowColumns - padded.size());
  for (std::size_t i = 0; i < lines.size(); ++i) {
    std::cout << (i ? std::string(padded.size(), ' ') : padded) << lines[i] << "\n";
  }
}

// The signal the command died of where spendcap did not send it (a hangup reaches the job too):
// 128+N for a signal N other than the checkpoint signal, SIGTERM and SIGKILL; "" otherwise.
std::string died_of_another_signal(const RunCheckpoint& c, std::optional<int> command_exit) {
  if (!command_exit || *command_exit <= 128 || *command_exit >= 128 + 65) return "";
  std::string died_of = signal_name(*command_exit - 128);
  if (died_of == c.signal || died_of == "SIGTERM" || died_of == "SIGKILL") return "";
  return died_of;
}

std::string checkpoint_text(const std::optional<RunCheckpoint>& checkpoint, bool running,
                            std::optional<int> command_exit) {
  if (!checkpoint) {
    return running ? "-" : "- (no checkpoint signal: spendcap did not stop the run)";
  }
  const RunCheckpoint& c = *checkpoint;
  std::string at = " after " + seconds_text(c.signal_seconds);
  // What happened, not what the kill path found left (issue 40: after a hangup the job had died
  // of SIGHUP, and "SIGUSR1 caught by no process" blamed the job's handler).
  if (std::string died_of = died_of_another_signal(c, command_exit); !died_of.empty()) {
    std::string text =
        "the job died of " + died_of + " (command's exit " + std::to_string(*command_exit) + ")";
    if (c.signal == "none") return text + "; the run has no checkpoint signal";
    text += ", not by spendcap's stop (" + c.signal + at + ")";
    return text + (c.written_seconds ? "; checkpoint written" : "; no checkpoint written");
  }
  if (c.signal == "none") return "none sent (the run has no checkpoint signal); stopped" + at;
  if (c.signalled == 0) return c.signal + " caught by no process: grace skipped; stopped" + at;
  std::string text = c.signal + " sent to " + std::to_string(c.signalled) +
                     (c.signalled == 1 ? " process" : " processes") + at;
  if (c.written_seconds) {
    return text + "; checkpoint written " +
           seconds_text(std::max(0.0, *c.written_seconds - c.signal_seconds)) + " later";
  }
  return text + "; no checkpoint written in the grace";
}

}  // namespace

int show_command(const LedgerChoice& choice, const std::string& run_id, bool json) {
  LedgerSession session = open_ledger_session(for_reading(choice));
  std::unique_ptr<Ledger>& ledger = session.ledger;
  const std::string& currency = session.currency;
  // Any unique prefix: the 8 characters `ps`, `runs` and the end line print.
  auto run = ledger->find_run(resolve_run_id(*ledger, run_id, "show " + run_id));
  if (!run) throw Error("show " + run_id, "is not in the ledger " + ledger->url());
  double now = wall_now();
  std::vector<BudgetRule> rules = ledger->budget_rules();
  if (json) {
    std::cout << plain_json_numbers(dump_json(show_json(*run, rules, currency, now), 2)) << "\n";
    return 0;
  }
  const auto& field = print_field;
  auto or_dash = [](const std::string& text) { return text.empty() ? std::string("-") : text; };
  bool running = !run->finished_at;
  std::cout << "run " << run->id << ": " << to_string(run->status)
            << (run->reason.empty() ? "" : " (" + escape_for_terminal(run->reason) + ")") << "\n";
  // Who and what for.
  field("user", or_dash(run->user) + (run->uid ? " (uid " + std::to_string(*run->uid) + ")" : ""));
  field("team", or_dash(run->team));
  field("experiment", or_dash(run->experiment));
  field("project", or_dash(run->project));
  std::string tags;
  for (const auto& [key, value] : run->tags) tags += (tags.empty() ? "" : " ") + key + "=" + value;
  field("tags", or_dash(tags));
  field("job", or_dash(run->job_key));
  // What ran where.
  field("command", run->command.empty() ? "-" : command_text(run->command));
  field("directory", or_dash(run->cwd));
  field("host", run->host + " (pid " + std::to_string(run->pid) + ")");
  // When and how it ended.
  field("started", iso_time(run->started_at));
  field("ended", run->finished_at ? iso_time(*run->finished_at) : "- (still running)");
  field("duration",
        format_duration(std::chrono::milliseconds(std::llround(run_duration(*run, now) * 1000))));
  field("exit code", spendcap_exit_of(*run) ? std::to_string(*spendcap_exit_of(*run)) : "-");
  field("command's exit", run->exit_code ? std::to_string(*run->exit_code) : "-");
  field("stopped by", run->reason.empty() ? "-" : run->reason);
  field("checkpoint", checkpoint_text(run->checkpoint, running, run->exit_code));
  // Money.
  std::string spend = format_money(run->spend, currency) + " at " +
                      format_money(run->rate_per_hour, currency) + "/h" +
                      (run->mode == Mode::warn ? " (warn mode)" : "");
  if (run->overrun)
    spend += " (OVERRUN: above its ceiling " + format_money(run->ceiling, currency) + ")";
  field("spend", spend);
  ShowBudget budget = show_budget(*run, rules);
  std::string from = budget.source.empty() ? ""
                     : budget.recorded     ? " (from " + budget.source + ")"
                                       : " (from " + budget.source + ", as the budgets are now)";
  field("budget", budget.amount ? format_money(*budget.amount, currency) + from
                  : budget.recorded && !budget.source.empty()
                      ? "- (none of its own; held to " + budget.source + ")"
                      : "- (none of its own; team and other budgets still apply)");
  field("pricing", run->pricing ? to_string(*run->pricing) : "- (not recorded)");
  // What the job said.
  std::string progress = "-";
  if (run->last_progress && run->last_progress->step) {
    progress =
        "step " + std::to_string(*run->last_progress->step) +
        (run->last_progress->total_steps ? " of " + std::to_string(*run->last_progress->total_steps)
                                         : "");
  }
  field("progress", progress);
  field("last line", run->last_progress ? or_dash(run->last_progress->line) : "-");
  std::string metric = "-";
  if (run->metric_name) {
    metric =
        *run->metric_name +
        (run->metric_value ? " " + plain_json_numbers(nlohmann::json(*run->metric_value).dump())
                           : "");
  }
  field("metric", metric);
  if (!run->gpu) {
    field("GPU", "- (no record: the run did not finish with GPU measurement)");
    return 0;
  }
  const RunGpu& g = *run->gpu;
  if (!g.not_measured.empty()) {
    field("GPU", "not measured (" + g.not_measured + ")");
    return 0;
  }
  std::string gpu = std::to_string(g.devices) + (g.devices == 1 ? " device, " : " devices, ") +
                    fixed_text(g.allocated_seconds, 1) + " GPU-seconds allocated";
  if (g.busy_seconds) {
    gpu += ", " + fixed_text(*g.busy_seconds, 1) + " busy (" +
           fixed_text(*g.mean_utilisation() * 100, 1) + "% mean utilisation)";
  } else {
    gpu += ", busy time not measured";
  }
  if (g.idle_spend) gpu += ", idle spend " + format_money(*g.idle_spend, currency);
  field("GPU", gpu);
  std::string energy = "not measured";
  if (g.energy_kwh) {
    energy = fixed_text(*g.energy_kwh, 6) + " kWh";
    if (g.co2_kg) energy += ", " + fixed_text(*g.co2_kg, 6) + " kg CO2";
    if (g.energy_cost) energy += ", " + format_money(*g.energy_cost, "USD") + " (not in spend)";
  }
  field("energy", energy);
  field("measured by", or_dash(g.sources));
  if (!g.timeline.empty()) {
    std::vector<std::optional<double>> utilisation, watts;
    double top_watts = 0;
    for (const RunGpuPoint& p : g.timeline) {
      utilisation.push_back(p.utilisation);
      watts.push_back(p.watts);
      if (p.watts) top_watts = std::max(top_watts, *p.watts);
    }
    // Sparklines are printed as they are (escaping would spell out the bars): one bar a minute,
    // the last kShowColumns - kShowLabel minutes.
    auto bars = [](std::string line) {
      std::size_t keep = kShowColumns - kShowLabel;
      std::size_t count = columns_of(line);
      std::size_t at = 0;
      for (std::size_t skipped = 0; count > keep && skipped < count - keep; ++skipped) {
        ++at;
        while (at < line.size() && (static_cast<unsigned char>(line[at]) & 0xC0) == 0x80) ++at;
      }
      return line.substr(at);
    };
    std::cout << "  utilisation per minute (0-100%):\n"
              << std::string(kShowLabel, ' ') << bars(sparkline(utilisation, 1.0)) << "\n";
    if (top_watts > 0) {
      std::cout << "  power per minute (0-" << fixed_text(top_watts, 0) << " W):\n"
                << std::string(kShowLabel, ' ') << bars(sparkline(watts, top_watts)) << "\n";
    }
    // Billing is on the allocated rate: the burn is flat, and its idle part is the gap above.
    field("burn", format_money(run->rate_per_hour, currency) + "/h throughout (allocated billing)");
  }
  return 0;
}

namespace {

struct ShowArgs {
  LedgerChoice choice;
  std::string run;
  bool json = false;
};

VerbRun add_show(CLI::App& command, CLI::App&, VerbContext&) {
  auto args = std::make_shared<ShowArgs>();
  CLI::App* show = &command;
  add_ledger_options(*show, args->choice);
  // Not required here: bare `show` says what it needs (CLI11 would say "run is required").
  show->add_option("run", args->run, "the run's id, or any unique prefix (runs and ps show 8)");
  show->add_flag("--json", args->json, "print JSON");
  return [args] {
    if (args->run.empty()) {
      throw Error("show", "which run? give its id, or any unique prefix of it",
                  "spendcap runs lists the recent runs (the ID column); then "
                  "spendcap show ID");
    }
    return show_command(args->choice, args->run, args->json);
  };
}

}  // namespace

const Verb kShowVerb = {"show", "one run: spend, GPU time, energy, timeline", add_show};

}  // namespace spendcap
