// The policy reader's parts, shared by the key table (keys.cpp) and the policy reader
// (policy.cpp); internal to the policy area. A Reader collects every error of one pass as
// "JSON-PATH: message"; each value parser reports its own error and returns nullopt on a bad value;
// an object is read through a Schema: its fields, the rows of keys.cpp under the object's path.
#pragma once

#include <algorithm>
#include <cctype>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <functional>
#include <limits>
#include <map>
#include <stdexcept>
#include <string>
#include <typeinfo>
#include <vector>

#include <nlohmann/json.hpp>

#include "spendcap/base/text.hpp"
#include "spendcap/policy/keys.hpp"
#include "spendcap/policy/policy.hpp"

namespace spendcap::policy_reader {

using json = nlohmann::json;
using Pointer = json::json_pointer;

// The root's pointer is "", which would read as nothing in "PATH: message"; it is printed as "/".
inline std::string path_text(const Pointer& at) {
  std::string text = at.to_string();
  return text.empty() ? "/" : text;
}

// " (got "5000")": what was there instead, short enough to keep the error on one line.
inline std::string got(const json& value) {
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

inline std::string in_quotes(std::string_view text) {
  return "\"" + std::string(text) + "\"";
}

// Levenshtein distance, ignoring case: "amout" -> "amount" is 1.
inline std::size_t edit_distance(std::string_view a, std::string_view b) {
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
inline std::string unknown_key_message(std::string_view key,
                                       const std::vector<std::string>& known) {
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
inline std::optional<Money> read_money(Reader& reader, const json& value, const Pointer& at,
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
inline const auto positive_money = [](Reader& r, const json& v, const Pointer& at) {
  return read_money(r, v, at, true);
};
inline const auto price = [](Reader& r, const json& v, const Pointer& at) {
  return read_money(r, v, at, false);
};

inline std::optional<Nanos> read_duration(Reader& reader, const json& value, const Pointer& at,
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
inline const auto duration = [](Reader& r, const json& v, const Pointer& at) {
  return read_duration(r, v, at, false);
};
// Intervals and windows: zero would spin, or never look.
inline const auto positive_duration = [](Reader& r, const json& v, const Pointer& at) {
  return read_duration(r, v, at, true);
};
// A duration within [low, high]: where a value outside would break something (see uses).
inline auto duration_between(Nanos low, Nanos high) {
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
inline const auto count = [](Reader& reader, const json& value,
                             const Pointer& at) -> std::optional<int> {
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

inline std::optional<double> read_number(Reader& reader, const json& value, const Pointer& at,
                                         const Range& range) {
  if (value.is_number()) {
    double number = value.get<double>();
    if (std::isfinite(number) && range.contains(number)) return number;
  }
  reader.fail(at, "must be " + range.text() + got(value));
  return std::nullopt;
}
inline auto number_in(Range range) {
  return
      [range](Reader& r, const json& v, const Pointer& at) { return read_number(r, v, at, range); };
}
inline const Range kFraction{0, true, 1, false};  // warn_at thresholds: (0, 1]

inline const auto boolean = [](Reader& reader, const json& value,
                               const Pointer& at) -> std::optional<bool> {
  if (value.is_boolean()) return value.get<bool>();
  reader.fail(at, "must be true or false" + got(value));
  return std::nullopt;
};

// A string that `accepts`; `expected` completes "must be ...". `echo` = false keeps the value out
// of the message: where a variable name is wanted, a mistaken value is likely the secret itself.
template <class Accepts>
inline auto text_where(Accepts accepts, std::string expected, bool echo = true) {
  return [accepts, expected, echo](Reader& reader, const json& value,
                                   const Pointer& at) -> std::optional<std::string> {
    if (value.is_string() && accepts(value.get_ref<const std::string&>())) {
      return value.get<std::string>();
    }
    reader.fail(at, "must be " + expected + (echo ? got(value) : ""));
    return std::nullopt;
  };
}
inline const auto text =
    text_where([](const std::string& s) { return !s.empty(); }, "a non-empty string");

inline auto text_in(std::vector<std::string> choices) {
  std::string expected = "one of " + join(choices, ", ");
  return text_where(
      [choices](const std::string& s) {
        return std::find(choices.begin(), choices.end(), s) != choices.end();
      },
      expected);
}

inline bool is_env_name(const std::string& name) {
  if (name.empty() || std::isdigit(static_cast<unsigned char>(name[0]))) return false;
  return std::all_of(name.begin(), name.end(),
                     [](unsigned char c) { return (c < 128 && std::isalnum(c)) || c == '_'; });
}
inline const auto env_name = text_where(
    is_env_name,
    "the name of an environment variable, like \"SPENDCAP_SLACK_URL\" (not the URL or secret)",
    /*echo=*/false);

// A runner-held file (webhooks' url_file and secret_file): an absolute path.
inline const auto absolute_file =
    text_where([](const std::string& s) { return s.size() > 1 && s.front() == '/'; },
               "an absolute path, like \"/etc/spendcap/hook.url\"");

inline bool is_currency_code(const std::string& code) {
  return code.size() == 3 &&
         std::all_of(code.begin(), code.end(), [](char c) { return c >= 'A' && c <= 'Z'; });
}

// "sqlite:PATH", "postgresql://..." or "postgres://...", or a plain path. Anything else that looks
// like a URL ("mysql://h/db", a bare "sqlite:") is refused rather than taken for a file name.
inline bool is_ledger_location(const std::string& location) {
  for (std::string_view prefix : {"sqlite:", "postgresql://", "postgres://"}) {
    if (location.starts_with(prefix)) return location.size() > prefix.size();
  }
  return !location.empty() && location.find("://") == std::string::npos &&
         !location.starts_with("postgres:") && !location.starts_with("postgresql:");
}

// An enum spelled as one of `names` (what parse accepts).
template <class Enum>
inline auto one_of(std::optional<Enum> (*parse)(std::string_view), std::string names) {
  return
      [parse, names](Reader& reader, const json& value, const Pointer& at) -> std::optional<Enum> {
        if (value.is_string()) {
          if (auto parsed = parse(value.get_ref<const std::string&>())) return parsed;
        }
        reader.fail(at, "must be one of " + names + got(value));
        return std::nullopt;
      };
}

inline std::optional<Billing> parse_billing(std::string_view text) {
  for (Billing billing : {Billing::allocated, Billing::measured}) {
    if (text == to_string(billing)) return billing;
  }
  return std::nullopt;
}

inline const auto signal_spelling = [](Reader& reader, const json& value,
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
inline const auto warn_at = [](Reader& reader, const json& value,
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

inline const std::vector<std::string> kWebhookEvents = {
    "warning", "killed", "refused", "lost", "finished", "stop-order", "overrun", "preempted"};

inline const auto webhook_events =
    [](Reader& reader, const json& value,
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

// Checks across fields, for whole documents only (a layer may rely on the one below).
template <class T>
using CheckWhole = std::function<void(Reader&, const json&, const Pointer&, const T&)>;

template <class T>
struct Schema {
  std::vector<Field<T>> fields;
  CheckWhole<T> check_whole = nullptr;
};

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

// The schema of the object at `parent` ("" for the root, "/defaults", "/rates/gpu/*"): the rows of
// keys.cpp one level below it, in table order (the order errors come out in), each read into a T.
template <class T>
Schema<T> schema_for(std::string_view parent, CheckWhole<T> check_whole = nullptr) {
  Schema<T> schema;
  schema.check_whole = std::move(check_whole);
  for (const PolicyKey& key : policy_keys()) {
    std::string_view path = key.path;
    if (path.size() <= parent.size() + 1 || !path.starts_with(parent) ||
        path[parent.size()] != '/') {
      continue;
    }
    std::string_view name = path.substr(parent.size() + 1);
    if (name.find('/') != std::string_view::npos) continue;
    if (!key.owner || *key.owner != typeid(T)) {
      throw std::logic_error("policy key " + key.path + " is not read into the object at " +
                             std::string(parent));
    }
    schema.fields.push_back({std::string(name),
                             [&key](Reader& reader, const json& value, const Pointer& at, T& out) {
                               key.read(reader, value, at, &out);
                             },
                             key.required, key.listed});
  }
  return schema;
}

}  // namespace spendcap::policy_reader
