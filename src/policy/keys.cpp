#include "spendcap/policy/keys.hpp"

#include "spendcap/base/duration.hpp"
#include "spendcap/policy/policy.hpp"

namespace spendcap {

namespace {

using json = nlohmann::json;

// "60s" rather than format_duration's "1m": the way the defaults are documented.
json duration_text(Nanos duration) {
  if (duration % std::chrono::seconds(1) == Nanos(0)) {
    return std::to_string(std::chrono::duration_cast<std::chrono::seconds>(duration).count()) + "s";
  }
  return format_duration(duration);
}

// Row builders, so that each row reads as its rule.
PolicyKey any(std::string path) {
  return {std::move(path), Tightening::any};
}
PolicyKey same(std::string path, std::string note = {}) {
  return {std::move(path), Tightening::same, Scale::none, std::move(note)};
}
PolicyKey same_present(std::string path, std::string note) {
  return {std::move(path), Tightening::same_present, Scale::none, std::move(note)};
}
PolicyKey at_most(std::string path, Scale scale, std::string word) {
  return {std::move(path), Tightening::at_most, scale, std::move(word)};
}
PolicyKey at_least(std::string path, Scale scale, std::string word) {
  return {std::move(path), Tightening::at_least, scale, std::move(word)};
}
PolicyKey implied(PolicyKey key, Implied when, json value) {
  key.implied = when;
  key.default_value = std::move(value);
  return key;
}
PolicyKey flag(PolicyKey key, std::string name) {
  key.flag = std::move(name);
  return key;
}

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
  const auto with_parent = Implied::with_parent;  // a guard's defaults, where it is turned on
  const std::string rates_note = "rates cannot be changed";
  const std::string hardware_note = "the runner's hardware is fixed";
  const std::string energy_note = "energy figures are the runner's";

  std::vector<PolicyKey> keys = {
      any("/$schema"),
      any("/description"),
      implied(same("/currency", "spend is counted in the locked currency"), always,
              policy.currency),
      flag(same_present("/ledger", "every run here is recorded in the locked ledger"), "--ledger"),
      {"/locked", Tightening::ignore},
      flag(implied({"/mode", Tightening::enforce_kept}, always, to_string(policy.mode)), "--mode"),
  };
  for (const char* kind : {"gpu", "instance"}) {
    for (const char* price : {"on_demand", "spot", "reserved", "peak_tflops"}) {
      keys.push_back(same_present(std::string("/rates/") + kind + "/*/" + price, rates_note));
    }
  }
  keys.push_back(same_present("/rates/storage_per_gb_month", rates_note));

  // A layer may only shorten the default durations: a shorter grace stops a run sooner, a shorter
  // sync or claim horizon keeps the ledger closer to the truth.
  auto shorter = [&](const char* key, Nanos value, const char* flag_name) {
    PolicyKey row = implied(at_most(std::string("/defaults/") + key, Scale::duration, "longer"),
                            always, duration_text(value));
    return flag_name ? flag(std::move(row), flag_name) : row;
  };
  std::vector<PolicyKey> defaults_keys = {
      flag(implied(same("/defaults/pricing"), always, to_string(defaults.pricing)), "--pricing"),
      implied(same("/defaults/billing"), always, to_string(defaults.billing)),
      shorter("grace", defaults.grace, "--grace"),
      shorter("kill_after", defaults.kill_after, "--kill-after"),
      shorter("grace_on_signal", defaults.grace_on_signal, nullptr),
      shorter("kill_after_on_signal", defaults.kill_after_on_signal, nullptr),
      shorter("interval", defaults.interval, "--interval"),
      shorter("sync", defaults.sync, "--sync"),
      shorter("claim_horizon", defaults.claim_horizon, "--claim-horizon"),
      flag(implied({"/defaults/checkpoint_signal", Tightening::signal_kept}, always,
                   signal_name(defaults.checkpoint_signal)),
           "--checkpoint-signal"),
      any("/defaults/warn_at"),
      flag(same("/defaults/gpu", hardware_note), "--gpu"),
      flag(at_least("/defaults/gpus", Scale::number, "fewer"), "--gpus"),
      flag(same("/defaults/instance", hardware_note), "--instance"),
      flag(at_least("/defaults/instances", Scale::number, "fewer"), "--instances"),

      // Budget entries the locked policy lacks only add limits: free (no row is implied for them).
      at_most("/budgets/*/*/amount", Scale::number, "more"),
      implied(same("/budgets/*/*/period"), with_parent, to_string(BudgetSpec{}.period)),
      at_most("/budgets/*/*/max_run", Scale::number, "more"),
      at_most("/budgets/*/*/expected_per_hour", Scale::number, "more"),
      any("/budgets/*/*/metric"),
      any("/budgets/*/*/baseline_metric"),
      any("/budgets/*/*/metric_goal"),

      // A guard the locked policy leaves off, a layer may add with any values.
      implied(at_most("/guards/crash_loop/max_failures", Scale::number, "more"), with_parent,
              crash_loop.max_failures),
      implied(at_least("/guards/crash_loop/window", Scale::duration, "shorter"), with_parent,
              duration_text(crash_loop.window)),
      implied(at_most("/guards/respawn_loop/max_restarts", Scale::number, "more"), with_parent,
              respawn_loop.max_restarts),
      implied(at_least("/guards/respawn_loop/window", Scale::duration, "shorter"), with_parent,
              duration_text(respawn_loop.window)),
      implied(at_least("/guards/idle_gpu/below_percent", Scale::number, "lower"), with_parent,
              idle_gpu.below_percent),
      implied(at_most("/guards/idle_gpu/for", Scale::duration, "longer"), with_parent,
              duration_text(idle_gpu.for_duration)),
      implied(at_most("/guards/stall/after", Scale::duration, "longer"), with_parent,
              duration_text(stall.after)),
      implied(at_most("/guards/burn_rate/factor", Scale::number, "higher"), with_parent,
              burn_rate.factor),

      same("/energy/pue", energy_note),
      same("/energy/kg_co2_per_kwh", energy_note),
      same("/energy/usd_per_kwh", energy_note),
      any("/webhooks"),  // appended by the merge, never replaced
      any("/metrics_dir"),
  };
  keys.insert(keys.end(), std::make_move_iterator(defaults_keys.begin()),
              std::make_move_iterator(defaults_keys.end()));
  return keys;
}

}  // namespace

const std::vector<PolicyKey>& policy_keys() {
  static const std::vector<PolicyKey> keys = build_keys();
  return keys;
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
