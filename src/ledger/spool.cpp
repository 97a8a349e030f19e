// The spool of final rows that the ledger did not take. Contract in spool.hpp.
//
// A file: <spool_dir>/<run id>.json = {"ledger": URL, "final": {"id", "status", "reason",
// "exit_code", "spend_micros", "elapsed_seconds", "gpu"?}}. Money is kept in micro-units, so a
// replayed row is exactly the row that was spooled; "gpu" (absent in older files) keeps the run's
// GPU figures.
#include "spendcap/ledger/spool.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <optional>

#include <nlohmann/json.hpp>

#include "spendcap/base/acting_user.hpp"
#include "spendcap/base/error.hpp"
#include "spendcap/base/files.hpp"
#include "spendcap/base/money.hpp"
#include "spendcap/ledger/run_gpu.hpp"

namespace spendcap {

namespace {

// A run id becomes a file name: it must not be able to name another file.
bool is_safe_file_name(const std::string& name) {
  return !name.empty() && name.front() != '.' && name.size() < 200 &&
         std::all_of(name.begin(), name.end(), [](char c) {
           return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
         });
}

template <class T>
nlohmann::json or_null(const std::optional<T>& value) {
  return value ? nlohmann::json(*value) : nlohmann::json();
}
std::optional<Money> money_or_none(const nlohmann::json& j) {
  if (j.is_null()) return std::nullopt;
  return Money{j.get<std::int64_t>()};
}
std::optional<double> double_or_none(const nlohmann::json& j) {
  if (j.is_null()) return std::nullopt;
  return j.get<double>();
}

nlohmann::json gpu_to_json(const RunGpu& g) {
  return {{"not_measured", g.not_measured},
          {"devices", g.devices},
          {"allocated_seconds", g.allocated_seconds},
          {"busy_seconds", or_null(g.busy_seconds)},
          {"idle_spend_micros", g.idle_spend ? nlohmann::json(g.idle_spend->micros) : nullptr},
          {"energy_kwh", or_null(g.energy_kwh)},
          {"co2_kg", or_null(g.co2_kg)},
          {"energy_cost_micros", g.energy_cost ? nlohmann::json(g.energy_cost->micros) : nullptr},
          {"sources", g.sources},
          {"timeline", timeline_to_text(g.timeline)}};
}

RunGpu gpu_from_json(const nlohmann::json& j) {
  RunGpu g;
  g.not_measured = j.at("not_measured").get<std::string>();
  g.devices = j.at("devices").get<int>();
  g.allocated_seconds = j.at("allocated_seconds").get<double>();
  g.busy_seconds = double_or_none(j.at("busy_seconds"));
  g.idle_spend = money_or_none(j.at("idle_spend_micros"));
  g.energy_kwh = double_or_none(j.at("energy_kwh"));
  g.co2_kg = double_or_none(j.at("co2_kg"));
  g.energy_cost = money_or_none(j.at("energy_cost_micros"));
  g.sources = j.at("sources").get<std::string>();
  g.timeline = timeline_from_text(j.at("timeline").get<std::string>());
  return g;
}

nlohmann::json final_to_json(const RunFinal& final) {
  nlohmann::json json = {
      {"id", final.id},
      {"status", to_string(final.status)},
      {"reason", final.reason},
      {"exit_code", final.exit_code ? nlohmann::json(*final.exit_code) : nlohmann::json()},
      {"spend_micros", final.spend.micros},
      {"elapsed_seconds", final.elapsed_seconds}};
  if (final.spendcap_exit_code) json["spendcap_exit_code"] = *final.spendcap_exit_code;
  if (final.tracker) json["tracker"] = *final.tracker;
  if (final.gpu) json["gpu"] = gpu_to_json(*final.gpu);
  // The rest of the row (absent in older files, and where the run had none).
  if (final.metric_name) json["metric_name"] = *final.metric_name;
  if (final.metric_value) json["metric_value"] = *final.metric_value;
  if (final.units) json["units"] = *final.units;
  if (final.egress_gb) json["egress_gb"] = *final.egress_gb;
  if (final.storage_peak_gb) json["storage_peak_gb"] = *final.storage_peak_gb;
  if (final.storage_spend) json["storage_spend_micros"] = final.storage_spend->micros;
  if (const auto& progress = final.last_progress) {
    json["last_progress"] = {
        {"line", progress->line},
        {"step", progress->step ? nlohmann::json(*progress->step) : nlohmann::json()},
        {"total_steps",
         progress->total_steps ? nlohmann::json(*progress->total_steps) : nlohmann::json()}};
  }
  if (const auto& checkpoint = final.checkpoint) {
    json["checkpoint"] = {{"signal", checkpoint->signal},
                          {"signalled", checkpoint->signalled},
                          {"signal_seconds", checkpoint->signal_seconds},
                          {"written_seconds", checkpoint->written_seconds
                                                  ? nlohmann::json(*checkpoint->written_seconds)
                                                  : nlohmann::json()}};
  }
  return json;
}

template <class T>
std::optional<T> optional_at(const nlohmann::json& json, const char* key) {
  if (!json.contains(key) || json.at(key).is_null()) return std::nullopt;
  return json.at(key).get<T>();
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
  if (auto spendcap_exit = final.find("spendcap_exit_code");
      spendcap_exit != final.end() && !spendcap_exit->is_null()) {
    row.final.spendcap_exit_code = spendcap_exit->get<int>();
  }
  // A longer one is not a tracker id spendcap wrote (the stores would refuse it): left out.
  row.final.tracker = optional_at<std::string>(final, "tracker");
  if (row.final.tracker && row.final.tracker->size() > kMaxTrackerTagBytes) {
    row.final.tracker.reset();
  }
  row.final.spend = Money{final.at("spend_micros").get<std::int64_t>()};
  row.final.elapsed_seconds = final.at("elapsed_seconds").get<double>();
  if (final.contains("gpu")) row.final.gpu = gpu_from_json(final.at("gpu"));
  row.final.metric_name = optional_at<std::string>(final, "metric_name");
  row.final.metric_value = optional_at<double>(final, "metric_value");
  row.final.units = optional_at<double>(final, "units");
  row.final.egress_gb = optional_at<double>(final, "egress_gb");
  row.final.storage_peak_gb = optional_at<double>(final, "storage_peak_gb");
  if (auto micros = optional_at<std::int64_t>(final, "storage_spend_micros")) {
    row.final.storage_spend = Money{*micros};
  }
  if (final.contains("last_progress")) {
    const nlohmann::json& progress = final.at("last_progress");
    RunLastProgress last;
    last.line = progress.at("line").get<std::string>().substr(0, 4 * kLastProgressChars);
    last.step = optional_at<std::int64_t>(progress, "step");
    last.total_steps = optional_at<std::int64_t>(progress, "total_steps");
    row.final.last_progress = last;
  }
  if (final.contains("checkpoint")) {
    const nlohmann::json& checkpoint = final.at("checkpoint");
    RunCheckpoint facts;
    facts.signal = checkpoint.at("signal").get<std::string>();
    facts.signalled = checkpoint.at("signalled").get<int>();
    facts.signal_seconds = checkpoint.at("signal_seconds").get<double>();
    facts.written_seconds = optional_at<double>(checkpoint, "written_seconds");
    row.final.checkpoint = facts;
  }
  return row;
}

}  // namespace

namespace {

// A shared runner's process: its spool (use_runner_spool), else the user's own.
struct RunnerSpool {
  std::string dir;
  uid_t owner = 0;  // the service user: the real uid of every runner process
  gid_t group = 0;
};
std::optional<RunnerSpool> runner_spool_in_use;

}  // namespace

void use_runner_spool(const std::string& directory, gid_t group) {
  runner_spool_in_use = RunnerSpool{directory, ::getuid(), group};
}

std::string spool_dir() {
  if (runner_spool_in_use) return runner_spool_in_use->dir;
  if (const char* dir = std::getenv("SPENDCAP_SPOOL_DIR"); dir && *dir) return dir;
  return xdg_dir(XdgDir::state) + "/spendcap/spool";
}

std::string fallback_spool_dir() {
  if (runner_spool_in_use) return "";
  const char* runtime = std::getenv("XDG_RUNTIME_DIR");
  if (!runtime || *runtime != '/') return "";
  std::string directory = std::string(runtime) + "/spendcap/spool";
  return directory == spool_dir() ? "" : directory;
}

std::string spool_final(const std::string& ledger_url, const RunFinal& final,
                        std::string* fallback_why) {
  if (!is_safe_file_name(final.id)) {
    throw Error("spool", "run id " + final.id + " cannot be a file name");
  }
  std::string directory = spool_dir();
  std::string text =
      nlohmann::json{{"ledger", ledger_url}, {"final", final_to_json(final)}}.dump() + "\n";
  // Durable: the row must survive a crash of this host.
  if (!runner_spool_in_use) {
    std::string path = directory + "/" + final.id + ".json";
    try {
      make_private_directories(directory, "spool");
      write_file_atomically(path, text, 0600, "spool " + path);
      return path;
    } catch (const Error& failed) {
      // The spool shares the ledger's filesystem as a rule (both under ~/.local): when that is
      // full, the row goes to the runtime directory's spool (another filesystem, a tmpfs kept
      // until reboot), replayed like the first, rather than the run being charged its ceiling.
      std::string fallback = fallback_spool_dir();
      if (fallback.empty()) throw;
      std::string second = fallback + "/" + final.id + ".json";
      make_private_directories(fallback, "spool");
      write_file_atomically(second, text, 0600, "spool " + second);
      if (fallback_why) *fallback_why = format_error(failed);
      return second;
    }
  }
  // The runner's spool exists (its install makes it, root:GROUP 2770); its files are the group's
  // to read, for whichever of the runner's processes replays them.
  std::string path = directory + "/" + final.id + ".json";
  // The runner's row is the runner's own file (the service user's, as_effective_user), which
  // this process, holding the caller's filesystem uid for everything the caller names, would not
  // make so.
  if (!as_effective_user([&] {
        write_file_atomically(path, text, 0640, "spool " + path);
        return true;
      })) {
    // The child that wrote it cannot hand its errno back: a full filesystem (the ledger's own,
    // on a shared runner) is the usual cause, and must not read as a permission problem.
    struct statvfs room {};
    if (::statvfs(directory.c_str(), &room) == 0 && room.f_bavail == 0) {
      throw Error(
          "spool " + path,
          "the runner's spool could not be written: no space left on its filesystem",
          "free space on the filesystem of " + directory + " (it usually holds the ledger too)");
    }
    throw Error("spool " + path, "the runner's spool could not be written",
                "the runner's owner checks the spool directory (scripts/install-shared-runner.sh)");
  }
  return path;
}

SpoolReplayer SpoolReplayer::current() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) name[0] = '\0';
  return {static_cast<std::int64_t>(acting_uid()), name};
}

