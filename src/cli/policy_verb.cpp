// `policy check` and `policy keys` (admin.hpp).
#include "spendcap/cli/admin.hpp"

#include <CLI/CLI.hpp>
#include <memory>

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

int policy_check_command(const std::vector<std::string>& files) {
  int status = 0;
  for (const std::string& file : files) {
    try {
      nlohmann::json document = read_policy_file(file);
      Policy policy = parse_policy(document, file);
      if (policy.locked) {
        if (auto errors = locked_keys_without_effect(document); !errors.empty()) {
          throw PolicyError(file, std::move(errors));
        }
      }
      size_t budgets = 0;
      for (const auto& [kind, named] : policy.budgets) budgets += named.size();
      std::cout << file << ": ok (" << policy.gpu_rates.size() << " GPU types, "
                << policy.instance_rates.size() << " instance types, " << budgets << " budgets"
                << (policy.locked ? ", locked" : "") << ")\n";
      for (const std::string& key : keys_without_effect(document)) {
        std::cout << file << ": warning: " << escape_for_terminal(key) << "\n";
      }
    } catch (const Error& error) {
      // A policy's own errors are listed below it; its hint (run `spendcap policy check`) is
      // what the user is doing already.
      bool listed = dynamic_cast<const PolicyError*>(&error) != nullptr;
      std::cerr << "spendcap: "
                << escape_for_terminal(listed ? format_error(Error(error.subject(), error.why()))
                                              : format_error(error))
                << "\n";
      for (const std::string& detail : error.details) {
        std::cerr << "  " << escape_for_terminal(detail) << "\n";
      }
      status = to_int(ExitCode::internal);
    }
  }
  return status;
}

int policy_keys_command() {
  for (const PolicyKey& key : policy_keys()) {
    if (!key.listed) continue;
    std::string line = key.path;
    if (!key.flag.empty()) line += "  (" + key.flag + ")";
    if (!key.no_effect_yet.empty()) line += "  no effect yet: " + key.no_effect_yet;
    std::cout << line << "\n";
  }
  return 0;
}

namespace {

VerbRun add_policy(CLI::App& command, CLI::App&, VerbContext&) {
  auto policy_files = std::make_shared<std::vector<std::string>>();
  CLI::App* policy = &command;
  policy->require_subcommand(1);
  CLI::App* check = policy->add_subcommand("check", "validate policy files");
  check->add_option("file", *policy_files, "policy files")->required();
  CLI::App* keys =
      policy->add_subcommand("keys", "every policy key, its flag, and whether it acts yet");
  return [policy_files, check, keys] {
    if (*check) return policy_check_command(*policy_files);
    if (*keys) return policy_keys_command();
    return to_int(ExitCode::internal);
  };
}

}  // namespace

const Verb kPolicyVerb = {"policy", "policy files", add_policy};

}  // namespace spendcap
