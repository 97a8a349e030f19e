#include "spendcap/run/run_defaults.hpp"

#include "spendcap/base/duration.hpp"
#include "spendcap/base/money.hpp"
#include "spendcap/base/text.hpp"

namespace spendcap {

namespace {

std::optional<std::string> variable(const Environment& env, const char* name) {
  auto it = env.find(name);
  if (it == env.end() || it->second.empty()) return std::nullopt;
  return it->second;
}

}  // namespace

RunRequest with_environment_defaults(const RunRequest& typed, const Environment& env,
                                     TermSources& sources) {
  RunRequest request = typed;
  auto name = [&](std::string& field, const char* term, const char* flag, const char* var) {
    if (!field.empty()) {
      sources[term] = flag;
    } else if (auto value = variable(env, var)) {
      require_printable_name(*value, var);
      field = *value;
      sources[term] = var;
    }
  };
  // The job of a run gets SPENDCAP_TEAM, _EXPERIMENT and _PROJECT (supervise/run_env.hpp): a
  // `spendcap run` inside it is charged to the same names unless it says otherwise.
  name(request.team, "team", "--team", "SPENDCAP_TEAM");
  name(request.experiment, "experiment", "--experiment", "SPENDCAP_EXPERIMENT");
  name(request.project, "project", "--project", "SPENDCAP_PROJECT");
  auto option = [&](std::optional<std::string>& field, const char* term, const char* flag,
                    const char* var, auto check) {
    if (field) {
      sources[term] = flag;
    } else if (auto value = variable(env, var)) {
      check(*value, var);
      field = *value;
      sources[term] = var;
    }
  };
  auto money = [](const std::string& value, const char* var) { parse_money_or_throw(value, var); };
  auto duration = [](const std::string& value, const char* var) {
    parse_duration_or_throw(value, var);
  };
  auto any = [](const std::string&, const char*) {};
  // Not SPENDCAP_BUDGET_USD: that is what the job is told its budget is, and a run inside the job
  // must not take its parent's whole budget as its own.
  option(request.budget, "budget", "--budget", "SPENDCAP_BUDGET", money);
  option(request.grace, "grace", "--grace", "SPENDCAP_GRACE", duration);
  // A rate and a GPU type are two ways to price a run: a flag for one hides a variable for the
  // other (`--gpu a100-80gb` with SPENDCAP_RATE=2 in the environment is priced by the GPU).
  bool priced_by_flag = typed.rate || typed.gpu || typed.instance;
  if (!priced_by_flag) {
    option(request.rate, "rate", "--rate", "SPENDCAP_RATE", money);
    if (!request.rate) option(request.gpu, "gpu", "--gpu", "SPENDCAP_GPU", any);
  } else {
    if (typed.rate) sources["rate"] = "--rate";
    if (typed.gpu) sources["gpu"] = "--gpu";
  }
  return request;
}

std::string policy_source_of(const LoadedPolicy& loaded, const std::string& pointer) {
  if (!loaded.document.contains(nlohmann::json::json_pointer(pointer))) return "";
  // The user's file is the last layer that is not the command line; a locked policy alone is
  // named by its path.
  for (auto it = loaded.sources.rbegin(); it != loaded.sources.rend(); ++it) {
    if (*it != "command line") return *it;
  }
  return "";
}

void apply_policy_defaults(RunRequest& request, const LoadedPolicy& loaded, TermSources& sources) {
  const Defaults& d = loaded.policy.defaults;
  auto name = [&](std::string& field, const std::optional<std::string>& value, const char* term) {
    if (!field.empty() || !value) return;
    require_printable_name(*value, std::string("/defaults/") + term);
    field = *value;
    sources[term] = policy_source_of(loaded, std::string("/defaults/") + term);
  };
  name(request.team, d.team, "team");
  name(request.experiment, d.experiment, "experiment");
  name(request.project, d.project, "project");
  if (!request.budget && d.budget) {
    request.budget = to_decimal(*d.budget);
    sources["budget"] = policy_source_of(loaded, "/defaults/budget");
  }
  for (const char* term : {"grace", "gpu"}) {
    if (!sources.count(term)) {
      std::string from = policy_source_of(loaded, std::string("/defaults/") + term);
      if (!from.empty()) sources[term] = from;
    }
  }
}

}  // namespace spendcap
