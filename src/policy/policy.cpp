#include "spendcap/policy/policy.hpp"
#include "spendcap/base/text.hpp"

#include "reader.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <set>

#include <nlohmann/json.hpp>

namespace spendcap {

// ---- names of the policy's enums (shared by the CLI, the ledger and the policy parser) ----

std::string to_string(Pricing pricing, PricingSpelling spelling) {
  switch (pricing) {
    case Pricing::on_demand:
      return spelling == PricingSpelling::policy ? "on_demand" : "on-demand";
    case Pricing::spot:
      return "spot";
    case Pricing::reserved:
      return "reserved";
  }
  return "?";
}

std::string to_string(Billing billing) {
  return billing == Billing::allocated ? "allocated" : "measured";
}

std::string to_string(Mode mode) {
  return mode == Mode::enforce ? "enforce" : "warn";
}

std::string to_string(Period period) {
  switch (period) {
    case Period::day:
      return "day";
    case Period::week:
      return "week";
    case Period::month:
      return "month";
    case Period::total:
      return "total";
  }
  return "?";
}

std::string to_string(ScopeKind kind) {
  switch (kind) {
    case ScopeKind::team:
      return "team";
    case ScopeKind::experiment:
      return "experiment";
    case ScopeKind::project:
      return "project";
    case ScopeKind::user:
      return "user";
    case ScopeKind::job:
      return "job";
    case ScopeKind::run:
      return "run";
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

std::string to_string(Isolation isolation) {
  return isolation == Isolation::pid ? "pid" : "none";
}

std::optional<Isolation> parse_isolation(std::string_view text) {
  if (text == "pid") return Isolation::pid;
  if (text == "none") return Isolation::none;
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
    {"HUP", SIGHUP},       {"INT", SIGINT},   {"QUIT", SIGQUIT},   {"ILL", SIGILL},
    {"TRAP", SIGTRAP},     {"ABRT", SIGABRT}, {"BUS", SIGBUS},     {"FPE", SIGFPE},
    {"KILL", SIGKILL},     {"USR1", SIGUSR1}, {"SEGV", SIGSEGV},   {"USR2", SIGUSR2},
    {"PIPE", SIGPIPE},     {"ALRM", SIGALRM}, {"TERM", SIGTERM},   {"CHLD", SIGCHLD},
    {"CONT", SIGCONT},     {"STOP", SIGSTOP}, {"TSTP", SIGTSTP},   {"TTIN", SIGTTIN},
    {"TTOU", SIGTTOU},     {"URG", SIGURG},   {"XCPU", SIGXCPU},   {"XFSZ", SIGXFSZ},
    {"VTALRM", SIGVTALRM}, {"PROF", SIGPROF}, {"WINCH", SIGWINCH}, {"IO", SIGIO},
    {"PWR", SIGPWR},       {"SYS", SIGSYS},
};
}  // namespace

// "none", a number written plainly ("10", not "010"), or a name in upper or lower case with or
// without "SIG" ("SIGUSR1", "usr1", "SIGRTMIN+2"), never mixed case or "RTMIN2abc".
bool ignored_by_default(int signal) {
  return signal == SIGCHLD || signal == SIGWINCH || signal == SIGURG || signal == SIGCONT;
}

std::optional<int> parse_signal(std::string_view text) {
  if (text == "none" || text == "0") return 0;
  if (text.empty()) return std::nullopt;
  if (std::all_of(text.begin(), text.end(), ::isdigit)) {
    if (text.size() > 2 || text[0] == '0') return std::nullopt;
    int number = std::atoi(std::string(text).c_str());
    return number > 0 && number < NSIG ? std::optional<int>(number) : std::nullopt;
  }
  std::string upper, lower;
  for (char c : text) {
    upper += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  if (text != upper && text != lower) return std::nullopt;
  std::string_view name = upper;
  if (name.substr(0, 3) == "SIG") name.remove_prefix(3);
  for (const auto& entry : kSignalNames) {
    if (name == entry.name) return entry.number;
  }
  if (name == "RTMIN") return SIGRTMIN;
  if (name.substr(0, 6) == "RTMIN+" && name.size() > 6 && name.size() <= 8 &&
      std::all_of(name.begin() + 6, name.end(), ::isdigit)) {
    int offset = std::atoi(std::string(name.substr(6)).c_str());
    if (SIGRTMIN + offset <= SIGRTMAX) return SIGRTMIN + offset;
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
//
// One pass reads a document into a Policy and collects every error on the way, so the validator and
// the converter cannot disagree: validate_policy runs the pass and keeps the errors, parse_policy
// keeps the Policy when there are none. Every JSON object is read through its rows in the key
// table (keys.cpp, read by reader.hpp's schema_for); a key that has no row is an unknown key.

std::optional<Money> PriceSheet::price(Pricing pricing) const {
  switch (pricing) {
    case Pricing::on_demand:
      return on_demand;
    case Pricing::spot:
      return spot;
    case Pricing::reserved:
      return reserved;
  }
  return std::nullopt;
}

PolicyError::PolicyError(std::string source, std::vector<std::string> errors)
    : Error(std::move(source),
            "invalid policy (" + std::to_string(errors.size()) +
                (errors.size() == 1 ? " error)" : " errors)"),
            "run `spendcap policy check FILE`", ExitCode::internal),
      errors_(std::move(errors)) {
  details = errors_;
}

namespace {

using namespace policy_reader;

// defaults.gpu and defaults.instance name a priced type, priced at defaults.pricing.
struct TypeReference {
  const char* key;  // in defaults
  std::optional<std::string> Defaults::*type;
  std::map<std::string, PriceSheet> Policy::*rates;
  const char* what;
  const char* rates_path;
};
constexpr TypeReference kTypeReferences[] = {
    {"gpu", &Defaults::gpu, &Policy::gpu_rates, "GPU type", "rates.gpu"},
    {"instance", &Defaults::instance, &Policy::instance_rates, "instance type", "rates.instance"},
};

void check_type_references(Reader& reader, const json&, const Pointer& at, const Policy& policy) {
  for (const TypeReference& reference : kTypeReferences) {
    const std::optional<std::string>& type = policy.defaults.*reference.type;
    if (!type) continue;
    const auto& rates = policy.*reference.rates;
    Pointer path = at / "defaults" / reference.key;
    auto sheet = rates.find(*type);
    if (sheet == rates.end()) {
      std::vector<std::string> names;
      for (const auto& [name, _] : rates) names.push_back(name);
      reader.fail(path, std::string("unknown ") + reference.what + " " + in_quotes(*type) + " (" +
                            reference.rates_path +
                            " has: " + (names.empty() ? "nothing" : join(names, ", ")) + ")");
    } else if (!sheet->second.price(policy.defaults.pricing)) {
      reader.fail(path, in_quotes(*type) + " has no " + to_string(policy.defaults.pricing) +
                            " price in " + reference.rates_path + " (defaults.pricing is " +
                            to_string(policy.defaults.pricing) + ")");
    }
  }
}

std::vector<std::string> read_document(const json& document, bool whole_document, Policy& policy) {
  Reader reader(whole_document);
  read_object(reader, document, Pointer(), policy,
              schema_for<Policy>("", CheckWhole<Policy>(check_type_references)));
  return reader.take_errors();
}

// nlohmann keeps the last of two equal keys without a word, so a second "amount" would silently
// replace the first: duplicates are errors, found while parsing (the only time they can be seen).
class DuplicateKeys {
 public:
  bool see(json::parse_event_t event, const json& parsed) {
    using Event = json::parse_event_t;
    switch (event) {
      case Event::object_start:
        frames_.push_back({false});
        break;
      case Event::array_start:
        frames_.push_back({true});
        break;
      case Event::key:
        frames_.back().key = parsed.get<std::string>();
        if (!frames_.back().seen.insert(frames_.back().key).second) {
          errors.push_back(path_text(here()) + ": duplicate key (only the last one would count)");
        }
        break;
      case Event::object_end:
      case Event::array_end:
        frames_.pop_back();
        element_done();
        break;
      case Event::value:
        element_done();
        break;
    }
    return true;  // keep everything: this only watches
  }
  std::vector<std::string> errors;

  // Where the parser is: the path of the value it reads now.
  Pointer here() const {
    Pointer at;
    for (const Frame& frame : frames_) at = frame.is_array ? at / frame.index : at / frame.key;
    return at;
  }

 private:
  struct Frame {
    bool is_array;
    std::size_t index = 0;
    std::string key;
    std::set<std::string> seen;
  };
  void element_done() {
    if (!frames_.empty() && frames_.back().is_array) ++frames_.back().index;
  }
  std::vector<Frame> frames_;
};

// A policy is a few kilobytes; the bound keeps `--policy /dev/zero` from eating memory.
constexpr std::size_t kMaxPolicyBytes = 16 << 20;

std::string file_kind(mode_t mode) {
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a plain file";
}

std::string read_whole_file(const std::string& path) {
  // O_NONBLOCK: opening a FIFO for reading blocks until a writer comes, and run reads the policy
  // with its stop signals blocked, so `--policy FIFO` hung for good. Only regular files are read.
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) throw Error(path, errno_text(errno));
  struct stat st {};
  // A directory goes on to read(), which says EISDIR.
  if (::fstat(fd, &st) != 0 || !(S_ISREG(st.st_mode) || S_ISDIR(st.st_mode))) {
    int err = errno;
    ::close(fd);
    if (st.st_mode != 0) {
      throw Error(path, "is " + file_kind(st.st_mode) + ", not a regular file",
                  "give a policy file");
    }
    throw Error(path, errno_text(err));
  }
  std::string text;
  char buffer[65536];
  while (true) {
    ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      ::close(fd);
      throw Error(path, errno_text(err));  // EISDIR for a directory
    }
    if (n == 0) break;
    text.append(buffer, static_cast<std::size_t>(n));
    if (text.size() > kMaxPolicyBytes) {
      ::close(fd);
      throw Error(path, "larger than 16 MiB: not a policy file");
    }
  }
  ::close(fd);
  return text;
}

// "line 3, column 5: syntax error while parsing object ..." from nlohmann's
// "[json.exception.parse_error.101] parse error at line 3, column 5: syntax error ...".
std::string parse_error_text(const json::parse_error& error) {
  std::string message = error.what();
  std::size_t line = message.find("line ");
  if (line != std::string::npos) return message.substr(line);
  return "byte " + std::to_string(error.byte) + ": " + message;
}

}  // namespace

std::vector<std::string> validate_policy(const nlohmann::json& document) {
  Policy ignored;
  return read_document(document, /*whole_document=*/true, ignored);
}

std::vector<std::string> validate_policy_layer(const nlohmann::json& document) {
  Policy ignored;
  return read_document(document, /*whole_document=*/false, ignored);
}

Policy parse_policy(const nlohmann::json& document, const std::string& source) {
  Policy policy;
  std::vector<std::string> errors = read_document(document, /*whole_document=*/true, policy);
  if (!errors.empty()) throw PolicyError(source, std::move(errors));
  return policy;
}

nlohmann::json read_policy_file(const std::string& path) {
  std::string text = read_whole_file(path);
  DuplicateKeys duplicates;
  json document;
  try {
    document = json::parse(text, [&duplicates](int, json::parse_event_t event, json& parsed) {
      return duplicates.see(event, parsed);
    });
  } catch (const json::parse_error& error) {
    // JSON has no comments: a file that would parse without them gets the way to write one.
    if (json::accept(text, /*ignore_comments=*/true)) {
      throw PolicyError(path, {parse_error_text(error) +
                               " (comments are not allowed in JSON: use \"description\")"});
    }
    throw PolicyError(path, {parse_error_text(error)});
  } catch (const json::out_of_range& error) {
    // 1e999: a number no double holds (nlohmann's error 406), reported where it stands.
    std::string message = error.what();
    std::size_t bracket = message.find("] ");
    if (bracket != std::string::npos) message = message.substr(bracket + 2);
    throw PolicyError(path, {path_text(duplicates.here()) + ": " + message +
                             " (out of range of a JSON number spendcap can read)"});
  }
  if (!duplicates.errors.empty()) {
    // A duplicate does not hide the file's other errors: they are all said at once (checked as a
    // layer: what the layers below may supply is not asked of it).
    std::vector<std::string> errors = std::move(duplicates.errors);
    for (std::string& error : validate_policy_layer(document)) errors.push_back(std::move(error));
    throw PolicyError(path, std::move(errors));
  }
  return document;
}

}  // namespace spendcap
