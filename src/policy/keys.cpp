#include "spendcap/policy/keys.hpp"

#include "reader.hpp"
#include "spendcap/base/duration.hpp"
#include "spendcap/policy/policy.hpp"

namespace spendcap {

namespace {

using namespace policy_reader;

// "60s" rather than format_duration's "1m": the way the defaults are documented.
json duration_text(Nanos duration) {
  if (duration % std::chrono::seconds(1) == Nanos(0)) {
    return std::to_string(std::chrono::duration_cast<std::chrono::seconds>(duration).count()) + "s";
  }
  return format_duration(duration);
}

// ---- how a row is read: into which struct, by which value parser (reader.hpp) ----

struct Binding {
  const std::type_info* owner;
  ReadKey read;
};

template <class T>
T& owner(void* out) {
  return *static_cast<T*>(out);
}

// A value that `parse` turns into `member`.
template <class T, class M, class Parse>
Binding value(M T::*member, Parse parse) {
  return {&typeid(T),
          [member, parse](Reader& reader, const json& value, const Pointer& at, void* out) {
            if (auto parsed = parse(reader, value, at)) owner<T>(out).*member = std::move(*parsed);
          }};
}

// A key that is checked but kept nowhere ("$schema", for editors).
template <class T, class Parse>
Binding checked_only(Parse parse) {
  return {&typeid(T), [parse](Reader& reader, const json& value, const Pointer& at, void*) {
            parse(reader, value, at);
          }};
}

// A key that must not be there, with what to write instead.
template <class T>
Binding refused(std::string message) {
  return {&typeid(T), [message](Reader& reader, const json&, const Pointer& at, void*) {
            reader.fail(at, message);
          }};
}

// A nested object read into its own struct (`defaults`), from the rows under `path`.
template <class T, class S>
Binding section(S T::*member, std::string path) {
  return {&typeid(T),
          [member, path](Reader& reader, const json& value, const Pointer& at, void* out) {
            read_object(reader, value, at, owner<T>(out).*member, schema_for<S>(path));
          }};
}
// ... into an optional one that its presence turns on (`guards.stall`).
template <class T, class S>
Binding optional_section(std::optional<S> T::*member, std::string path) {
  return {&typeid(T),
          [member, path](Reader& reader, const json& value, const Pointer& at, void* out) {
            read_object(reader, value, at, (owner<T>(out).*member).emplace(), schema_for<S>(path));
          }};
}
// A nested object whose keys are fields of the same struct (`rates` holds Policy::gpu_rates, ...).
template <class T>
Binding flattened(std::string path) {
  return {&typeid(T), [path](Reader& reader, const json& value, const Pointer& at, void* out) {
            read_object(reader, value, at, owner<T>(out), schema_for<T>(path));
          }};
}
// An object of named entries (`rates.gpu`), each read from the rows under `entry_path`.
template <class T, class S>
Binding named(std::map<std::string, S> T::*member, std::string entry_path,
              CheckWhole<S> check = nullptr) {
  return {&typeid(T), [member, entry_path, check](Reader& reader, const json& value,
                                                  const Pointer& at, void* out) {
            read_named(reader, value, at, owner<T>(out).*member, schema_for<S>(entry_path, check));
          }};
}

void check_price_sheet(Reader& reader, const json& value, const Pointer& at, const PriceSheet&) {
  if (!value.contains("on_demand") && !value.contains("spot") && !value.contains("reserved")) {
    reader.fail(at, "must set at least one of on_demand, spot, reserved");
  }
}

// The scopes a policy may budget; job and run budgets come from the command line.
Binding budgets_of(ScopeKind kind) {
  return {&typeid(Policy), [kind](Reader& reader, const json& value, const Pointer& at, void* out) {
            read_named(reader, value, at, owner<Policy>(out).budgets[kind],
                       schema_for<BudgetSpec>("/budgets/*/*"));
          }};
}

// A budget's members, kept in the budget (BudgetSpec::member_groups).
Binding members_of() {
  return {&typeid(BudgetSpec), [](Reader& reader, const json& value, const Pointer& at, void* out) {
            BudgetMembers members;
            read_object(reader, value, at, members,
                        schema_for<BudgetMembers>("/budgets/*/*/members"));
            owner<BudgetSpec>(out).member_groups = std::move(members.unix_groups);
          }};
}

// Unix group names: a non-empty list of distinct names as groupadd allows them.
std::optional<std::vector<std::string>> group_names(Reader& reader, const json& value,
                                                    const Pointer& at) {
  if (!value.is_array() || value.empty()) {
    reader.fail(at, "must be a non-empty list of Unix group names, like [\"vision\"]" + got(value));
    return std::nullopt;
  }
  std::vector<std::string> names;
  bool ok = true;
  for (std::size_t i = 0; i < value.size(); ++i) {
    const json& name = value[i];
    bool valid = name.is_string() && !name.get_ref<const std::string&>().empty() &&
                 name.get_ref<const std::string&>().size() <= 64 &&
                 std::all_of(name.get_ref<const std::string&>().begin(),
                             name.get_ref<const std::string&>().end(), [](unsigned char c) {
                               return c < 128 && (std::isalnum(c) || c == '_' || c == '-' ||
                                                  c == '.' || c == '$');
                             });
    if (!valid) {
      reader.fail(at / i, "must be a Unix group name" + got(name));
      ok = false;
    } else if (std::find(names.begin(), names.end(), name.get<std::string>()) != names.end()) {
      reader.fail(at / i, "is listed twice" + got(name));
      ok = false;
    } else {
      names.push_back(name.get<std::string>());
    }
  }
  return ok ? std::optional(names) : std::nullopt;
}

Binding webhook_list() {
  return {&typeid(Policy), [](Reader& reader, const json& value, const Pointer& at, void* out) {
            if (!value.is_array()) {
              reader.fail(at, "must be a list of webhooks" + got(value));
              return;
            }
            std::vector<Webhook> hooks(value.size());
            const Schema<Webhook> schema = schema_for<Webhook>("/webhooks/*");
            for (std::size_t i = 0; i < value.size(); ++i) {
              read_object(reader, value[i], at / i, hooks[i], schema);
              // One place for the URL and one for the secret: a variable or a runner-held file.
              if (!value[i].is_object()) continue;
              bool url_env = value[i].contains("url_env"), url_file = value[i].contains("url_file");
              if (url_env && url_file) {
                reader.fail(at / i, "names both \"url_env\" and \"url_file\": keep one");
              } else if (!url_env && !url_file && reader.whole_document()) {
                reader.fail(at / i, "missing required key \"url_env\" (or \"url_file\")");
              }
              if (value[i].contains("secret_env") && value[i].contains("secret_file")) {
                reader.fail(at / i, "names both \"secret_env\" and \"secret_file\": keep one");
              }
            }
            owner<Policy>(out).webhooks = std::move(hooks);
          }};
}

// ---- a row: the builder that keeps each row of the table on a line or two ----

class Row {
 public:
  Row(std::string path, Binding binding) {
    key_.path = std::move(path);
    key_.owner = binding.owner;
    key_.read = std::move(binding.read);
  }
  Row& required() {
    key_.required = true;
    return *this;
  }
  Row& unlisted() {
    key_.listed = false;
    return *this;
  }
  Row& by_key() { return rule(Tightening::by_key); }
  Row& any() { return rule(Tightening::any); }
  Row& ignore() { return rule(Tightening::ignore); }
  Row& same(std::string note = {}) { return rule(Tightening::same, Scale::none, std::move(note)); }
  Row& same_present(std::string note) {
    return rule(Tightening::same_present, Scale::none, std::move(note));
  }
  Row& at_most(Scale scale, std::string word) {
    return rule(Tightening::at_most, scale, std::move(word));
  }
  Row& at_least(Scale scale, std::string word) {
    return rule(Tightening::at_least, scale, std::move(word));
  }
  Row& enforce_kept() { return rule(Tightening::enforce_kept); }
  Row& signal_kept() { return rule(Tightening::signal_kept); }
  Row& pid_kept() { return rule(Tightening::pid_kept); }
  Row& on_kept() { return rule(Tightening::on_kept); }
  Row& implied(Implied when, json value) {
    key_.implied = when;
    key_.default_value = std::move(value);
    return *this;
  }
  Row& flag(std::string name) {
    key_.flag = std::move(name);
    return *this;
  }
  Row& no_effect_yet(std::string what) {
    key_.no_effect_yet = std::move(what);
    return *this;
  }
  operator PolicyKey() const { return key_; }

