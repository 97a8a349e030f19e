#include "spendcap/run/ledger_group.hpp"

#include <unistd.h>

#include <cerrno>

#include "spendcap/base/error.hpp"
#include "spendcap/ledger/backends.hpp"
#include "spendcap/process/credentials.hpp"

namespace spendcap {

namespace {

const StartGroups& groups() {
  return start_groups();
}

// Variables that point spendcap at other code, files or behaviour. Under the setgid install they
// would let a user steer a process that holds the ledger's group.
constexpr const char* kRedirecting[] = {"SPENDCAP_TEST_SWITCHES", "SPENDCAP_SPOOL_DIR",
                                        "SPENDCAP_NVML_LIBRARY"};

void drop_for_good() {
  drop_group_for_good();
}

}  // namespace

bool installed_setgid() {
  return groups().real != groups().ledger;
}

void set_aside_ledger_group() {
  if (!installed_setgid()) return;
  set_aside_group();
}

void refuse_redirecting_environment(const Environment& env) {
  if (!installed_setgid()) return;
  for (const auto& [name, value] : env) {
    bool redirecting = name.starts_with("SPENDCAP_TEST_");
    for (const char* listed : kRedirecting) redirecting = redirecting || name == listed;
    if (!redirecting) continue;
    throw Error(name, "refused: this spendcap is installed setgid for a shared ledger",
                "unset " + name + "; it is for tests and personal ledgers only");
  }
}

void require_locked_policy_when_setgid(bool locked, const std::string& ledger_url) {
  if (!installed_setgid() || locked) return;
  throw Error("setgid install",
              "no locked /etc/spendcap/policy.json: it must name the shared ledger (not " +
                  ledger_url + ")",
              "the runner's owner installs it with scripts/install-shared-runner.sh");
}

std::unique_ptr<Ledger> open_ledger_as_installed(const std::string& url, LedgerOptions options) {
  if (!installed_setgid()) return open_ledger(url, std::move(options));
  // A file the user's spendcap created would be the user's, and its owner may change budgets.
  options.create_if_missing = false;
  raise_group();
  std::unique_ptr<Ledger> ledger;
  try {
    ledger = open_ledger(url, std::move(options));
  } catch (...) {
    drop_for_good();
    throw;
  }
  drop_for_good();
  if (::getuid() != 0 && ledger->caller_is_owner()) {
    throw Error("ledger " + ledger->url(), "the shared ledger belongs to you, not to root",
                "the runner's owner recreates it with scripts/install-shared-runner.sh");
  }
  return ledger;
}

}  // namespace spendcap
