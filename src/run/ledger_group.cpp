#include "spendcap/run/ledger_group.hpp"

#include <linux/capability.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "spendcap/base/error.hpp"
#include "spendcap/ledger/backends.hpp"
#include "spendcap/ledger/spool.hpp"
#include "spendcap/notify/runner_files.hpp"
#include "spendcap/process/credentials.hpp"
#include "spendcap/shared_runner/adoption.hpp"

namespace spendcap {

namespace {

[[noreturn]] void fail(const std::string& what) {
  throw Error("setgid install", what + ": " + errno_text(errno),
              "check the install (scripts/install-shared-runner.sh)");
}

// ---- the ledger's group: the syscalls ----

// The gids spendcap was started with, captured at the first call: the real one and the one the
// binary's setgid bit (or the runner) gave: equal when not installed setgid.
struct StartGroups {
  gid_t real = 0;
  gid_t ledger = 0;
};

const StartGroups& groups() {
  static StartGroups start = [] {
    StartGroups g;
    g.real = ::getgid();
    g.ledger = ::getegid();
    return g;
  }();
  return start;
}

// Effective gid the caller's; the saved gid keeps the ledger's group.
void set_aside_group() {
  if (::setegid(groups().real) != 0) fail("cannot set the group aside");
}

// Effective gid the ledger's group again (for one open).
void raise_group() {
  if (::setegid(groups().ledger) != 0) fail("cannot raise the group to open the ledger");
}

// Real, effective and saved gid the caller's, checked. Root may regain any group (it has
// CAP_SETGID), so the "no way back" check is for everyone else.
void drop_group_for_good() {
  const StartGroups& g = groups();
  if (::setresgid(g.real, g.real, g.real) != 0) fail("cannot drop the group");
  gid_t real = 0, effective = 0, saved = 0;
  if (::getresgid(&real, &effective, &saved) != 0 || real != g.real || effective != g.real ||
      saved != g.real) {
    fail("the group was not dropped");
  }
  if (::geteuid() != 0 && !(effective_capabilities() & cap_bit(CAP_SETGID)) &&
      ::setegid(g.ledger) == 0) {
    errno = EPERM;
    fail("the group could be regained after the drop");
  }
}

// ---- the rules ----

// Variables that point spendcap at other code, files or behaviour. Under the setgid install they
// would let a user steer a process that holds the ledger's group.
constexpr const char* kRedirecting[] = {"SPENDCAP_TEST_SWITCHES", "SPENDCAP_SPOOL_DIR",
                                        "SPENDCAP_NVML_LIBRARY"};

// A process of the runner (its supervisor, or a runner call that stays the service user's) is out
// of the caller's reach, so it keeps the group set aside (the saved gid) for the runner's spool;
// the caller's own setgid process drops it for good.
bool keeps_the_group() {
  const RunnerCall* call = runner_call();
  return runner_run() || (call && call->settled && ::getuid() == call->service_uid);
}

void drop_for_good() {
  if (keeps_the_group()) {
    set_aside_group();
  } else {
    drop_group_for_good();
  }
}

// The locked policy's ledger URL ("" when none): root's file, read before the caller's.
std::string locked_ledger_url() {
  std::ifstream file("/etc/spendcap/policy.json");
  if (!file) return "";
  nlohmann::json document = nlohmann::json::parse(file, nullptr, false);
  if (!document.is_object() || !document.contains("ledger") || !document["ledger"].is_string()) {
    return "";
  }
  return document["ledger"].get<std::string>();
}

// Whether this process logs in to a PostgreSQL ledger as the runner's service user: the runner's
// supervisor, or a runner call that stayed the service user's. Without a privileged runner
// installed, whoever reads the locked policy connects as its URL says (the setgid install).
bool connects_as_the_service_user() {
  if (runner_run()) return true;
  if (const RunnerCall* call = runner_call()) {
    return call->settled && ::getuid() == call->service_uid;
  }
  std::error_code error;
  return !std::filesystem::exists("/etc/spendcap/runner.json", error);
}

}  // namespace

std::string ledger_password_as_installed(const Policy& policy,
                                         const std::optional<Policy>& locked) {
  bool service_users = policy.ledger_password_file && locked &&
                       locked->ledger_password_file == policy.ledger_password_file;
  if (service_users && !connects_as_the_service_user()) return "";
  return ledger_password(policy, locked);
}

void settle_runner_process() {
  if (const RunnerCall* call = runner_call(); call && !call->settled) {
    settle_runner_call(locked_ledger_url().starts_with("postgres"));
  }
  if (keeps_the_group()) {
    if (std::optional<std::string> spool = runner_spool()) {
      use_runner_spool(*spool, groups().ledger);
    }
  }
}

void with_ledger_group(const std::function<void()>& body) {
  if (!installed_setgid() || !keeps_the_group()) return body();
  raise_group();
  try {
    body();
  } catch (...) {
    set_aside_group();
    throw;
  }
  set_aside_group();
}

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
