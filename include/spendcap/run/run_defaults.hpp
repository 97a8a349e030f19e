// A project's run defaults: what `spendcap run` takes when a flag is not given, so that
// `spendcap run -- python train.py` is enough in a project. Precedence, highest first: the flag;
// its $SPENDCAP_* variable (SPENDCAP_TEAM, _EXPERIMENT, _PROJECT, _RATE, _GPU, _BUDGET, _GRACE);
// the policy's `defaults` (team, experiment, project, rate, gpu, budget, grace: the project's
// ./spendcap.json, found in the working directory or above it up to the git repository's root,
// policy/layers.hpp); the built-in defaults. A locked policy still wins where it locks (its rules
// check the merged layers). Each term remembers where it came from, for --dry-run.
#pragma once

#include <map>
#include <string>

#include "spendcap/base/environment.hpp"
#include "spendcap/policy/layers.hpp"
#include "spendcap/run/request.hpp"

namespace spendcap {

// Term ("team", "rate", "grace", ...) -> where its value came from ("--team", "SPENDCAP_TEAM",
// "./spendcap.json"). A term that is absent came from the built-in defaults.
using TermSources = std::map<std::string, std::string>;

// `request` with the flags it lacks filled from the $SPENDCAP_* variables, each validated under
// its variable's name (an empty variable counts as unset). Throws Error naming the variable.
RunRequest with_environment_defaults(const RunRequest& request, const Environment& env,
                                     TermSources& sources);

// Then the identity and budget the loaded policy's `defaults` give for what is still unset. The
// rate is resolved by settings.cpp, which knows which of --rate and --gpu came first.
void apply_policy_defaults(RunRequest& request, const LoadedPolicy& loaded, TermSources& sources);

// The layer that set `pointer` in the merged document: the user's policy file (or the locked one
// where only it says so); "" when no file sets it.
std::string policy_source_of(const LoadedPolicy& loaded, const std::string& pointer);

}  // namespace spendcap
