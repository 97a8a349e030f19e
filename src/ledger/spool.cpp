// The spool of final rows that the ledger did not take. Contract in spool.hpp.
//
// A file: <spool_dir>/<run id>.json = {"ledger": URL, "final": {"id", "status", "reason",
// "exit_code", "spend_micros", "elapsed_seconds"}}. Money is kept in micro-units, so a replayed row
// is exactly the row that was spooled.
#include "spendcap/ledger/spool.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "spendcap/base/error.hpp"
#include "spendcap/base/files.hpp"

namespace spendcap {

namespace {

// A run id becomes a file name: it must not be able to name another file.
bool is_safe_file_name(const std::string& name) {
  return !name.empty() && name.front() != '.' && name.size() < 200 &&
         std::all_of(name.begin(), name.end(), [](char c) {
           return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
         });
}

nlohmann::json final_to_json(const RunFinal& final) {
  return {{"id", final.id},
          {"status", to_string(final.status)},
          {"reason", final.reason},
          {"exit_code", final.exit_code ? nlohmann::json(*final.exit_code) : nlohmann::json()},
          {"spend_micros", final.spend.micros},
          {"elapsed_seconds", final.elapsed_seconds}};
}

// The spooled row, or an exception whose message says what is wrong with it.
struct SpooledRow {
  std::string ledger_url;
  RunFinal final;
};
SpooledRow parse_spooled(const std::string& text) {
  nlohmann::json document = nlohmann::json::parse(text);
  const nlohmann::json& final = document.at("final");
  SpooledRow row;
  row.ledger_url = document.at("ledger").get<std::string>();
  row.final.id = final.at("id").get<std::string>();
  auto status = parse_run_status(final.at("status").get<std::string>());
  if (!status || *status == RunStatus::running) {
    throw std::runtime_error("status " + final.at("status").dump() + " is not a final status");
  }
  row.final.status = *status;
  row.final.reason = final.at("reason").get<std::string>();
  if (!final.at("exit_code").is_null()) row.final.exit_code = final.at("exit_code").get<int>();
  row.final.spend = Money{final.at("spend_micros").get<std::int64_t>()};
  row.final.elapsed_seconds = final.at("elapsed_seconds").get<double>();
  return row;
}

}  // namespace

std::string spool_dir() {
  if (const char* dir = std::getenv("SPENDCAP_SPOOL_DIR"); dir && *dir) return dir;
  return xdg_dir(XdgDir::state) + "/spendcap/spool";
}

std::string spool_final(const std::string& ledger_url, const RunFinal& final) {
  if (!is_safe_file_name(final.id)) {
    throw Error("spool", "run id " + final.id + " cannot be a file name");
  }
  std::string directory = spool_dir();
  make_private_directories(directory, "spool");
  std::string path = directory + "/" + final.id + ".json";
  std::string text =
      nlohmann::json{{"ledger", ledger_url}, {"final", final_to_json(final)}}.dump() + "\n";
  // Durable: the row must survive a crash of this host.
  write_file_atomically(path, text, 0600, "spool " + path);
  return path;
}

int replay_spool(Ledger& ledger) {
  std::string directory = spool_dir();
  std::vector<std::string> names;
  if (DIR* dir = opendir(directory.c_str())) {
    while (dirent* entry = readdir(dir)) {
      std::string name = entry->d_name;
      if (name.front() != '.' && name.ends_with(".json")) names.push_back(name);
    }
    closedir(dir);
  }
  std::sort(names.begin(), names.end());

  int replayed = 0;
  std::string url = ledger.url();
  for (const std::string& name : names) {
    std::string path = directory + "/" + name;
    std::ifstream file(path);
    if (!file) continue;  // replayed meanwhile by another spendcap
    std::stringstream text;
    text << file.rdbuf();
    SpooledRow row;
    try {
      row = parse_spooled(text.str());
    } catch (const std::exception& e) {
      // Kept for a person to look at, out of the way of the next replay.
      std::string bad = path + ".bad";
      std::rename(path.c_str(), bad.c_str());
      std::cerr << "spendcap: spooled row " << path << " is corrupt: " << e.what() << " (moved to "
                << bad << ")\n";
      continue;
    }
    if (row.ledger_url != url) continue;
    try {
      ledger.finish_run(row.final);  // false: final already, which is as good as accepted
      ::unlink(path.c_str());
      ++replayed;
    } catch (const std::exception& e) {
      std::cerr << "spendcap: could not replay the spooled final row of run " << row.final.id
                << " to " << url << ": " << e.what() << " (kept in " << path << ")\n";
    }
  }
  return replayed;
}

}  // namespace spendcap