namespace {

std::string octal(mode_t mode) {
  char text[8];
  std::snprintf(text, sizeof text, "%04o", static_cast<unsigned>(mode & 07777));
  return text;
}

// Why the spool directory may not be trusted, or "" when it may: only its user may have put the
// files there.
// The runner's: root's directory of the runner's group, no access for others (so no user reaches
// a file in it, whoever owns the file).
std::string directory_refusal(const std::string& directory, const SpoolReplayer& replayer) {
  struct stat status {};
  if (::lstat(directory.c_str(), &status) != 0) return errno_text(errno);
  if (!S_ISDIR(status.st_mode)) return "not a directory (a symlink?)";
  if (runner_spool_in_use) {
    if (status.st_uid != 0 || status.st_gid != runner_spool_in_use->group ||
        (status.st_mode & 07777) != 02770) {
      return "not root's, of the runner's group gid " + std::to_string(runner_spool_in_use->group) +
             ", mode 2770 (mode " + octal(status.st_mode) + ", uid " +
             std::to_string(status.st_uid) + ")";
    }
    return "";
  }
  if (status.st_uid != replayer.uid) {
    return "owned by uid " + std::to_string(status.st_uid) + ", not by uid " +
           std::to_string(replayer.uid);
  }
  if ((status.st_mode & 07777) != 0700) return "mode " + octal(status.st_mode) + ", not 0700";
  return "";
}

// Reads a spool file that passes the file checks into `text`; otherwise returns why not. The
// file is opened without following a symlink and checked through the descriptor, so that what
// is checked is what is read.
std::string read_checked(const std::string& path, const SpoolReplayer& replayer,
                         std::string& text) {
  struct stat status {};
  if (::lstat(path.c_str(), &status) != 0) return errno_text(errno);
  if (S_ISLNK(status.st_mode)) return "a symlink";
  if (!S_ISREG(status.st_mode)) return "not a regular file";
  int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return errno_text(errno);
  std::string why;
  if (::fstat(fd, &status) != 0) {
    why = errno_text(errno);
  } else if (!S_ISREG(status.st_mode)) {
    why = "not a regular file";
  } else if (runner_spool_in_use) {
    if (status.st_uid != runner_spool_in_use->owner ||
        status.st_gid != runner_spool_in_use->group || (status.st_mode & 07777) != 0640 ||
        status.st_nlink != 1) {
      why = "uid " + std::to_string(status.st_uid) + ", gid " + std::to_string(status.st_gid) +
            ", mode " + octal(status.st_mode) + ": not a file the runner wrote (uid " +
            std::to_string(runner_spool_in_use->owner) + ", gid " +
            std::to_string(runner_spool_in_use->group) + ", 0640)";
    }
  } else if (status.st_uid != replayer.uid) {
    why = "owned by uid " + std::to_string(status.st_uid) + ", not by uid " +
          std::to_string(replayer.uid);
  } else if ((status.st_mode & 07777) != 0600) {
    why = "mode " + octal(status.st_mode) + ", not 0600";
  }
  if (why.empty()) {
    char buffer[4096];
    ssize_t got = 0;
    while ((got = ::read(fd, buffer, sizeof buffer)) > 0) text.append(buffer, got);
    if (got < 0) why = errno_text(errno);
  }
  ::close(fd);
  return why;
}

enum class Verdict { replay, wait, refuse };
struct Check {
  Verdict verdict;
  std::string why;
};

// Whether the ledger's own record of the run vouches for the spooled row.
Check check_against_ledger(const std::optional<RunView>& run, const RunFinal& final,
                           const SpoolReplayer& replayer) {
  if (!run) return {Verdict::wait, "run " + final.id + " is not in the ledger"};
  if (!run->uid) return {Verdict::refuse, "the ledger does not know who admitted run " + run->id};
  // In the runner's spool only the runner's processes wrote: any of them replays any run's row.
  if (!runner_spool_in_use && *run->uid != replayer.uid) {
    return {Verdict::refuse, "run " + run->id + " was admitted by uid " +
                                 std::to_string(*run->uid) + ", not by uid " +
                                 std::to_string(replayer.uid)};
  }
  if (run->host != replayer.host) {
    return {Verdict::refuse,
            "run " + run->id + " ran on " + run->host + ", not on " + replayer.host};
  }
  if (run->status == RunStatus::running) {
    return {Verdict::wait, "run " + run->id + " is still running (its heartbeat is fresh)"};
  }
  if (run->status != RunStatus::lost && !run->reconciled) {
    return {Verdict::replay, ""};  // final already: finish_run leaves it as it is
  }
  if (final.spend < run->reported_spend) {
    return {Verdict::refuse, "spend " + format_money(final.spend) + " is below the " +
                                 format_money(run->reported_spend) + " of its last heartbeat"};
  }
  if (final.spend > run->ceiling) {
    return {Verdict::refuse, "spend " + format_money(final.spend) + " is above its ceiling " +
                                 format_money(run->ceiling)};
  }
  return {Verdict::replay, ""};
}

void refuse(const std::string& path, const std::string& why) {
  // Kept for a person to look at, out of the way of the next replay.
  std::string bad = path + ".bad";
  std::rename(path.c_str(), bad.c_str());
  std::cerr << "spendcap: spooled row " << path << " is not replayed: " << why << " (moved to "
            << bad << ")\n";
}

}  // namespace

