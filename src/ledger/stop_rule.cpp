// Who may stop and accept whose runs. Contract in stop_rule.hpp.
#include "spendcap/ledger/stop_rule.hpp"

#include <grp.h>
#include <pwd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <memory>

#include "spendcap/base/acting_user.hpp"
#include "spendcap/ledger/ledger_store.hpp"

namespace spendcap {

namespace {

// The caller's real gid and supplementary groups. The effective gid is left out: while setgid it
// is the install's group (run/ledger_group.hpp), which no user is a member of.
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

std::string groups_text(const std::vector<std::string>& groups) {
  std::string text = groups.size() == 1 ? "the group " : "any of the groups ";
  for (size_t i = 0; i < groups.size(); ++i) text += (i ? ", " : "") + groups[i];
  return text;
}

bool names_members(const std::optional<BudgetRule>& rule) {
  return rule && !rule->member_groups.empty();
}

bool in_any(const Caller& caller, const std::vector<std::string>& groups) {
  return std::any_of(groups.begin(), groups.end(), caller.in_group);
}

// "" when the caller is in one of the groups `rule` names (or it names none).
std::string why_not_member(const Caller& caller, const std::optional<BudgetRule>& rule) {
  if (!names_members(rule) || in_any(caller, rule->member_groups)) return "";
  return caller.user + " is not in " + groups_text(rule->member_groups) + " of " +
         to_string(rule->scope);
}

// Whose a job key is for stopping it: its owner, or (only refused runs) whoever tried it first.
const RunRecord& stop_owner(const std::vector<RunRecord>& job_runs) {
  const RunRecord* owner = job_key_owner(job_runs);
  return owner ? *owner : job_runs.front();
}

// The job key's own user, or a member its team's budget names. `job_runs` is not empty.
bool speaks_for_job(const Asker& asker, const RuleOf& rule_of,
                    const std::vector<RunRecord>& job_runs) {
  if (asker.owner) return true;
  const RunRecord* owner = &stop_owner(job_runs);
  if (owner->user == asker.caller.user) return true;
  if (owner->team.empty()) return false;
  std::optional<BudgetRule> team = rule_of({ScopeKind::team, owner->team});
  return names_members(team) && in_any(asker.caller, team->member_groups);
}

}  // namespace

Caller current_caller() {
  Caller caller;
  // The acting (filesystem) uid: the caller's, also in a process of the runner's service user.
  uid_t uid = acting_uid();
  if (passwd* entry = ::getpwuid(uid)) {
    caller.user = entry->pw_name;
  } else {
    caller.user = std::to_string(uid);
  }
  auto mine = std::make_shared<std::vector<gid_t>>(caller_groups());
  caller.in_group = [mine](const std::string& name) {
    std::optional<gid_t> gid = group_id(name);
    return gid && std::find(mine->begin(), mine->end(), *gid) != mine->end();
  };
  return caller;
}

std::string why_not_act_on_run(const Asker& asker, const RunRecord& run, const RuleOf& rule_of) {
  if (asker.owner || run.user == asker.caller.user) return "";
  if (run.team.empty()) return "it is " + run.user + "'s and has no team";
  // The team first: its message is the one people recognise.
  for (ScopeKind kind : {ScopeKind::team, ScopeKind::experiment, ScopeKind::project}) {
    const std::string& name = kind == ScopeKind::team         ? run.team
                              : kind == ScopeKind::experiment ? run.experiment
                                                              : run.project;
    if (name.empty()) continue;
    std::string why = why_not_member(asker.caller, rule_of({kind, name}));
    if (!why.empty()) return why;
  }
  return "";
}

std::string why_not_accept_run(const Asker& asker, const RunRecord& run, const RuleOf& rule_of) {
  if (asker.owner || run.user == asker.caller.user) return "";
  if (!run.team.empty() && !names_members(rule_of({ScopeKind::team, run.team}))) {
    return "team:" + run.team + " names no members, so only " + run.user +
           " and the ledger's owner may accept it";
  }
  return why_not_act_on_run(asker, run, rule_of);
}

std::string why_not_order_scope(const Asker& asker, const Scope& scope, const RuleOf& rule_of,
                                const std::optional<RunRecord>& run,
                                const std::vector<RunRecord>& job_runs) {
  if (asker.owner) return "";
  const std::string& me = asker.caller.user;
  switch (scope.kind) {
    case ScopeKind::user:
      if (scope.name == me) return "";
      return "it would refuse every later run of " + scope.name + "'s: only " + scope.name +
             " (and the ledger's owner) may place it";
    case ScopeKind::team: {
      std::optional<BudgetRule> rule = rule_of(scope);
      if (!names_members(rule)) return "";  // an open team: everyone is its member
      std::string why = why_not_member(asker.caller, rule);
      return why.empty() ? ""
                         : why + ": only its members (and the ledger's owner) may stop its runs";
    }
    case ScopeKind::experiment:
    case ScopeKind::project: {
      std::optional<BudgetRule> rule = rule_of(scope);
      if (!names_members(rule)) {
        return "its budget names no members, and the order would refuse everyone's later runs "
               "in it: only the ledger's owner may place it";
      }
      std::string why = why_not_member(asker.caller, rule);
      return why.empty() ? ""
                         : why + ": only its members (and the ledger's owner) may stop its runs";
    }
    case ScopeKind::run:
      if (!run) return "no such run";
      return why_not_act_on_run(asker, *run, rule_of);
    case ScopeKind::job:
      if (job_runs.empty()) {
        return "no run has this job key yet, and the order would refuse whoever starts one: only "
               "the ledger's owner may place it";
      }
      if (!speaks_for_job(asker, rule_of, job_runs)) {
        const RunRecord& owner = stop_owner(job_runs);
        return "job key " + scope.name + " is " + owner.user + "'s" +
               (owner.team.empty() ? "" : " of team " + owner.team) + ": only " + owner.user +
               (owner.team.empty() ? "" : ", the members team:" + owner.team + "'s budget names,") +
               " and the ledger's owner may stop it";
      }
      for (const RunRecord& each : job_runs) {
        std::string why = why_not_act_on_run(asker, each, rule_of);
        if (!why.empty()) return "its run " + each.id.substr(0, 8) + ": " + why;
      }
      return "";
  }
  return "unknown scope";
}

bool names_caller(const Asker& asker, const Scope& scope, const RuleOf& rule_of,
                  const std::optional<RunRecord>& run, const std::vector<RunRecord>& job_runs) {
  if (asker.owner) return true;
  switch (scope.kind) {
    case ScopeKind::user:
      return scope.name == asker.caller.user;
    case ScopeKind::team:
    case ScopeKind::experiment:
    case ScopeKind::project: {
      std::optional<BudgetRule> rule = rule_of(scope);
      return names_members(rule) && in_any(asker.caller, rule->member_groups);
    }
    case ScopeKind::run:
      if (!run) return false;
      if (run->user == asker.caller.user) return true;
      if (run->team.empty()) return false;
      {
        std::optional<BudgetRule> team = rule_of({ScopeKind::team, run->team});
        return names_members(team) && why_not_act_on_run(asker, *run, rule_of).empty();
      }
    case ScopeKind::job:
      return !job_runs.empty() && speaks_for_job(asker, rule_of, job_runs);
  }
  return false;
}

const RunRecord* job_key_owner(const std::vector<RunRecord>& job_runs) {
  const RunRecord* first = nullptr;
  for (const RunRecord& run : job_runs) {
    if (run.status == RunStatus::refused) continue;
    if (!first || run.started_at < first->started_at ||
        (run.started_at == first->started_at && run.id < first->id)) {
      first = &run;
    }
  }
  return first;
}

std::string why_not_join_job(const std::vector<RunRecord>& job_runs, const RunRecord& run) {
  std::vector<RunRecord> others;
  for (const RunRecord& other : job_runs) {
    if (other.id != run.id) others.push_back(other);
  }
  const RunRecord* owner = job_key_owner(others);
  if (!owner || (owner->team == run.team && owner->user == run.user)) return "";
  return job_taken_message(*owner, run);
}

std::string job_taken_message(const RunRecord& owner, const RunRecord& run) {
  std::string whose = owner.team.empty() ? owner.user + "'s (no team)"
                                         : "team " + owner.team + "'s, " + owner.user + "'s";
  return "job key " + run.job_key + " is " + whose + " (its first run " + owner.id.substr(0, 8) +
         "): a run of " + (run.team.empty() ? "no team" : "team " + run.team) + " by " + run.user +
         " cannot join, resize or spend it (give another --job-key)";
}

}  // namespace spendcap
