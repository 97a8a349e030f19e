#include "spendcap/cli/ledger_group.hpp"

#include <unistd.h>

#include <cerrno>

#include "spendcap/base/error.hpp"
#include "spendcap/ledger/backends.hpp"

namespace spendcap {

namespace {

// The gids spendcap was started with; set once by set_aside_ledger_group(), before any thread.
struct StartGroups {
  bool captured = false;
  gid_t real = 0;
  gid_t ledger = 0;  // the setgid group (the effective gid at start)
};
StartGroups start_groups;

const StartGroups& groups() {
  if (!start_groups.captured) {
    start_groups.real = ::getgid();
    start_groups.ledger = ::getegid();
    start_groups.captured = true;
  }
  return start_groups;
}

// Variables that point spendcap at other code, files or behaviour. Under the setgid install they
// would let a user steer a process that holds the ledger's group.
constexpr const char* kRedirecting[] = {"SPENDCAP_TEST_SWITCHES", "SPENDCAP_SPOOL_DIR",
                                        "SPENDCAP_NVML_LIBRARY"};

[[noreturn]] void fail(const std::string& what) {
  throw Error("setgid install", what + ": " + errno_text(errno),
              "check the install (scripts/install-shared-runner.sh)");
}

// Real, effective and saved gid the caller's, and no way back. Root may regain any group (it has
// CAP_SETGID), so the "no way back" check is for everyone else.
void drop_for_good() {
  const StartGroups& g = groups();
  if (::setresgid(g.real, g.real, g.real) != 0) fail("cannot drop the group");
  gid_t real = 0, effective = 0, saved = 0;
  if (::getresgid(&real, &effective, &saved) != 0 || real != g.real || effective != g.real ||
      saved != g.real) {
    fail("the group was not dropped");
  }
  if (::geteuid() != 0 && ::setegid(g.ledger) == 0) {
    errno = EPERM;
    fail("the group could be regained after the drop");
  }
}

}  // namespace

bool installed_setgid() {
  return groups().real != groups().ledger;
}

void set_aside_ledger_group() {
  if (!installed_setgid()) return;
  if (::setegid(groups().real) != 0) fail("cannot set the group aside");
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
  if (::setegid(groups().ledger) != 0) fail("cannot raise the group to open the ledger");
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
