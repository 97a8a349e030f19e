#include "spendcap/policy/policy.hpp"
#include "spendcap/base/text.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <set>

#include <nlohmann/json.hpp>

namespace spendcap {

// ---- names of the policy's enums (shared by the CLI, the ledger and the policy parser) ----

std::string to_string(Pricing pricing) {
  switch (pricing) {
    case Pricing::on_demand:
      return "on_demand";
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
// keeps the Policy when there are none. Every JSON object is read through a table of its fields; a
// key that is not in the table is an unknown key.

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

using json = nlohmann::json;
using Pointer = json::json_pointer;

// The root's pointer is "", which would read as nothing in "PATH: message"; it is printed as "/".
std::string path_text(const Pointer& at) {
  std::string text = at.to_string();
  return text.empty() ? "/" : text;
}

// " (got "5000")": what was there instead, short enough to keep the error on one line.
std::string got(const json& value) {
  if (value.is_object()) return " (got an object)";
  if (value.is_array()) return " (got an array)";
  if (value.is_number_float() && !std::isfinite(value.get<double>())) {
    return " (got a non-finite number)";
  }
  constexpr std::size_t kMaxChars = 40;
  std::string text = value.dump(-1, ' ', false, json::error_handler_t::replace);
  if (text.size() > kMaxChars) text = text.substr(0, kMaxChars) + "...";
  return " (got " + text + ")";
}

std::string in_quotes(std::string_view text) {
  return "\"" + std::string(text) + "\"";
}

// Levenshtein distance, ignoring case: "amout" -> "amount" is 1.
std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      std::size_t above = row[j];
      bool same = std::tolower(static_cast<unsigned char>(a[i - 1])) ==
                  std::tolower(static_cast<unsigned char>(b[j - 1]));
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (same ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// "unknown key (did you mean "amount"?)" when one known key is close, else the list of known keys.
// Close means about one edit in three characters: typos, not different words ("gpu" vs "url").
std::string unknown_key_message(std::string_view key, const std::vector<std::string>& known) {
  const std::string* best = nullptr;
  std::size_t best_distance = 0;
  for (const std::string& candidate : known) {
    std::size_t distance = edit_distance(key, candidate);
    std::size_t allowed = std::max<std::size_t>(1, std::min(key.size(), candidate.size()) / 3);
    if (distance <= allowed && (!best || distance < best_distance)) {
      best = &candidate;
      best_distance = distance;
    }
  }
  if (best) return "unknown key (did you mean " + in_quotes(*best) + "?)";
  return "unknown key (expected one of: " + join(known, ", ") + ")";
}

// One pass over a document. A layer (a user file or the command-line flags laid over a locked
// policy) is read the same way, but may leave required keys and cross-references (defaults.gpu must
// name a rate) to the documents below it: those are checked on the merged document.
class Reader {
 public:
  explicit Reader(bool whole_document) : whole_document_(whole_document) {}
  bool whole_document() const { return whole_document_; }
  void fail(const Pointer& at, const std::string& message) {
    errors_.push_back(path_text(at) + ": " + message);
  }
  std::vector<std::string> take_errors() { return std::move(errors_); }

 private:
  bool whole_document_;
  std::vector<std::string> errors_;
};

// ---- values: each parser reports its own error and returns nullopt on a bad value ----

// Amounts that limit spend must be positive (a zero budget is a typo, or a ban, and a ban is a stop
// order); prices may be zero (hardware that is already paid for).
std::optional<Money> read_money(Reader& reader, const json& value, const Pointer& at,
                                bool positive) {
  std::string expected = positive ? "must be a positive number" : "must be a number >= 0";
  if (!value.is_number()) {
    reader.fail(at, expected + got(value));
    return std::nullopt;
  }
  double number = value.get<double>();
  std::optional<Money> money = money_from_number(number);
  if (!money && std::isfinite(number) && number > 0) {
    reader.fail(at, "must be at most " + std::to_string(kMaxMoney.micros / 1'000'000) + got(value));
    return std::nullopt;
  }
  if (!money || (positive && money->micros <= 0)) {
    reader.fail(at, expected + got(value));
    return std::nullopt;
  }
  return money;
}
const auto positive_money = [](Reader& r, const json& v, const Pointer& at) {
  return read_money(r, v, at, true);
};
const auto price = [](Reader& r, const json& v, const Pointer& at) {
  return read_money(r, v, at, false);
};

std::optional<Nanos> read_duration(Reader& reader, const json& value, const Pointer& at,
                                   bool positive) {
  std::optional<Nanos> duration;
  if (value.is_string()) duration = parse_duration(value.get<std::string>());
  if (!duration) {
    reader.fail(at, "must be a duration like \"90s\", \"5m\", \"1h30m\" or \"250ms\"" + got(value));
    return std::nullopt;
  }
  if (positive && duration->count() == 0) {
    reader.fail(at, "must be a duration longer than 0s" + got(value));
    return std::nullopt;
  }
  return duration;
}
const auto duration = [](Reader& r, const json& v, const Pointer& at) {
  return read_duration(r, v, at, false);
};
// Intervals and windows: zero would spin, or never look.
const auto positive_duration = [](Reader& r, const json& v, const Pointer& at) {
  return read_duration(r, v, at, true);
};
// A duration within [low, high]: where a value outside would break something (see uses).
auto duration_between(Nanos low, Nanos high) {
  return [low, high](Reader& reader, const json& value, const Pointer& at) -> std::optional<Nanos> {
    auto duration = read_duration(reader, value, at, false);
    if (duration && (*duration < low || *duration > high)) {
      reader.fail(at, "must be between " + format_duration(low) + " and " + format_duration(high) +
                          got(value));
      return std::nullopt;
    }
    return duration;
  };
}

// JSON Schema counts 8.0 as an integer, and so does this, so that the schema and the validator
// agree.
const auto count = [](Reader& reader, const json& value, const Pointer& at) -> std::optional<int> {
  if (value.is_number()) {
    double number = value.get<double>();
    if (std::isfinite(number) && number >= 1 && number <= std::numeric_limits<int>::max() &&
        number == std::floor(number)) {
      return static_cast<int>(number);
    }
  }
  reader.fail(at, "must be a positive integer" + got(value));
  return std::nullopt;
};

// Bounds of a plain number; an open end excludes its value.
struct Range {
  double low = -std::numeric_limits<double>::infinity();
  bool low_open = false;
  double high = std::numeric_limits<double>::infinity();
  bool high_open = false;

  bool contains(double x) const {
    return (low_open ? x > low : x >= low) && (high_open ? x < high : x <= high);
  }
  // "a number in (0, 1]", "a number >= 1", "a number".
  std::string text() const {
    auto number = [](double x) {
      char buffer[32];
      std::snprintf(buffer, sizeof buffer, "%g", x);
      return std::string(buffer);
    };
    bool has_low = std::isfinite(low), has_high = std::isfinite(high);
    if (has_low && has_high) {
      return std::string("a number in ") + (low_open ? "(" : "[") + number(low) + ", " +
             number(high) + (high_open ? ")" : "]");
    }
    if (has_low) return std::string("a number ") + (low_open ? "> " : ">= ") + number(low);
    if (has_high) return std::string("a number ") + (high_open ? "< " : "<= ") + number(high);
    return "a number";
  }
};

std::optional<double> read_number(Reader& reader, const json& value, const Pointer& at,
                                  const Range& range) {
  if (value.is_number()) {
    double number = value.get<double>();
    if (std::isfinite(number) && range.contains(number)) return number;
  }
  reader.fail(at, "must be " + range.text() + got(value));
  return std::nullopt;
}
auto number_in(Range range) {
  return
      [range](Reader& r, const json& v, const Pointer& at) { return read_number(r, v, at, range); };
}
const Range kFraction{0, true, 1, false};  // warn_at thresholds: (0, 1]

const auto boolean = [](Reader& reader, const json& value,
                        const Pointer& at) -> std::optional<bool> {
  if (value.is_boolean()) return value.get<bool>();
  reader.fail(at, "must be true or false" + got(value));
  return std::nullopt;
};

// A string that `accepts`; `expected` completes "must be ...". `echo` = false keeps the value out
// of the message: where a variable name is wanted, a mistaken value is likely the secret itself.
template <class Accepts>
auto text_where(Accepts accepts, std::string expected, bool echo = true) {
  return [accepts, expected, echo](Reader& reader, const json& value,
                                   const Pointer& at) -> std::optional<std::string> {
    if (value.is_string() && accepts(value.get_ref<const std::string&>())) {
      return value.get<std::string>();
    }
    reader.fail(at, "must be " + expected + (echo ? got(value) : ""));
    return std::nullopt;
  };
}
const auto text = text_where([](const std::string& s) { return !s.empty(); }, "a non-empty string");

auto text_in(std::vector<std::string> choices) {
  std::string expected = "one of " + join(choices, ", ");
  return text_where(
      [choices](const std::string& s) {
        return std::find(choices.begin(), choices.end(), s) != choices.end();
      },
      expected);
}

bool is_env_name(const std::string& name) {
  if (name.empty() || std::isdigit(static_cast<unsigned char>(name[0]))) return false;
  return std::all_of(name.begin(), name.end(),
                     [](unsigned char c) { return (c < 128 && std::isalnum(c)) || c == '_'; });
}
const auto env_name = text_where(
    is_env_name,
    "the name of an environment variable, like \"SPENDCAP_SLACK_URL\" (not the URL or secret)",
    /*echo=*/false);

bool is_currency_code(const std::string& code) {
  return code.size() == 3 &&
         std::all_of(code.begin(), code.end(), [](char c) { return c >= 'A' && c <= 'Z'; });
}

// "sqlite:PATH", "postgresql://..." or "postgres://...", or a plain path. Anything else that looks
// like a URL ("mysql://h/db", a bare "sqlite:") is refused rather than taken for a file name.
bool is_ledger_location(const std::string& location) {
  for (std::string_view prefix : {"sqlite:", "postgresql://", "postgres://"}) {
    if (location.starts_with(prefix)) return location.size() > prefix.size();
  }
  return !location.empty() && location.find("://") == std::string::npos &&
         !location.starts_with("postgres:") && !location.starts_with("postgresql:");
}

// An enum spelled as one of `names` (what parse accepts).
template <class Enum>
auto one_of(std::optional<Enum> (*parse)(std::string_view), std::string names) {
  return
      [parse, names](Reader& reader, const json& value, const Pointer& at) -> std::optional<Enum> {
        if (value.is_string()) {
          if (auto parsed = parse(value.get_ref<const std::string&>())) return parsed;
        }
        reader.fail(at, "must be one of " + names + got(value));
        return std::nullopt;
      };
}

std::optional<Billing> parse_billing(std::string_view text) {
  for (Billing billing : {Billing::allocated, Billing::measured}) {
    if (text == to_string(billing)) return billing;
  }
  return std::nullopt;
}

const auto signal_spelling = [](Reader& reader, const json& value,
                                const Pointer& at) -> std::optional<int> {
  if (value.is_string()) {
    auto number = parse_signal(value.get<std::string>());
    if (number && (*number == SIGKILL || *number == SIGSTOP)) {
      reader.fail(at, "cannot be caught, so no job could checkpoint on it" + got(value));
      return std::nullopt;
    }
    if (number) return number;
  }
  reader.fail(
      at, "not a signal name (write it like \"SIGUSR1\", \"USR2\", \"SIGRTMIN+1\" or \"none\")" +
              got(value));
  return std::nullopt;
};

// Warning thresholds: fractions of the budget, each above the one before.
const auto warn_at = [](Reader& reader, const json& value,
                        const Pointer& at) -> std::optional<std::vector<double>> {
  if (!value.is_array()) {
    reader.fail(at,
                "must be a list of fractions of the budget, like [0.5, 0.8, 0.95]" + got(value));
    return std::nullopt;
  }
  std::vector<double> fractions;
  bool ok = true;
  for (std::size_t i = 0; i < value.size(); ++i) {
    std::optional<double> fraction = read_number(reader, value[i], at / i, kFraction);
    if (fraction && !fractions.empty() && *fraction <= fractions.back()) {
      reader.fail(at / i, "must be greater than the threshold before it" + got(value[i]));
      fraction.reset();
    }
    ok = ok && fraction;
    if (fraction) fractions.push_back(*fraction);
  }
  return ok ? std::optional(fractions) : std::nullopt;
};

const std::vector<std::string> kWebhookEvents = {"warning", "killed", "refused", "lost"};

const auto webhook_events = [](Reader& reader, const json& value,
                               const Pointer& at) -> std::optional<std::vector<std::string>> {
  if (!value.is_array() || value.empty()) {
    reader.fail(at, "must be a non-empty list of " + join(kWebhookEvents, ", ") + got(value));
    return std::nullopt;
  }
  const auto event = text_in(kWebhookEvents);
  std::vector<std::string> events;
  bool ok = true;
  for (std::size_t i = 0; i < value.size(); ++i) {
    std::optional<std::string> name = event(reader, value[i], at / i);
    if (name && std::find(events.begin(), events.end(), *name) != events.end()) {
      reader.fail(at / i, "is listed twice" + got(value[i]));
      name.reset();
    }
    ok = ok && name;
    if (name) events.push_back(*name);
  }
  return ok ? std::optional(events) : std::nullopt;
};

// ---- objects: a table of fields per JSON object ----

template <class T>
using ReadInto = std::function<void(Reader&, const json&, const Pointer&, T&)>;

template <class T>
struct Field {
  std::string key;
  ReadInto<T> read;
  bool required = false;
  bool listed = true;  // offered in "expected one of" (not for keys that are refused with a hint)
};

template <class T>
struct Schema {
  std::vector<Field<T>> fields;
  // Checks across fields, for whole documents only (a layer may rely on the one below).
  std::function<void(Reader&, const json&, const Pointer&, const T&)> check_whole = nullptr;
};

// A field whose value `parse` turns into `member`.
template <class T, class M, class Parse>
Field<T> field(std::string key, M T::*member, Parse parse, bool required = false) {
  return {std::move(key),
          [member, parse](Reader& reader, const json& value, const Pointer& at, T& out) {
            if (auto parsed = parse(reader, value, at)) out.*member = std::move(*parsed);
          },
          required};
}

// A key that is checked but kept nowhere ("$schema", for editors).
template <class T, class Parse>
Field<T> checked_only(std::string key, Parse parse) {
  return {std::move(key), [parse](Reader& reader, const json& value, const Pointer& at, T&) {
            parse(reader, value, at);
          }};
}

// A key that must not be there, with what to write instead.
template <class T>
Field<T> refused(std::string key, std::string message) {
  return {
      std::move(key),
      [message](Reader& reader, const json&, const Pointer& at, T&) { reader.fail(at, message); },
      false, false};
}

template <class T>
void read_object(Reader& reader, const json& value, const Pointer& at, T& out,
                 const Schema<T>& schema) {
  if (!value.is_object()) {
    reader.fail(at, "must be an object" + got(value));
    return;
  }
  std::vector<std::string> known;
  for (const Field<T>& field : schema.fields) {
    if (field.listed) known.push_back(field.key);
  }
  for (const auto& item : value.items()) {
    bool found = std::any_of(schema.fields.begin(), schema.fields.end(),
                             [&](const Field<T>& field) { return field.key == item.key(); });
    if (!found) reader.fail(at / item.key(), unknown_key_message(item.key(), known));
  }
  for (const Field<T>& field : schema.fields) {
    auto member = value.find(field.key);
    if (member != value.end()) {
      field.read(reader, *member, at / field.key, out);
    } else if (field.required && reader.whole_document()) {
      reader.fail(at, "missing required key " + in_quotes(field.key));
    }
  }
  if (schema.check_whole && reader.whole_document()) schema.check_whole(reader, value, at, out);
}

// A nested object read into its own struct (`defaults`), or into an optional one that its presence
// turns on (`guards.stall`).
template <class T, class S>
Field<T> section(std::string key, S T::*member, const Schema<S>& (*schema)()) {
  return {std::move(key),
          [member, schema](Reader& reader, const json& value, const Pointer& at, T& out) {
            read_object(reader, value, at, out.*member, schema());
          }};
}
template <class T, class S>
Field<T> optional_section(std::string key, std::optional<S> T::*member,
                          const Schema<S>& (*schema)()) {
  return {std::move(key),
          [member, schema](Reader& reader, const json& value, const Pointer& at, T& out) {
            read_object(reader, value, at, (out.*member).emplace(), schema());
          }};
}
// A nested object whose keys are fields of the same struct (`rates` holds Policy::gpu_rates, ...).
template <class T>
Field<T> flattened(std::string key, const Schema<T>& (*schema)()) {
  return {std::move(key), [schema](Reader& reader, const json& value, const Pointer& at, T& out) {
            read_object(reader, value, at, out, schema());
          }};
}

// An object of named entries, each read through `schema` (`rates.gpu`, `budgets.team`).
template <class S>
void read_named(Reader& reader, const json& value, const Pointer& at, std::map<std::string, S>& out,
                const Schema<S>& schema) {
  if (!value.is_object()) {
    reader.fail(at, "must be an object of named entries" + got(value));
    return;
  }
  for (const auto& item : value.items()) {
    if (item.key().empty()) {
      reader.fail(at / item.key(), "a name must not be empty");
      continue;
    }
    read_object(reader, item.value(), at / item.key(), out[item.key()], schema);
  }
}
template <class T, class S>
Field<T> named(std::string key, std::map<std::string, S> T::*member, const Schema<S>& (*schema)()) {
  return {std::move(key),
          [member, schema](Reader& reader, const json& value, const Pointer& at, T& out) {
            read_named(reader, value, at, out.*member, schema());
          }};
}

// ---- the tables (order: as in policies/README.md, which is the order errors come out in) ----

const Schema<PriceSheet>& price_sheet_schema() {
  static const Schema<PriceSheet> schema{
      {
          field("on_demand", &PriceSheet::on_demand, price),
          field("spot", &PriceSheet::spot, price),
          field("reserved", &PriceSheet::reserved, price),
          field("peak_tflops", &PriceSheet::peak_tflops, number_in({0, true})),
      },
      [](Reader& reader, const json& value, const Pointer& at, const PriceSheet&) {
        if (!value.contains("on_demand") && !value.contains("spot") &&
            !value.contains("reserved")) {
          reader.fail(at, "must set at least one of on_demand, spot, reserved");
        }
      }};
  return schema;
}

const Schema<Policy>& rates_schema() {
  static const Schema<Policy> schema{{
      named("gpu", &Policy::gpu_rates, price_sheet_schema),
      named("instance", &Policy::instance_rates, price_sheet_schema),
      field("storage_per_gb_month", &Policy::storage_per_gb_month, price),
  }};
  return schema;
}

const Schema<Defaults>& defaults_schema() {
  static const Schema<Defaults> schema{{
      field("pricing", &Defaults::pricing, one_of(parse_pricing, "on_demand, spot, reserved")),
      field("billing", &Defaults::billing, one_of(parse_billing, "allocated, measured")),
      field("grace", &Defaults::grace, duration),
      field("kill_after", &Defaults::kill_after, duration),
      field("grace_on_signal", &Defaults::grace_on_signal, duration),
      field("kill_after_on_signal", &Defaults::kill_after_on_signal, duration),
      field("interval", &Defaults::interval, positive_duration),
      // Every heartbeat is a write transaction on a ledger other runs share: not more than one a
      // second per run. An hour bounds how long a lost run goes unnoticed.
      field("sync", &Defaults::sync,
            duration_between(std::chrono::seconds(1), std::chrono::hours(1))),
      // A claim longer than a day would hold other runs' budget for nothing.
      field("claim_horizon", &Defaults::claim_horizon,
            duration_between(std::chrono::seconds(1), std::chrono::hours(24))),
      field("checkpoint_signal", &Defaults::checkpoint_signal, signal_spelling),
      field("isolation", &Defaults::isolation, one_of(parse_isolation, "pid, none")),
      field("warn_at", &Defaults::warn_at, warn_at),
      field("gpu", &Defaults::gpu, text),
      field("gpus", &Defaults::gpus, count),
      field("instance", &Defaults::instance, text),
      field("instances", &Defaults::instances, count),
  }};
  return schema;
}

const Schema<BudgetSpec>& budget_schema() {
  static const Schema<BudgetSpec> schema{{
      field("amount", &BudgetSpec::amount, positive_money, /*required=*/true),
      field("period", &BudgetSpec::period, one_of(parse_period, "day, week, month, total")),
      field("max_run", &BudgetSpec::max_run, positive_money),
      field("expected_per_hour", &BudgetSpec::expected_per_hour, positive_money),
      field("metric", &BudgetSpec::metric, text),
      field("baseline_metric", &BudgetSpec::baseline_metric, number_in({})),
      field("metric_goal", &BudgetSpec::metric_goal, text_in({"max", "min"})),
  }};
  return schema;
}

// The scopes a policy may budget; job and run budgets come from the command line.
constexpr ScopeKind kPolicyScopes[] = {ScopeKind::team, ScopeKind::experiment, ScopeKind::project,
                                       ScopeKind::user};

const Schema<Policy>& budgets_schema() {
  static const Schema<Policy> schema = [] {
    Schema<Policy> built;
    for (ScopeKind kind : kPolicyScopes) {
      built.fields.push_back({to_string(kind), [kind](Reader& reader, const json& value,
                                                      const Pointer& at, Policy& out) {
                                read_named(reader, value, at, out.budgets[kind], budget_schema());
                              }});
    }
    return built;
  }();
  return schema;
}

const Schema<CrashLoopGuard>& crash_loop_schema() {
  static const Schema<CrashLoopGuard> schema{{
      field("max_failures", &CrashLoopGuard::max_failures, count),
      field("window", &CrashLoopGuard::window, positive_duration),
  }};
  return schema;
}
const Schema<RespawnLoopGuard>& respawn_loop_schema() {
  static const Schema<RespawnLoopGuard> schema{{
      field("max_restarts", &RespawnLoopGuard::max_restarts, count),
      field("window", &RespawnLoopGuard::window, positive_duration),
  }};
  return schema;
}
const Schema<IdleGpuGuard>& idle_gpu_schema() {
  static const Schema<IdleGpuGuard> schema{{
      field("below_percent", &IdleGpuGuard::below_percent, number_in({0, true, 100, false})),
      field("for", &IdleGpuGuard::for_duration, positive_duration),
  }};
  return schema;
}
const Schema<StallGuard>& stall_schema() {
  static const Schema<StallGuard> schema{{
      field("after", &StallGuard::after, positive_duration),
  }};
  return schema;
}
// A factor below 1 would warn about a run that burns less than expected.
const Schema<BurnRateGuard>& burn_rate_schema() {
  static const Schema<BurnRateGuard> schema{{
      field("factor", &BurnRateGuard::factor, number_in({1})),
  }};
  return schema;
}
const Schema<Guards>& guards_schema() {
  static const Schema<Guards> schema{{
      optional_section("crash_loop", &Guards::crash_loop, crash_loop_schema),
      optional_section("respawn_loop", &Guards::respawn_loop, respawn_loop_schema),
      optional_section("idle_gpu", &Guards::idle_gpu, idle_gpu_schema),
      optional_section("stall", &Guards::stall, stall_schema),
      optional_section("burn_rate", &Guards::burn_rate, burn_rate_schema),
  }};
  return schema;
}

// PUE is total facility power over IT power: never below 1.
const Schema<Energy>& energy_schema() {
  static const Schema<Energy> schema{{
      field("pue", &Energy::pue, number_in({1})),
      field("kg_co2_per_kwh", &Energy::kg_co2_per_kwh, number_in({0})),
      field("usd_per_kwh", &Energy::usd_per_kwh, number_in({0})),
  }};
  return schema;
}

// Webhook URLs (Slack's included) are credentials: the file names the variables that hold them.
const Schema<Webhook>& webhook_schema() {
  static const Schema<Webhook> schema{{
      field("url_env", &Webhook::url_env, env_name, /*required=*/true),
      field("format", &Webhook::format, text_in({"json", "slack"})),
      field("events", &Webhook::events, webhook_events),
      field("secret_env", &Webhook::secret_env, env_name),
      refused<Webhook>("url",
                       "a literal URL is refused: put it in an environment variable and name "
                       "that variable in \"url_env\" (secrets stay out of files)"),
      refused<Webhook>("secret",
                       "a literal secret is refused: put it in an environment variable and name "
                       "that variable in \"secret_env\" (secrets stay out of files)"),
  }};
  return schema;
}

const auto webhooks = [](Reader& reader, const json& value,
                         const Pointer& at) -> std::optional<std::vector<Webhook>> {
  if (!value.is_array()) {
    reader.fail(at, "must be a list of webhooks" + got(value));
    return std::nullopt;
  }
  std::vector<Webhook> hooks(value.size());
  for (std::size_t i = 0; i < value.size(); ++i) {
    read_object(reader, value[i], at / i, hooks[i], webhook_schema());
  }
  return hooks;
};

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

const Schema<Policy>& policy_schema() {
  static const Schema<Policy> schema{
      {
          checked_only<Policy>("$schema", text),
          checked_only<Policy>("description",
                               text_where([](const std::string&) { return true; }, "a string")),
          field("currency", &Policy::currency,
                text_where(is_currency_code, "a three-letter ISO 4217 code like \"USD\"")),
          field(
              "ledger", &Policy::ledger,
              // Not echoed: a mistyped URL may still carry a password.
              text_where(is_ledger_location, "\"sqlite:PATH\", a path, or a \"postgresql://\" URL",
                         /*echo=*/false)),
          field("locked", &Policy::locked, boolean),
          field("mode", &Policy::mode, one_of(parse_mode, "enforce, warn")),
          flattened("rates", rates_schema),
          section("defaults", &Policy::defaults, defaults_schema),
          flattened("budgets", budgets_schema),
          section("guards", &Policy::guards, guards_schema),
          section("energy", &Policy::energy, energy_schema),
          field("webhooks", &Policy::webhooks, webhooks),
          field("metrics_dir", &Policy::metrics_dir, text),
      },
      check_type_references};
  return schema;
}

std::vector<std::string> read_document(const json& document, bool whole_document, Policy& policy) {
  Reader reader(whole_document);
  read_object(reader, document, Pointer(), policy, policy_schema());
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
  Pointer here() const {
    Pointer at;
    for (const Frame& frame : frames_) at = frame.is_array ? at / frame.index : at / frame.key;
    return at;
  }
  std::vector<Frame> frames_;
};

// A policy is a few kilobytes; the bound keeps `--policy /dev/zero` from eating memory.
constexpr std::size_t kMaxPolicyBytes = 16 << 20;

std::string read_whole_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error(path, errno_text(errno));
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
    throw PolicyError(path, {parse_error_text(error)});
  }
  if (!duplicates.errors.empty()) throw PolicyError(path, std::move(duplicates.errors));
  return document;
}

}  // namespace spendcap
