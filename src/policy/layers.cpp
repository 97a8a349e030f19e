#include "spendcap/policy/layers.hpp"

#include "spendcap/base/files.hpp"
#include "spendcap/base/text.hpp"
#include "spendcap/policy/keys.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>

namespace spendcap {

namespace {

using json = nlohmann::json;
using Pointer = json::json_pointer;
using Path = std::vector<std::string>;  // the keys of a JSON path, unescaped

std::string path_text(const Path& path) {
  Pointer pointer;
  for (const std::string& key : path) pointer /= key;
  std::string text = pointer.to_string();
  return text.empty() ? "/" : text;
}

// ---- merging ----

// Lays `upper` over `base`: objects merge key by key; webhooks are appended (a layer adds
// notifications, it cannot silence the ones below it); any other value is replaced.
void overlay(json& base, const json& upper, bool at_root = true) {
  if (!base.is_object() || !upper.is_object()) {
    base = upper;
    return;
  }
  for (const auto& item : upper.items()) {
    json& slot = base[item.key()];
    if (at_root && item.key() == "webhooks" && slot.is_array() && item.value().is_array()) {
      slot.insert(slot.end(), item.value().begin(), item.value().end());
    } else if (slot.is_object() && item.value().is_object()) {
      overlay(slot, item.value(), false);
    } else {
      slot = item.value();
    }
  }
}

bool is_empty_layer(const json& document) {
  return document.is_null() || (document.is_object() && document.empty());
}

// ---- what a locked policy means where it says nothing ----

// Sets `key`'s implied default under `node` (from segment `i` of its path on) where the document
// lacks it: always for Implied::always rows (creating the objects above), and only inside
// existing objects for Implied::with_parent rows (a guard the locked policy turns on).
void fill_default(json& node, const std::vector<std::string_view>& segments, std::size_t i,
                  const PolicyKey& key) {
  if (!node.is_object()) return;
  std::string segment(segments[i]);
  if (i + 1 == segments.size()) {
    if (!node.contains(segment)) node[segment] = key.default_value;
    return;
  }
  if (segment == "*") {
    for (auto& item : node.items()) fill_default(item.value(), segments, i + 1, key);
    return;
  }
  auto child = node.find(segment);
  if (child == node.end()) {
    if (key.implied != Implied::always) return;
    child = node.emplace(segment, json::object()).first;
  }
  fill_default(*child, segments, i + 1, key);
}

// The locked document with the defaults it implies filled in (keys.cpp), so that every rule
// compares against the value actually in force: a locked policy that does not mention the mode is
// in enforce mode, and a layer must not switch it to warn.
json effective_locked(const json& locked) {
  if (!locked.is_object()) return locked;
  json effective = locked;
  for (const PolicyKey& key : policy_keys()) {
    if (key.implied == Implied::no || key.default_value.is_null()) continue;
    std::vector<std::string_view> segments;
    std::string_view rest = key.path;
    while (!rest.empty()) {
      rest.remove_prefix(1);  // the '/'
      segments.push_back(rest.substr(0, rest.find('/')));
      rest.remove_prefix(segments.back().size());
    }
    fill_default(effective, segments, 0, key);
  }
  return effective;
}

// ---- the tightening rules (one per key, in keys.cpp) ----

// Values as the messages show them: 120s, warn, 4.1.
std::string value_text(const json& value) {
  return value.is_string() ? redact_password(value.get<std::string>())
                           : value.dump(-1, ' ', false, json::error_handler_t::replace);
}

// Durations compare as durations ("2m" > "90s"), money and counts as numbers.
std::optional<double> scaled(const json& value, Scale scale) {
  if (scale == Scale::duration) {
    if (!value.is_string()) return std::nullopt;
    auto parsed = parse_duration(value.get<std::string>());
    if (!parsed) return std::nullopt;
    return static_cast<double>(parsed->count());
  }
  if (!value.is_number()) return std::nullopt;
  return value.get<double>();
}

// The violation of `rule` by `upper`, or nullopt; `locked` is null where the locked policy has no
// value. A value that cannot be read is a violation: the check fails closed.
std::optional<std::string> violation(const PolicyKey& rule, const json* locked, const json& upper) {
  std::string got = value_text(upper);
  std::string note = rule.note.empty() ? "" : " (" + rule.note + ")";
  switch (rule.tightening) {
    case Tightening::any:
    case Tightening::ignore:
      return std::nullopt;
    case Tightening::same_present:
      if (!locked) return got + " is not in the locked policy" + note;
      [[fallthrough]];
    case Tightening::by_key:  // reached only for a value that is not an object
    case Tightening::same:
      if (!locked || *locked == upper) return std::nullopt;
      return got + " differs from the locked " + value_text(*locked) + note;
    case Tightening::at_most:
    case Tightening::at_least: {
      if (!locked) return std::nullopt;
      std::optional<double> mine = scaled(upper, rule.scale), theirs = scaled(*locked, rule.scale);
      if (!mine || !theirs)
        return got + " cannot be compared with the locked " + value_text(*locked);
      bool loosens = rule.tightening == Tightening::at_most ? *mine > *theirs : *mine < *theirs;
      if (!loosens) return std::nullopt;
      return got + " is " + rule.note + " than the locked " + value_text(*locked);
    }
    case Tightening::enforce_kept:
      if (!locked || *locked != to_string(Mode::enforce) || upper == to_string(Mode::enforce)) {
        return std::nullopt;
      }
      return got + " would loosen the locked enforce mode";
    case Tightening::on_kept:
      if (!locked || *locked != true || upper == true) return std::nullopt;
      return got + " would turn off what the locked policy keeps on";
    case Tightening::pid_kept:
      if (!locked || *locked != to_string(Isolation::pid) || upper == to_string(Isolation::pid)) {
        return std::nullopt;
      }
      return got + " would let the job signal spendcap: the locked policy requires isolation pid";
    case Tightening::signal_kept: {
      if (!locked || !locked->is_string()) return std::nullopt;
      std::optional<int> theirs = parse_signal(locked->get<std::string>());
      if (!theirs || *theirs == 0) return std::nullopt;
      std::optional<int> mine =
          upper.is_string() ? parse_signal(upper.get<std::string>()) : std::nullopt;
      if (mine && *mine != 0 && !ignored_by_default(*mine)) return std::nullopt;
      if (mine && *mine != 0) {
        return got + " is ignored by default, so for most jobs it would turn off the locked " +
               "checkpoint signal " + signal_name(*theirs);
      }
      return got + " would turn off the locked checkpoint signal " + signal_name(*theirs);
    }
  }
  return std::nullopt;
}

const json* find_value(const json& document, const Path& path) {
  const json* node = &document;
  for (const std::string& key : path) {
    if (!node->is_object()) return nullptr;
    auto child = node->find(key);
    if (child == node->end()) return nullptr;
    node = &*child;
  }
  return node;
}

// A value no row names must equal the locked one where the locked policy has it, and is free
// where it does not: budget entries and guards that the locked policy lacks only add limits.
// Objects are compared key by key.
void collect_violations(const json& locked, const json& upper, Path& path,
                        std::vector<std::string>& out) {
  static const PolicyKey kSameWhereSet;  // Tightening::same
  const PolicyKey* key = find_policy_key(path);
  if (upper.is_object() && (!key || key->tightening == Tightening::by_key)) {
    for (const auto& item : upper.items()) {
      path.push_back(item.key());
      collect_violations(locked, item.value(), path, out);
      path.pop_back();
    }
    return;
  }
  if (auto message = violation(key ? *key : kSameWhereSet, find_value(locked, path), upper)) {
    out.push_back(path_text(path) + ": " + *message);
  }
}

// ---- finding the files ----

// False when nothing is at `path`; an error when we cannot tell (a locked policy must not be
// skipped because its directory could not be searched).
bool exists(const std::string& path) {
  struct stat status;
  if (::stat(path.c_str(), &status) == 0) return true;
  if (errno == ENOENT || errno == ENOTDIR) return false;
  throw Error(path, errno_text(errno));
}

std::string parent_directory(const std::string& path) {
  std::string parent = std::filesystem::path(path).parent_path().string();
  return parent.empty() ? "." : parent;
}

// The system policy document when it is locked, checked; nullopt when there is none or it is not
// locked (then it is only the last place the search looks).
std::optional<json> read_locked_system_policy(const std::string& path) {
  if (!exists(path)) return std::nullopt;
  json document = read_policy_file(path);
  // Anything but a missing or false "locked" counts as locked here, so that a mistyped lock
  // ("locked": "true") fails closed as an invalid locked policy instead of opening the runner.
  if (document.is_object()) {
    auto lock = document.find("locked");
    if (lock == document.end() || *lock == false) return std::nullopt;
  }
  if (auto unsafe = unsafe_permissions(path)) {
    throw Error(path, "refusing a locked policy that others can change: " + *unsafe,
                "a locked policy is only as safe as its file");
  }
  Policy policy = parse_policy(document, path);  // throws PolicyError
  // What a locked policy leaves unsaid the caller's environment would decide: which ledger
  // ($XDG_DATA_HOME) and how many GPUs (CUDA_VISIBLE_DEVICES, which a job can change itself).
  std::vector<std::string> errors;
  if (!policy.ledger) {
    errors.push_back(
        "/ledger: a locked policy must name its ledger (else each user's "
        "$XDG_DATA_HOME would choose one)");
  }
  if (policy.defaults.gpu && !policy.defaults.gpus) {
    errors.push_back(
        "/defaults/gpus: a locked policy that sets defaults.gpu must set the GPU "
        "count too (else CUDA_VISIBLE_DEVICES would decide it)");
  }
  for (std::string& error : locked_keys_without_effect(document))
    errors.push_back(std::move(error));
  if (!errors.empty()) throw PolicyError(path, std::move(errors));
  return document;
}

// How the project's policy file is named in messages: "./spendcap.json", or its absolute path.
std::string project_policy_source(const PolicySearch& search) {
  return search.cwd_path.starts_with("/") || search.cwd_path.starts_with("./")
             ? search.cwd_path
             : "./" + search.cwd_path;
}

// The first policy file of the search order, as a layer; nullopt when there is none.
std::optional<PolicyLayer> find_user_policy(const PolicySearch& search, bool system_is_locked) {
  struct Candidate {
    std::optional<std::string> path;
    std::string source;
    const char* missing_hint;  // set where a missing file is an error, not a skip
  };
  auto labelled = [](const std::optional<std::string>& path, const std::string& prefix) {
    return path ? prefix + *path : std::string();
  };
  std::string cwd_source = project_policy_source(search);
  const Candidate candidates[] = {
      {search.flag_path, labelled(search.flag_path, ""), "check the --policy path"},
      {search.env_path, labelled(search.env_path, "$SPENDCAP_POLICY="),
       "unset SPENDCAP_POLICY or point it at a policy file"},
      {search.cwd_path, cwd_source, nullptr},
      {search.xdg_path, labelled(search.xdg_path, ""), nullptr},
      {system_is_locked ? std::nullopt : std::optional(search.system_path), search.system_path,
       nullptr},
  };
  for (const Candidate& candidate : candidates) {
    if (!candidate.path || candidate.path->empty()) continue;
    if (exists(*candidate.path)) {
      return PolicyLayer{candidate.source, read_policy_file(*candidate.path)};
    }
    if (candidate.missing_hint) {
      throw Error(candidate.source, "no such policy file", candidate.missing_hint);
    }
  }
  return std::nullopt;
}

void refuse_loosening(const json& locked, const PolicyLayer& layer,
                      const std::string& locked_path) {
  std::vector<std::string> violations = loosening_violations(locked, layer.document);
  if (violations.empty()) return;
  // Each violation once: one in the message, several listed under it.
  std::string why = violations.size() == 1 ? "would loosen the locked policy: " + violations.front()
                                           : "would loosen the locked policy in " +
                                                 std::to_string(violations.size()) + " keys";
  Error error(layer.source, why,
              "the locked policy " + locked_path + " is set by the runner's owner");
  if (violations.size() > 1) error.details = std::move(violations);
  throw error;
}

// Runner-held files (url_file, secret_file, ledger_password_file) are read with the runner's
// identity only when the locked policy's own entries name them: a user's layer that named the
// locked webhook's secret_file beside its own url_env would have had events signed with the
// runner's secret sent to the user's server (issue 29, break 3). So no other layer may name one.
void refuse_runner_held_files(const PolicyLayer& layer, const std::string& locked_path) {
  const json& document = layer.document;
  if (!document.is_object()) return;
  std::string named;
  if (document.contains("ledger_password_file")) named = "/ledger_password_file";
  auto hooks = document.find("webhooks");
  if (named.empty() && hooks != document.end() && hooks->is_array()) {
    for (std::size_t i = 0; i < hooks->size() && named.empty(); ++i) {
      for (const char* key : {"url_file", "secret_file"}) {
        if ((*hooks)[i].is_object() && (*hooks)[i].contains(key)) {
          named = "/webhooks/" + std::to_string(i) + "/" + key;
          break;
        }
      }
    }
  }
  if (named.empty()) return;
  throw Error(layer.source,
              named +
                  ": a runner-held file (url_file, secret_file, ledger_password_file) is "
                  "honoured only from the locked policy " +
                  locked_path + " itself",
              "give your own webhook's URL and secret in variables (url_env, secret_env)");
}

// The project's policy: ./spendcap.json, or inside a git repository the nearest spendcap.json
// from the working directory up to the repository's root (the directory holding .git), so that a
// run from a subdirectory of the project gets the project's defaults. Outside a repository only
// the working directory counts: walking up to / would pick up whatever file a parent holds.
std::string project_policy_path() {
  std::error_code ec;
  std::filesystem::path cwd = std::filesystem::current_path(ec);
  if (ec) return "spendcap.json";
  std::optional<std::filesystem::path> root;
  for (std::filesystem::path dir = cwd;; dir = dir.parent_path()) {
    if (std::filesystem::exists(dir / ".git", ec)) {
      root = dir;
      break;
    }
    if (dir == dir.parent_path()) break;
  }
  if (!root) return "spendcap.json";
  for (std::filesystem::path dir = cwd;; dir = dir.parent_path()) {
    if (std::filesystem::exists(dir / "spendcap.json", ec)) {
      return dir == cwd ? "spendcap.json" : (dir / "spendcap.json").string();
    }
    if (dir == *root || dir == dir.parent_path()) break;
  }
  return "spendcap.json";
}

}  // namespace

PolicySearch PolicySearch::from_environment(std::optional<std::string> flag_path) {
  PolicySearch search;
  search.flag_path = std::move(flag_path);
  auto variable = [](const char* name) -> std::optional<std::string> {
    const char* value = std::getenv(name);
    if (!value || !*value) return std::nullopt;
    return std::string(value);
  };
  search.env_path = variable("SPENDCAP_POLICY");
  search.cwd_path = project_policy_path();
  search.xdg_path = xdg_dir(XdgDir::config) + "/spendcap/policy.json";
  // system_path is deliberately not read from the environment: a variable that moved it would let
  // any user step out from under a locked policy.
  return search;
}

LoadedPolicy load_policy(const PolicySearch& search, const PolicyLayer& flags) {
  LoadedPolicy loaded;
  std::optional<json> locked = read_locked_system_policy(search.system_path);
  json merged = json::object();
  if (locked) {
    loaded.locked = true;
    loaded.locked_policy = parse_policy(*locked, search.system_path);
    loaded.locked_source = search.system_path;
    loaded.sources.push_back(search.system_path + " (locked)");
    merged = *locked;
  }

  std::vector<PolicyLayer> layers;
  if (auto user = find_user_policy(search, loaded.locked)) layers.push_back(std::move(*user));
  if (!is_empty_layer(flags.document)) {
    layers.push_back({flags.source.empty() ? "command line" : flags.source, flags.document});
  }
  for (const PolicyLayer& layer : layers) {
    if (auto errors = validate_policy_layer(layer.document); !errors.empty()) {
      // All of the file's errors, as `policy check` lists them: those that only the whole policy
      // shows (a defaults.gpu that names no rate) too, from the layers so far with this one.
      json whole = merged;
      overlay(whole, layer.document);
      try {
        parse_policy(whole, layer.source);
      } catch (const PolicyError& more) {
        for (const std::string& error : more.errors()) {
          if (std::find(errors.begin(), errors.end(), error) == errors.end()) {
            errors.push_back(error);
          }
        }
      } catch (const Error&) {
      }
      throw PolicyError(layer.source, std::move(errors));
    }
    if (locked) refuse_loosening(*locked, layer, search.system_path);
    if (locked) refuse_runner_held_files(layer, search.system_path);
    overlay(merged, layer.document);
    loaded.sources.push_back(layer.source);
  }
  if (locked) merged["locked"] = true;

  // Each layer was valid alone; the merge can still be wrong together (a defaults.gpu that names
  // no rate, a budget entry without an amount).
  std::string source = loaded.sources.empty() ? "built-in defaults" : join(loaded.sources, " + ");
  loaded.policy = parse_policy(merged, source);
  loaded.document = std::move(merged);
  return loaded;
}

std::vector<std::string> loosening_violations(const nlohmann::json& locked,
                                              const nlohmann::json& upper) {
  if (upper.is_null()) return {};
  if (!upper.is_object()) return {"/: must be an object"};
  std::vector<std::string> violations;
  Path path;
  collect_violations(effective_locked(locked), upper, path, violations);
  return violations;
}

std::optional<std::string> unsafe_permissions(const std::string& path) {
  // Whoever can write the file, the directory that holds its name, or (through a symlink) the
  // directory that holds the file it points to, can replace the policy.
  std::vector<std::string> checked = {path, parent_directory(path)};
  if (char* resolved = ::realpath(path.c_str(), nullptr)) {
    std::string target_directory = parent_directory(resolved);
    std::free(resolved);
    if (target_directory != checked.back()) checked.push_back(target_directory);
  }
  for (const std::string& name : checked) {
    struct stat status;
    if (::stat(name.c_str(), &status) != 0) {
      return name + ": cannot check its permissions: " + errno_text(errno);
    }
    mode_t writable = status.st_mode & (S_IWGRP | S_IWOTH);
    if (!writable) continue;
    const char* who = writable == (S_IWGRP | S_IWOTH) ? "its group and others"
                      : (writable & S_IWGRP)          ? "its group"
                                                      : "others";
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(status.st_mode & 07777));
    return name + " is writable by " + who + " (mode " + mode + "); run `chmod go-w " + name + "`";
  }
  return std::nullopt;
}

LoadedPolicy load_policy_for_reading(const PolicySearch& search, const PolicyLayer& flags) {
  try {
    return load_policy(search, flags);
  } catch (const Error& error) {
    // Only the project's file is skipped: --policy and $SPENDCAP_POLICY were asked for by name,
    // and a broken locked policy must stop everything.
    std::string source = project_policy_source(search);
    // A file that is not JSON is named by its path, a file that is by its source.
    bool project_file = error.subject().starts_with(source) ||
                        (!search.cwd_path.empty() && error.subject().starts_with(search.cwd_path));
    if (search.flag_path || search.env_path || !project_file) throw;
    static bool warned = false;  // one CLI verb per process
    if (!warned) {
      warned = true;
      std::cerr << "spendcap: warning: " << escape_for_terminal(format_error(error));
      for (const std::string& detail : error.details) {
        std::cerr << "\n  " << escape_for_terminal(detail);
      }
      std::cerr << "\nspendcap: warning: reading without " << escape_for_terminal(source)
                << " (the policies after it in the search order apply; a ledger it names is not "
                   "read): fix it before the next run\n";
    }
    PolicySearch without = search;
    without.cwd_path.clear();
    return load_policy(without, flags);
  }
}

}  // namespace spendcap
