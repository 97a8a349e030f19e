#include "spendcap/policy.hpp"

#include <csignal>
#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>

#include <nlohmann/json.hpp>

namespace spendcap {

// ---- names of the policy's enums (shared by the CLI, the ledger and the policy parser) ----

std::string to_string(Pricing pricing) {
  switch (pricing) {
    case Pricing::on_demand: return "on_demand";
    case Pricing::spot: return "spot";
    case Pricing::reserved: return "reserved";
  }
  return "?";
}

std::string to_string(Billing billing) {
  return billing == Billing::allocated ? "allocated" : "measured";
}

std::string to_string(Mode mode) { return mode == Mode::enforce ? "enforce" : "warn"; }

std::string to_string(Period period) {
  switch (period) {
    case Period::day: return "day";
    case Period::week: return "week";
    case Period::month: return "month";
    case Period::total: return "total";
  }
  return "?";
}

std::string to_string(ScopeKind kind) {
  switch (kind) {
    case ScopeKind::team: return "team";
    case ScopeKind::experiment: return "experiment";
    case ScopeKind::project: return "project";
    case ScopeKind::user: return "user";
    case ScopeKind::job: return "job";
    case ScopeKind::run: return "run";
  }
  return "?";
}

std::optional<Pricing> parse_pricing(std::string_view text) {
  if (text == "on_demand" || text == "on-demand") return Pricing::on_demand;
  if (text == "spot") return Pricing::spot;
  if (text == "reserved") return Pricing::reserved;
  return std::nullopt;
}

std::optional<Mode> parse_mode(std::string_view text) {
  if (text == "enforce") return Mode::enforce;
  if (text == "warn") return Mode::warn;
  return std::nullopt;
}

std::optional<Period> parse_period(std::string_view text) {
  for (Period period : {Period::day, Period::week, Period::month, Period::total}) {
    if (text == to_string(period)) return period;
  }
  return std::nullopt;
}

std::optional<ScopeKind> parse_scope_kind(std::string_view text) {
  for (ScopeKind kind : {ScopeKind::team, ScopeKind::experiment, ScopeKind::project,
                         ScopeKind::user, ScopeKind::job, ScopeKind::run}) {
    if (text == to_string(kind)) return kind;
  }
  return std::nullopt;
}

namespace {
struct SignalNameEntry {
  const char* name;
  int number;
};
constexpr SignalNameEntry kSignalNames[] = {
    {"HUP", SIGHUP},   {"INT", SIGINT},   {"QUIT", SIGQUIT}, {"ILL", SIGILL},
    {"TRAP", SIGTRAP}, {"ABRT", SIGABRT}, {"BUS", SIGBUS},   {"FPE", SIGFPE},
    {"KILL", SIGKILL}, {"USR1", SIGUSR1}, {"SEGV", SIGSEGV}, {"USR2", SIGUSR2},
    {"PIPE", SIGPIPE}, {"ALRM", SIGALRM}, {"TERM", SIGTERM}, {"CHLD", SIGCHLD},
    {"CONT", SIGCONT}, {"STOP", SIGSTOP}, {"TSTP", SIGTSTP}, {"TTIN", SIGTTIN},
    {"TTOU", SIGTTOU}, {"URG", SIGURG},   {"XCPU", SIGXCPU}, {"XFSZ", SIGXFSZ},
    {"VTALRM", SIGVTALRM}, {"PROF", SIGPROF}, {"WINCH", SIGWINCH}, {"IO", SIGIO},
    {"PWR", SIGPWR},   {"SYS", SIGSYS},
};
}  // namespace

std::optional<int> parse_signal(std::string_view text) {
  if (text == "none" || text == "0") return 0;
  if (!text.empty() && std::all_of(text.begin(), text.end(), ::isdigit)) {
    int number = std::atoi(std::string(text).c_str());
    if (number > 0 && number < NSIG) return number;
    return std::nullopt;
  }
  std::string upper;
  for (char c : text) upper += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  std::string_view name = upper;
  if (name.substr(0, 3) == "SIG") name.remove_prefix(3);
  for (const auto& entry : kSignalNames) {
    if (name == entry.name) return entry.number;
  }
  if (name.substr(0, 5) == "RTMIN") {
    int offset = name.size() > 5 ? std::atoi(std::string(name.substr(5)).c_str()) : 0;
    if (SIGRTMIN + offset <= SIGRTMAX && offset >= 0) return SIGRTMIN + offset;
  }
  return std::nullopt;
}

std::string signal_name(int signal) {
  if (signal == 0) return "none";
  for (const auto& entry : kSignalNames) {
    if (entry.number == signal) return std::string("SIG") + entry.name;
  }
  if (signal >= SIGRTMIN && signal <= SIGRTMAX) {
    return "SIGRTMIN+" + std::to_string(signal - SIGRTMIN);
  }
  return "signal " + std::to_string(signal);
}

// ---- the policy document (validation and conversion) ----

}  // namespace spendcap
