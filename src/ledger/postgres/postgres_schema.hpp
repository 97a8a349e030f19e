// The PostgreSQL ledger's schema: numbered migrations (the same version numbers as SQLite's) and
// the routines (functions, trigger, grants) reinstalled after every migration. Private to the
// store.
#pragma once

#include <string>
#include <vector>

#include "spendcap/ledger/ledger_store.hpp"

namespace spendcap::postgres_schema {

// Migration N (1-based) takes the schema from version N-1 to N. Never edit one that has shipped:
// add the next (and, when it adds runs columns, add them to kRunColumns and kMutableRunColumns,
// or to a group that update_run writes only when the run carries it, as the GPU record's).
extern const std::vector<std::string> kMigrations;

// The runs columns, in the order the store reads them.
extern const char* const kRunColumns;

// The functions, the usage trigger and the roles' grants, for the current schema version: run
// (CREATE OR REPLACE) after every migration, so a migration never has to restate them.
std::string routines();

// The part of routines() that says who may stop and accept whose runs (ledger/stop_rule.hpp's rule
// by login role) and queues lost runs' events (postgres_access.cpp); routines() includes it.
std::string access_routines();
// Their grants, run once the runner role exists (at the end of routines()).
std::string access_grants();
// The grant rule's functions (postgres_grants.cpp): admission and heartbeat in one call each.
// Part of routines().
std::string grant_routines();

// The arguments and answers of those functions: a locked policy's caps as the JSON they take, and
// their JSON answer as BudgetLedger reads it.
std::string caps_json(const std::vector<BudgetRule>& caps);
ServerGrant server_grant_of_json(const std::string& text);
RefusalCount refusal_count_of_json(const std::string& text);  // spendcap_count_refusal's

}  // namespace spendcap::postgres_schema
