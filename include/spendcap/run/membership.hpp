// Team membership: a budget may name its members ("members": {"unix_groups": [...]} in the
// policy, kept with the budget's rule in the ledger), and then only they and the ledger's owner
// may charge runs to it (`run --team`); who may stop and accept runs is ledger/stop_rule.hpp's
// rule, which the ledger checks itself (`stop`, `stop --clear`, `accept`). The rules are
// read from the ledger (capped by a locked policy), never from the caller's own policy, so a
// shared ledger enforces them whatever file its users load. A caller is a member when its real
// gid or one of its supplementary groups (getgroups) is one of the groups.
#pragma once

#include <string>
#include <vector>

#include "spendcap/ledger/ledger.hpp"

namespace spendcap {

// The groups of `scope`'s budget in force that the caller is not in, when the budget names members
// and the caller is neither the ledger's owner nor in any of them; empty when it may act.
std::vector<std::string> missing_membership(Ledger& ledger, const Scope& scope);

// Throws Error (125) naming the scope, the groups and the caller when the caller may not act on
// each of `scopes`. `action` ends the message: "charge runs to it", "stop its runs".
void require_membership(Ledger& ledger, const std::vector<Scope>& scopes,
                        const std::string& action);

}  // namespace spendcap
