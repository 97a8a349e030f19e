#include "spendcap/run/summary.hpp"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "spendcap/base/files.hpp"
#include "spendcap/base/json_numbers.hpp"
#include "spendcap/base/json_text.hpp"
#include "spendcap/base/signals.hpp"
#include "spendcap/base/text.hpp"
#include "spendcap/supervise/gpu_sampler.hpp"

namespace spendcap {

std::string summary_line(const RunOutcome& outcome) {
  // The ledger's status and reason, as the status file and `spendcap runs` give them: Ctrl-C is
  // "killed (interrupted)" everywhere.
  std::string line = "run " + outcome.run_id.substr(0, 8) + " " + to_string(outcome.status);
  if (outcome.stopped_by_spendcap || outcome.reason == "interrupted") {
    line += " (" + outcome.reason + ")";
  }
  // A multi-node run: the node whose trip stopped them all (issue 23).
  if (!outcome.first_trip.empty()) line += " (first trip: " + outcome.first_trip + ")";
  char elapsed[32];
  std::snprintf(elapsed, sizeof elapsed, "%.2fs", outcome.elapsed_seconds);
  line +=
      " after " + std::string(elapsed) + ": spent " + format_money(outcome.spend, outcome.currency);
  if (outcome.budget) line += " of " + format_money(*outcome.budget, outcome.currency);
  if (outcome.storage_spend && outcome.storage_peak_gb) {
    char peak[64];
    std::snprintf(peak, sizeof peak, "%.3f", *outcome.storage_peak_gb);
    line += " (storage " + format_money(*outcome.storage_spend, outcome.currency) + ", peak " +
            peak + " GB)";
  }
  // Stopped from outside (SIGSTOP, without isolation) past its ceiling: said, never hidden.
  if (outcome.spend > outcome.ceiling && outcome.ceiling > Money{}) {
    line += " (OVERRUN: " + format_money(outcome.spend - outcome.ceiling, outcome.currency) +
            " above its ceiling " + format_money(outcome.ceiling, outcome.currency) + ")";
  }
  line += "; exit " + std::to_string(outcome.exit_code);
  return line;
}

void say_summary(const RunOutcome& outcome, const Admission& admission, const std::string& job_key,
                 const Reporter& reporter) {
  std::string summary = summary_line(outcome);
  if (admission.job_spent_before) {
    // A job key's budget spans its runs: its total is what the user compares with it.
    summary +=
        "; job " + job_key + " total " +
        format_money(*admission.job_spent_before + outcome.spend, outcome.currency) +
        (admission.run_budget ? " of " + format_money(*admission.run_budget, outcome.currency)
                              : std::string());
  }
  reporter.line(summary);
  if (outcome.gpu) {
    // One reporter line per line: the reporter escapes a newline inside a line.
    std::string text = gpu_report_line(*outcome.gpu, outcome.currency);
    for (std::size_t at = 0; at <= text.size();) {
      std::size_t end = std::min(text.find('\n', at), text.size());
      if (end > at) reporter.line(text.substr(at, end - at));
      at = end + 1;
    }
  }
}

void write_status(const std::optional<std::string>& path, const RunOutcome& outcome,
                  const Reporter& reporter) {
  if (!path) return;
  try {
    write_status_file(*path, outcome);
  } catch (const Error& error) {
    reporter.error(format_error(error));
  } catch (const std::exception& error) {
    reporter.error("--status-file " + *path + ": " + error.what());
  }
}

void write_error_status(const std::string& path, const Error& error) {
  RunOutcome outcome;
  outcome.status = RunStatus::failed;
  outcome.exit_code = to_int(error.code());
  switch (error.code()) {
    case ExitCode::not_found:
      outcome.reason = "command-not-found";
      break;
    case ExitCode::not_executable:
      outcome.reason = "command-not-executable";
      break;
    default:
      outcome.reason = "spendcap-error";
  }
  outcome.message = format_error(error);
  nlohmann::json json = to_json(outcome);
  json["run_id"] = nullptr;
  json["currency"] = nullptr;
  json["rate_per_hour"] = nullptr;
  json["elapsed_seconds"] = nullptr;
  try {
    write_file_atomically(path, plain_json_numbers(dump_json(json, 2)) + "\n", 0644,
                          "--status-file " + path);
  } catch (const Error& write_error) {
    std::cerr << "spendcap: " << escape_for_terminal(format_error(write_error)) << "\n";
  }
}

}  // namespace spendcap