namespace {

int replay_directory(const std::string& directory, Ledger& ledger, const SpoolReplayer& replayer,
                     Nanos after_failure) {
  std::vector<std::string> names;
  if (DIR* dir = opendir(directory.c_str())) {
    while (dirent* entry = readdir(dir)) {
      std::string name = entry->d_name;
      if (name.front() != '.' && name.ends_with(".json")) names.push_back(name);
    }
    closedir(dir);
  }
  if (names.empty()) return 0;
  std::sort(names.begin(), names.end());
  if (std::string why = directory_refusal(directory, replayer); !why.empty()) {
    std::cerr << "spendcap: the spool " << directory << " is not replayed: " << why
              << (runner_spool_in_use
                      ? " (the runner's owner reinstalls it with "
                        "scripts/install-shared-runner.sh)\n"
                      : " (only its user may write it: chmod 0700 it, or remove it)\n");
    return 0;
  }

  int replayed = 0;
  std::string url = ledger.url();
  auto began = std::chrono::steady_clock::now();
  bool failed = false;
  for (size_t i = 0; i < names.size(); ++i) {
    const std::string& name = names[i];
    std::string path = directory + "/" + name;
    if (failed && std::chrono::steady_clock::now() - began >= after_failure) {
      std::cerr << "spendcap: " << names.size() - i
                << " more spooled row(s) left for the next spendcap command (the ledger failed "
                   "just now)\n";
      break;
    }
    std::string text;
    std::string why = read_checked(path, replayer, text);
    if (why == errno_text(ENOENT)) continue;  // replayed meanwhile by another spendcap
    if (!why.empty()) {
      refuse(path, why);
      continue;
    }
    SpooledRow row;
    try {
      row = parse_spooled(text);
    } catch (const std::exception& e) {
      refuse(path, std::string("corrupt: ") + e.what());
      continue;
    }
    if (row.ledger_url != url) continue;
    try {
      Check check = check_against_ledger(ledger.find_run(row.final.id), row.final, replayer);
      if (check.verdict == Verdict::refuse) {
        refuse(path, check.why);
        continue;
      }
      if (check.verdict == Verdict::wait) {
        std::cerr << "spendcap: spooled row " << path << " waits: " << check.why << "\n";
        continue;
      }
      ledger.finish_run(row.final);  // false: final already, which is as good as accepted
      ::unlink(path.c_str());
      ++replayed;
    } catch (const std::exception& e) {
      failed = true;
      std::cerr << "spendcap: could not replay the spooled final row of run " << row.final.id
                << " to " << url << ": " << e.what() << " (kept in " << path << ")\n";
    }
  }
  return replayed;
}

}  // namespace

int replay_spool(Ledger& ledger, const SpoolReplayer& replayer, Nanos after_failure) {
  int replayed = replay_directory(spool_dir(), ledger, replayer, after_failure);
  if (std::string fallback = fallback_spool_dir(); !fallback.empty()) {
    replayed += replay_directory(fallback, ledger, replayer, after_failure);
  }
  return replayed;
}

}  // namespace spendcap
