// JSON as text, for everything spendcap writes (ledger columns, status file, ps/budgets --json).
// Commands, tag values and rows from other users may hold bytes that are not UTF-8: nlohmann's
// default dump throws on them, which failed whole commands. Each invalid byte is written as U+FFFD
// instead (lossy, but JSON must be UTF-8; the job itself always gets its bytes untouched).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace spendcap {

inline std::string dump_json(const nlohmann::json& value, int indent = -1) {
  return value.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace spendcap
