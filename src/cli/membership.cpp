#include "spendcap/cli/membership.hpp"

#include <grp.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "spendcap/base/error.hpp"
#include "spendcap/base/text.hpp"
#include "spendcap/supervise/run_env.hpp"

namespace spendcap {

namespace {

// The caller's real gid and supplementary groups. The effective gid is left out: while setgid it
// is the install's group (cli/ledger_group.hpp), which no user is a member of.
std::vector<gid_t> caller_groups() {
  std::vector<gid_t> groups = {::getgid()};
  int count = ::getgroups(0, nullptr);
  if (count > 0) {
    std::vector<gid_t> supplementary(static_cast<std::size_t>(count));
    count = ::getgroups(count, supplementary.data());
    if (count > 0)
      groups.insert(groups.end(), supplementary.begin(), supplementary.begin() + count);
  }
  return groups;
}

// The gid of a group name; nullopt for a name this host does not know (nobody is its member).
std::optional<gid_t> group_id(const std::string& name) {
  std::vector<char> buffer(16384);
  group entry{};
  group* found = nullptr;
  while (::getgrnam_r(name.c_str(), &entry, buffer.data(), buffer.size(), &found) == ERANGE &&
         buffer.size() < (1u << 24)) {
    buffer.resize(buffer.size() * 2);
  }
  if (!found) return std::nullopt;
  return found->gr_gid;
}

}  // namespace

std::vector<std::string> missing_membership(Ledger& ledger, const Scope& scope) {
  std::vector<BudgetRule> rules = ledger.budget_rules();
  auto rule = std::find_if(rules.begin(), rules.end(),
                           [&](const BudgetRule& candidate) { return candidate.scope == scope; });
  if (rule == rules.end() || rule->member_groups.empty()) return {};
  if (ledger.caller_is_owner()) return {};
  std::vector<gid_t> mine = caller_groups();
  for (const std::string& name : rule->member_groups) {
    std::optional<gid_t> gid = group_id(name);
    if (gid && std::find(mine.begin(), mine.end(), *gid) != mine.end()) return {};
  }
  return rule->member_groups;
}

void require_membership(Ledger& ledger, const std::vector<Scope>& scopes,
                        const std::string& action) {
  for (const Scope& scope : scopes) {
    std::vector<std::string> groups = missing_membership(ledger, scope);
    if (groups.empty()) continue;
    std::string which = groups.size() == 1 ? "the group " + groups.front()
                                           : "any of the groups " + join(groups, ", ");
    throw Error("--" + to_string(scope.kind) + " " + scope.name,
                user_name() + " is not in " + which + ": only the members of " + to_string(scope) +
                    " (and the ledger's owner) may " + action,
                "ask the ledger's owner to add you to " +
                    (groups.size() == 1 ? groups.front() : "one of them") + ", or give a " +
                    to_string(scope.kind) + " you belong to");
  }
}

}  // namespace spendcap