 private:
  Row& rule(Tightening tightening, Scale scale = Scale::none, std::string note = {}) {
    key_.tightening = tightening;
    key_.scale = scale;
    key_.note = std::move(note);
    return *this;
  }
  PolicyKey key_;
};

// ---- the table (order: as in policies/README.md, which is the order errors come out in) ----

std::vector<PolicyKey> build_keys() {
  // The built-in values a locked policy enforces without writing them down come from the structs'
  // own defaults (policy.hpp), so the two cannot drift apart.
  const Policy policy;
  const Defaults& defaults = policy.defaults;
  const CrashLoopGuard crash_loop;
  const RespawnLoopGuard respawn_loop;
  const IdleGpuGuard idle_gpu;
  const StallGuard stall;
  const BurnRateGuard burn_rate;
  const auto always = Implied::always;
  const auto with_parent = Implied::with_parent;  // where the locked policy has the object
  const std::string rates_note = "rates cannot be changed";
  const std::string hardware_note = "the runner's hardware is fixed";
  const std::string energy_note = "energy figures are the runner's";

  std::vector<PolicyKey> keys;
  auto add = [&keys](PolicyKey key) { keys.push_back(std::move(key)); };

  add(Row("/$schema", checked_only<Policy>(text)).any());
  add(Row("/description",
          checked_only<Policy>(text_where([](const std::string&) { return true; }, "a string")))
          .any());
  add(Row("/currency",
          value(&Policy::currency,
                text_where(is_currency_code, "a three-letter ISO 4217 code like \"USD\"")))
          .same("spend is counted in the locked currency")
          .implied(always, policy.currency));
  add(Row("/ledger", value(&Policy::ledger,
                           // Not echoed: a mistyped URL may still carry a password.
                           text_where(is_ledger_location,
                                      "\"sqlite:PATH\", a path, or a \"postgresql://\" URL",
                                      /*echo=*/false)))
          .same_present("every run here is recorded in the locked ledger")
          .flag("--ledger"));
  // Runner-held (issue 19): the PostgreSQL ledger's password, read by spendcap from this file (with
  // the runner's group where the locked policy names it) and passed to libpq as the connection's
  // password, never in a URL. libpq's own passfile must be 0600 of the user who connects, which a
  // group-readable file for the runner's group cannot be.
  add(Row("/ledger_password_file", value(&Policy::ledger_password_file, absolute_file)).any());
  add(Row("/locked", value(&Policy::locked, boolean)).ignore());  // only the system file locks
  add(Row("/mode", value(&Policy::mode, one_of(parse_mode, "enforce, warn")))
          .enforce_kept()
          .implied(always, to_string(policy.mode))
          .flag("--mode"));

  add(Row("/rates", flattened<Policy>("/rates")).by_key());
  const std::pair<const char*, std::map<std::string, PriceSheet> Policy::*> sheets[] = {
      {"gpu", &Policy::gpu_rates}, {"instance", &Policy::instance_rates}};
  for (const auto& [kind, member] : sheets) {
    std::string at = std::string("/rates/") + kind;
    add(Row(at, named(member, at + "/*", CheckWhole<PriceSheet>(check_price_sheet))).by_key());
    add(Row(at + "/*/on_demand", value(&PriceSheet::on_demand, price)).same_present(rates_note));
    add(Row(at + "/*/spot", value(&PriceSheet::spot, price)).same_present(rates_note));
    add(Row(at + "/*/reserved", value(&PriceSheet::reserved, price)).same_present(rates_note));
    add(Row(at + "/*/peak_tflops", value(&PriceSheet::peak_tflops, number_in({0, true})))
            .same_present(rates_note));
    add(Row(at + "/*/memory_gb", value(&PriceSheet::memory_gb, number_in({0, true})))
            .same_present(rates_note));
  }
  add(Row("/rates/storage_per_gb_month", value(&Policy::storage_per_gb_month, price))
          .same_present(rates_note));
  add(Row("/rates/egress_per_gb", value(&Policy::egress_per_gb, price)).same_present(rates_note));

  add(Row("/defaults", section(&Policy::defaults, "/defaults")).by_key());
  add(Row("/defaults/pricing",
          value(&Defaults::pricing, one_of(parse_pricing, "on_demand, spot, reserved")))
          .same()
          .implied(always, to_string(defaults.pricing))
          .flag("--pricing"));
  add(Row("/defaults/billing",
          value(&Defaults::billing, one_of(parse_billing, "allocated, measured")))
          .same()
          .implied(always, to_string(defaults.billing))
          .flag("--billing"));
  // A layer may only shorten the default durations: a shorter grace stops a run sooner, a shorter
  // sync or claim horizon keeps the ledger closer to the truth.
  auto shorter = [&](const char* key, Nanos Defaults::*member, auto parse) {
    return Row(std::string("/defaults/") + key, value(member, parse))
        .at_most(Scale::duration, "longer")
        .implied(always, duration_text(defaults.*member));
  };
  add(shorter("grace", &Defaults::grace, duration).flag("--grace"));
  add(shorter("kill_after", &Defaults::kill_after, duration).flag("--kill-after"));
  add(shorter("grace_on_signal", &Defaults::grace_on_signal, duration));
  add(shorter("kill_after_on_signal", &Defaults::kill_after_on_signal, duration));
  add(shorter("interval", &Defaults::interval, positive_duration).flag("--interval"));
  // Every heartbeat is a write transaction on a ledger other runs share: not more than one a
  // second per run. An hour bounds how long a lost run goes unnoticed.
  add(shorter("sync", &Defaults::sync,
              duration_between(std::chrono::seconds(1), std::chrono::hours(1)))
          .flag("--sync"));
  // A claim longer than a day would hold other runs' budget for nothing.
  add(shorter("claim_horizon", &Defaults::claim_horizon,
              duration_between(std::chrono::seconds(1), std::chrono::hours(24)))
          .flag("--claim-horizon"));
  add(Row("/defaults/checkpoint_signal", value(&Defaults::checkpoint_signal, signal_spelling))
          .signal_kept()
          .implied(always, signal_name(defaults.checkpoint_signal))
          .flag("--checkpoint-signal"));
  add(Row("/defaults/isolation", value(&Defaults::isolation, one_of(parse_isolation, "pid, none")))
          .pid_kept()
          .flag("--isolation"));
  add(Row("/defaults/warn_at", value(&Defaults::warn_at, warn_at)).any());
  add(Row("/defaults/gpu", value(&Defaults::gpu, text)).same(hardware_note).flag("--gpu"));
  add(Row("/defaults/gpus", value(&Defaults::gpus, count))
          .at_least(Scale::number, "fewer")
          .flag("--gpus"));
  add(Row("/defaults/instance", value(&Defaults::instance, text))
          .same(hardware_note)
          .flag("--instance"));
  add(Row("/defaults/instances", value(&Defaults::instances, count))
          .at_least(Scale::number, "fewer")
          .flag("--instances"));
  // A project's run defaults: names are free (a locked policy's budgets still decide what a run
  // may be charged to), a rate is refused under a locked policy where it sets rates (settings.cpp),
  // a run budget may only be lowered.
  add(Row("/defaults/team", value(&Defaults::team, text)).any());
  add(Row("/defaults/experiment", value(&Defaults::experiment, text)).any());
  add(Row("/defaults/project", value(&Defaults::project, text)).any());
  add(Row("/defaults/rate", value(&Defaults::rate, positive_money)).same_present(rates_note));
  add(Row("/defaults/budget", value(&Defaults::budget, positive_money))
          .at_most(Scale::number, "more"));

  // Budget entries the locked policy lacks only add limits: free (nothing is implied for them).
  add(Row("/budgets", flattened<Policy>("/budgets")).by_key());
  for (ScopeKind kind :
       {ScopeKind::team, ScopeKind::experiment, ScopeKind::project, ScopeKind::user}) {
    add(Row("/budgets/" + to_string(kind), budgets_of(kind)).by_key());
  }
  add(Row("/budgets/*/*/amount", value(&BudgetSpec::amount, positive_money))
          .required()
          .at_most(Scale::number, "more"));
  add(Row("/budgets/*/*/period",
          value(&BudgetSpec::period, one_of(parse_period, "day, week, month, total")))
          .same()
          .implied(with_parent, to_string(BudgetSpec{}.period)));
  add(Row("/budgets/*/*/max_run", value(&BudgetSpec::max_run, positive_money))
          .at_most(Scale::number, "more"));
  add(Row("/budgets/*/*/members", members_of()).by_key());
  add(Row("/budgets/*/*/members/unix_groups", value(&BudgetMembers::unix_groups, group_names))
          .required()
          .same("membership is set by the runner's owner"));
  add(Row("/budgets/*/*/expected_per_hour", value(&BudgetSpec::expected_per_hour, positive_money))
          .at_most(Scale::number, "more"));
  add(Row("/budgets/*/*/metric", value(&BudgetSpec::metric, text)).any());
  add(Row("/budgets/*/*/baseline_metric", value(&BudgetSpec::baseline_metric, number_in({})))
          .any());
  add(Row("/budgets/*/*/metric_goal", value(&BudgetSpec::metric_goal, text_in({"max", "min"})))
          .any());

  // A guard the locked policy leaves off, a layer may add with any values; one it turns on keeps
  // at least its defaults. The crash-loop guard is on without a policy: a locked policy's defaults
  // hold whether it writes them down or not, and only "enabled": false turns it off.
  add(Row("/guards", section(&Policy::guards, "/guards")).by_key());
  add(Row("/guards/crash_loop", optional_section(&Guards::crash_loop, "/guards/crash_loop"))
          .by_key());
  add(Row("/guards/crash_loop/enabled", value(&CrashLoopGuard::enabled, boolean))
          .on_kept()
          .implied(always, crash_loop.enabled));
  add(Row("/guards/crash_loop/max_failures", value(&CrashLoopGuard::max_failures, count))
          .at_most(Scale::number, "more")
          .implied(always, crash_loop.max_failures));
  add(Row("/guards/crash_loop/window", value(&CrashLoopGuard::window, positive_duration))
          .at_least(Scale::duration, "shorter")
          .implied(always, duration_text(crash_loop.window)));
  // Off by default: a locked policy that does not write it locks nothing (false is not "on").
  add(Row("/guards/crash_loop/shared", value(&CrashLoopGuard::shared, boolean)).on_kept());
  add(Row("/guards/respawn_loop", optional_section(&Guards::respawn_loop, "/guards/respawn_loop"))
          .by_key());
  add(Row("/guards/respawn_loop/enabled", value(&RespawnLoopGuard::enabled, boolean))
          .on_kept()
          .implied(always, respawn_loop.enabled));
  add(Row("/guards/respawn_loop/max_restarts", value(&RespawnLoopGuard::max_restarts, count))
          .at_most(Scale::number, "more")
          .implied(always, respawn_loop.max_restarts));
  add(Row("/guards/respawn_loop/window", value(&RespawnLoopGuard::window, positive_duration))
          .at_least(Scale::duration, "shorter")
          .implied(always, duration_text(respawn_loop.window)));
  // A longer minimum life makes the fallback warn about more.
  add(Row("/guards/respawn_loop/min_life", value(&RespawnLoopGuard::min_life, positive_duration))
          .at_least(Scale::duration, "shorter")
          .implied(always, duration_text(respawn_loop.min_life)));
  add(Row("/guards/idle_gpu", optional_section(&Guards::idle_gpu, "/guards/idle_gpu")).by_key());
  // On whenever GPUs are measured: a locked policy keeps it on whether it writes it down or not.
  add(Row("/guards/idle_gpu/enabled", value(&IdleGpuGuard::enabled, boolean))
          .on_kept()
          .implied(always, idle_gpu.enabled));
  add(Row("/guards/idle_gpu/below_percent",
          value(&IdleGpuGuard::below_percent, number_in({0, true, 100, false})))
          .at_least(Scale::number, "lower")
          .implied(with_parent, idle_gpu.below_percent));
  add(Row("/guards/idle_gpu/for", value(&IdleGpuGuard::for_duration, positive_duration))
          .at_most(Scale::duration, "longer")
          .implied(with_parent, duration_text(idle_gpu.for_duration)));
  add(Row("/guards/stall", optional_section(&Guards::stall, "/guards/stall")).by_key());
  add(Row("/guards/stall/after", value(&StallGuard::after, positive_duration))
          .at_most(Scale::duration, "longer")
          .implied(with_parent, duration_text(stall.after))
          .flag("--stall-after"));
  add(Row("/guards/burn_rate", optional_section(&Guards::burn_rate, "/guards/burn_rate")).by_key());
  // A factor below 1 would warn about a run that burns less than expected.
  add(Row("/guards/burn_rate/factor", value(&BurnRateGuard::factor, number_in({1})))
          .at_most(Scale::number, "higher")
          .implied(with_parent, burn_rate.factor));

  // PUE is total facility power over IT power: never below 1.
  add(Row("/energy", section(&Policy::energy, "/energy")).by_key());
  add(Row("/energy/pue", value(&Energy::pue, number_in({1}))).same(energy_note));
  add(Row("/energy/kg_co2_per_kwh", value(&Energy::kg_co2_per_kwh, number_in({0})))
          .same(energy_note));
  add(Row("/energy/usd_per_kwh", value(&Energy::usd_per_kwh, number_in({0}))).same(energy_note));

  // Appended by the merge, never replaced: a layer adds notifications, it cannot silence any.
  add(Row("/webhooks", webhook_list()).any());
  // Webhook URLs (Slack's included) are credentials: the file names the variables that hold them.
  add(Row("/webhooks/*/url_env", value(&Webhook::url_env, env_name)).any());
  // Runner-held (issue 19): a file only the runner's identity reads holds the URL or the secret,
  // so users of a locked policy need neither in their environment and cannot read either. Read
  // with the runner's group only where the locked policy names the path (notify/runner_files).
  add(Row("/webhooks/*/url_file", value(&Webhook::url_file, absolute_file)).any());
  add(Row("/webhooks/*/secret_file", value(&Webhook::secret_file, absolute_file)).any());
  add(Row("/webhooks/*/format", value(&Webhook::format, text_in({"json", "slack"}))).any());
  add(Row("/webhooks/*/events", value(&Webhook::events, webhook_events)).any());
  add(Row("/webhooks/*/secret_env", value(&Webhook::secret_env, env_name)).any());
  add(Row("/webhooks/*/url",
          refused<Webhook>("a literal URL is refused: put it in an environment variable and name "
                           "that variable in \"url_env\" (secrets stay out of files)"))
          .unlisted()
          .any());
  add(Row("/webhooks/*/secret",
          refused<Webhook>("a literal secret is refused: put it in an environment variable and "
                           "name that variable in \"secret_env\" (secrets stay out of files)"))
          .unlisted()
          .any());

  add(Row("/metrics_dir", value(&Policy::metrics_dir, text)).any().flag("--metrics-dir"));
  return keys;
}

}  // namespace

const std::vector<PolicyKey>& policy_keys() {
  static const std::vector<PolicyKey> keys = build_keys();
  return keys;
}

namespace {

// A key (or one value of a key) that is accepted but does nothing yet.
struct WithoutEffect {
  std::string path;   // "/guards"
  std::string value;  // "" for the key whatever its value, "\"measured\"" for one value
  std::string what;   // what will make it act: "the runaway guards"
  std::string note;   // what happens meanwhile, if anything
};

void collect_without_effect(const json& node, std::vector<std::string>& path,
                            std::vector<WithoutEffect>& out) {
  if (!path.empty()) {
    if (const PolicyKey* key = find_policy_key(path); key && !key->no_effect_yet.empty()) {
      json::json_pointer pointer;
      for (const std::string& name : path) pointer /= name;
      out.push_back({pointer.to_string(), "", key->no_effect_yet, ""});
      return;
    }
  }
  if (!node.is_object()) return;
  for (const auto& [name, child] : node.items()) {
    path.push_back(name);
    collect_without_effect(child, path, out);
    path.pop_back();
  }
}

std::vector<WithoutEffect> without_effect(const json& document) {
  std::vector<WithoutEffect> out;
  std::vector<std::string> path;
  collect_without_effect(document, path, out);
  return out;
}

}  // namespace

std::vector<std::string> keys_without_effect(const json& document) {
  std::vector<std::string> out;
  for (const WithoutEffect& key : without_effect(document)) {
    out.push_back(key.path + ": " + (key.value.empty() ? "" : key.value + " ") +
                  "has no effect yet (" +
                  (key.note.empty() ? "not built: " + key.what
                                    : key.what + " is not built yet; " + key.note) +
                  ")");
  }
  return out;
}

std::vector<std::string> locked_keys_without_effect(const json& document) {
  std::vector<std::string> out;
  for (const WithoutEffect& key : without_effect(document)) {
    out.push_back(key.path + ": " + (key.value.empty() ? "" : key.value + " ") +
                  "is not implemented yet (" + key.what +
                  "): a locked policy may set only keys that act; remove it until it is built");
  }
  return out;
}

bool path_matches(std::string_view pattern, const std::vector<std::string>& path) {
  std::size_t i = 0;
  while (!pattern.empty()) {
    pattern.remove_prefix(1);  // the '/'
    std::string_view segment = pattern.substr(0, pattern.find('/'));
    pattern.remove_prefix(segment.size());
    if (i >= path.size() || (segment != "*" && segment != path[i])) return false;
    ++i;
  }
  return i == path.size();
}

const PolicyKey* find_policy_key(const std::vector<std::string>& path) {
  for (const PolicyKey& key : policy_keys()) {
    if (path_matches(key.path, path)) return &key;
  }
  return nullptr;
}

const PolicyKey* policy_key_for_flag(std::string_view flag) {
  for (const PolicyKey& key : policy_keys()) {
    if (!key.flag.empty() && key.flag == flag) return &key;
  }
  return nullptr;
}

}  // namespace spendcap
