// The SQLite store of the ledger: the file, its connection, locking and transactions (the schema is
// sqlite_schema.cpp's, the rows sqlite_runs.cpp's, sqlite_budgets.cpp's and sqlite_reports.cpp's).
// Contract in sqlite_store.hpp and ledger_store.hpp; the rules are BudgetLedger's.
#include "spendcap/ledger/sqlite/sqlite_store.hpp"

#include "sqlite_impl.hpp"

#include <fcntl.h>
#include <pwd.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <thread>
#include <type_traits>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "spendcap/base/error.hpp"
#include "spendcap/base/files.hpp"
#include "spendcap/base/json_text.hpp"
#include "spendcap/base/signals.hpp"
#include "spendcap/ledger/stored_text.hpp"

namespace spendcap {

namespace sqlite_detail {

namespace {

// /proc/PID/status's field `name`, "" when unreadable.
std::string status_field(const std::string& status, const std::string& name) {
  size_t at = status.find("\n" + name + ":");
  if (at == std::string::npos) return "";
  at = status.find_first_not_of(" \t", at + name.size() + 2);
  size_t end = status.find('\n', at);
  return at == std::string::npos ? "" : status.substr(at, end - at);
}

std::string describe_process(long pid) {
  std::ifstream file("/proc/" + std::to_string(pid) + "/status");
  std::string status((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  status = "\n" + status;
  std::string text = "pid " + std::to_string(pid);
  std::string name = status_field(status, "Name");
  std::string uid_text = status_field(status, "Uid");
  std::string state = status_field(status, "State");
  if (name.empty()) return text;
  std::string user = uid_text.substr(0, uid_text.find_first_of(" \t"));
  uid_t uid = static_cast<uid_t>(std::strtoul(user.c_str(), nullptr, 10));
  if (const passwd* entry = ::getpwuid(uid)) user = entry->pw_name;
  text += " (" + name + ", user " + user;
  if (!state.empty() && (state[0] == 'T' || state[0] == 't')) text += ", stopped";
  return text + ")";
}

}  // namespace

FileIds ledger_file_ids(const std::string& path) {
  FileIds files;
  for (const char* suffix : {"", "-wal", "-shm"}) {
    struct stat status {};
    if (::stat((path + suffix).c_str(), &status) == 0)
      files.push_back({status.st_dev, status.st_ino});
  }
  return files;
}

std::string lock_holders(const FileIds& files) {
  std::ifstream locks("/proc/locks");
  std::set<long> pids;
  std::string line;
  while (std::getline(locks, line)) {
    // "1: POSIX  ADVISORY  WRITE 4242 08:01:1234 0 EOF"; a waiter's line has "->" after the id.
    std::istringstream fields(line);
    std::string id, kind, advisory, mode, where;
    long pid = 0;
    if (!(fields >> id >> kind) || kind == "->") continue;
    if (!(fields >> advisory >> mode >> pid >> where) || pid <= 0 || pid == ::getpid()) continue;
    unsigned major = 0, minor = 0;
    unsigned long long inode = 0;
    if (std::sscanf(where.c_str(), "%x:%x:%llu", &major, &minor, &inode) != 3) continue;
    for (const auto& [device, file_inode] : files) {
      if (::major(device) == major && ::minor(device) == minor && file_inode == inode) {
        pids.insert(pid);
      }
    }
  }
  std::string text;
  for (long pid : pids) text += (text.empty() ? "" : "; ") + describe_process(pid);
  return text;
}

}  // namespace sqlite_detail

// ---- network filesystems ----

std::optional<std::string> sqlite_path_of_url(const std::string& url) {
  std::string_view text = url;
  if (text.starts_with("sqlite:")) {
    text.remove_prefix(7);
    if (text.starts_with("//")) text.remove_prefix(2);  // sqlite:///var/x
    return std::string(text);
  }
  if (text.find("://") != std::string_view::npos) return std::nullopt;
  return std::string(text);
}

std::optional<std::string> network_filesystem_name(long f_type) {
  // statfs(2) magic numbers (linux/magic.h and the filesystems' own headers). f_type is signed on
  // some ABIs, so compare the low 32 bits: CIFS' 0xFF534D42 arrives negative there.
  static const std::map<std::uint32_t, const char*> kNetworkFilesystems = {
      {0x6969, "NFS"},          {0x517B, "SMB"},        {0xFF534D42, "CIFS"},
      {0xFE534D42, "SMB2"},     {0x0BD00BD0, "Lustre"}, {0x47504653, "GPFS"},
      {0x00C36400, "Ceph"},     {0x5346414F, "AFS"},    {0x6B414653, "kAFS"},
      {0x01021997, "9P"},       {0x19830326, "BeeGFS"}, {0x73757245, "Coda"},
      {0x564C, "NCP"},          {0x7461636F, "OCFS2"},  {0x01161970, "GFS2"},
      {0x20030528, "OrangeFS"}, {0xAAD7AAEA, "PanFS"},
  };
  auto found = kNetworkFilesystems.find(static_cast<std::uint32_t>(f_type));
  if (found == kNetworkFilesystems.end()) return std::nullopt;
  return std::string(found->second);
}

// ---- opening ----

void SqliteStore::Impl::create_file() {
  namespace fs = std::filesystem;
  fs::path file(path);
  fs::path directory = file.parent_path();
  // Missing directories are created private; a shared ledger's directory is set up by its owner.
  std::vector<fs::path> missing;
  std::error_code ignored;
  for (fs::path dir = directory; !dir.empty() && !fs::exists(dir, ignored);
       dir = dir.parent_path()) {
    missing.push_back(dir);
    if (dir == dir.parent_path()) break;
  }
  for (auto dir = missing.rbegin(); dir != missing.rend(); ++dir) {
    if (mkdir(dir->c_str(), 0700) != 0 && errno != EEXIST) {
      throw error("cannot create " + dir->string() + ": " + errno_text(errno));
    }
  }

  struct statfs filesystem {};
  if (statfs(directory.c_str(), &filesystem) != 0) {
    throw error("cannot inspect " + directory.string() + ": " + errno_text(errno));
  }
  if (auto name = network_filesystem_name(static_cast<long>(filesystem.f_type))) {
    throw error(
        directory.string() + " is on " + *name + ", where SQLite's locks and WAL do not work",
        "use a PostgreSQL ledger: \"ledger\": \"postgresql://...\" in the policy, or "
        "--ledger postgresql://...");
  }

  struct stat dir_status {};
  if (stat(directory.c_str(), &dir_status) != 0) {
    throw error("cannot inspect " + directory.string() + ": " + errno_text(errno));
  }
  // A group-writable directory is a shared ledger: its group's members must write their runs.
  bool shared = (dir_status.st_mode & S_IWGRP) != 0;
  shared_directory = shared;
  mode_t mode = shared ? 0660 : 0600;
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, mode);
  if (fd < 0) {
    // It exists, or another process just created it.
    if (errno != EEXIST) throw error("cannot create " + path + ": " + errno_text(errno));
  } else {
    // The umask may have taken the group's write bit; and without a setgid directory the file
    // would get the creator's group rather than the ledger's. SQLite gives the -wal and -shm
    // files the database file's mode and owner.
    // Both best effort: a ledger that ends up 0600 still works for its owner.
    if (fchmod(fd, mode) != 0) {
    }
    if (shared && dir_status.st_gid != getegid() &&
        fchown(fd, static_cast<uid_t>(-1), dir_status.st_gid) != 0) {
    }
    ::close(fd);
  }
  if (shared) {
    for (const char* suffix : {"-wal", "-shm"})
      add_side_file(path + suffix, directory.string(), dir_status.st_gid);
  }
}

// A shared ledger's side files are made whole before SQLite looks for them. SQLite creates a
// missing -wal or -shm with the creator's umask and only then gives it the ledger's mode, and
// another user's process that opens it in between gets it read-only: "attempt to write a readonly
// database". Whoever closes a ledger last without keeping its WAL (an administrator's sqlite3)
// deletes both, and the next run would recreate them so. Here a missing one is created unnamed
// (O_TMPFILE), given the ledger's mode and group, and only then linked into place; a process that
// links first wins, and the race that is left (a foreign sqlite3 recreating the files while a run
// opens) is open()'s retry. Best effort: where this fails, SQLite creates the file as before.
// The file is the effective user's (as_effective_user): in the privileged runner's supervisor, the
// service user's, not the caller's.
void SqliteStore::Impl::add_side_file(const std::string& file, const std::string& directory,
                                      gid_t group) {
  struct stat status {};
  if (::lstat(file.c_str(), &status) == 0 || errno != ENOENT) return;
  as_effective_user([&] {  // system calls only: it may run in a forked child
    int fd = ::open(directory.c_str(), O_TMPFILE | O_WRONLY | O_CLOEXEC, 0600);
    if (fd < 0) return false;
    bool ready = ::fchmod(fd, 0660) == 0 &&
                 (group == ::getegid() || ::fchown(fd, static_cast<uid_t>(-1), group) == 0);
    // linkat(AT_EMPTY_PATH) needs CAP_DAC_READ_SEARCH; the descriptor's /proc link does not.
    char unnamed[32] = "/proc/self/fd/";
    std::size_t prefix = std::strlen(unnamed);
    *std::to_chars(unnamed + prefix, unnamed + sizeof unnamed - 1, fd).ptr = '\0';
    if (ready) ::linkat(AT_FDCWD, unnamed, AT_FDCWD, file.c_str(), AT_SYMLINK_FOLLOW);
    ::close(fd);
    return ready;
  });
}

namespace {

// Whether this process holds the ledger open for writing but its -wal or -shm only for reading.
// SQLite falls back to reading a file it cannot open for writing, and says so only at the first
// write; its descriptors are the process's only ones on these files. (A user who may only read the
// ledger holds the database read-only too, and reads as before.)
bool holds_a_side_file_read_only(const std::string& path) {
  bool database_writable = false, side_file_read_only = false;
  std::error_code failed;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd", failed)) {
    std::error_code unreadable;
    std::string target = std::filesystem::read_symlink(entry.path(), unreadable).string();
    if (unreadable || !target.starts_with(path)) continue;
    std::string_view suffix = std::string_view(target).substr(path.size());
    if (suffix != "" && suffix != "-wal" && suffix != "-shm") continue;
    std::ifstream info("/proc/self/fdinfo/" + entry.path().filename().string());
    std::string key;
    unsigned long flags = 0;
    while (info >> key) {
      if (key != "flags:") continue;
      if (info >> std::oct >> flags) {
        bool read_only = (flags & O_ACCMODE) == O_RDONLY;
        if (suffix.empty()) {
          database_writable = database_writable || !read_only;
        } else {
          side_file_read_only = side_file_read_only || read_only;
        }
      }
      break;
    }
  }
  return database_writable && side_file_read_only;
}

}  // namespace

void SqliteStore::Impl::close_connection() {
  for (auto& [sql, statement] : statements) sqlite3_finalize(statement);
  statements.clear();
  if (db) sqlite3_close_v2(db);
  db = nullptr;
}

// SQLite's open, again while a side file opened read-only (add_side_file), for up to the lock
// timeout: another process is still making that file, as if it held a lock.
void SqliteStore::Impl::open() {
  auto started = std::chrono::steady_clock::now();
  opening = true;
  struct Opened {
    bool& opening;
    ~Opened() { opening = false; }
  } opened{opening};
  for (int attempt = 1;; ++attempt) {
    try {
      open_once();
      if (!shared_directory || !holds_a_side_file_read_only(path)) return;
      last_open_error = "a side file of the ledger opened read-only";
      throw sqlite_detail::SideFileRace{};
    } catch (const sqlite_detail::SideFileRace&) {
      close_connection();
      if (std::chrono::steady_clock::now() - started >= sqlite_options.lock_timeout) {
        throw error(last_open_error, "check the permissions of " + path +
                                         " and its -wal and -shm files; a shared ledger's " +
                                         "group must be able to write them and their directory");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(std::min(attempt, 20)));
    }
  }
}

void SqliteStore::Impl::open_once() {
  create_file();
  int rc = sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr);
  if (rc != SQLITE_OK) fail(rc);
  file_ids = sqlite_detail::ledger_file_ids(path);  // again below, once the WAL files exist
  // Short-lived connections are the common case (one per `spendcap run`). By default the last
  // connection to close checkpoints and deletes the WAL, syncing the database, and the next one
  // recreates it, syncing its header and the directory: four fsyncs per run. Instead the WAL stays,
  // close does not checkpoint, and SQLite checkpoints every 100 pages. The price is that the first
  // connection rebuilds the WAL index from the WAL (at most ~400 KB to read). Measured here for
  // `spendcap run -- true`: 8.4 ms by default, 9.5 ms keeping the WAL only, 6.2 ms like this.
  int persist_wal = 1;
  sqlite3_file_control(db, "main", SQLITE_FCNTL_PERSIST_WAL, &persist_wal);
  sqlite3_db_config(db, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, nullptr);
  sqlite3_wal_autocheckpoint(db, 100);
  sqlite3_extended_result_codes(db, 0);
  sqlite3_busy_handler(db, &Impl::on_busy, this);
  std::string journal_mode = retrying([&] {
    auto q = query("PRAGMA journal_mode = WAL");
    q.step();
    return q.text(0);
  });
  if (journal_mode != "wal") {
    throw error("cannot switch it to WAL (journal mode stays " + journal_mode + ")");
  }
  // NORMAL syncs the WAL at checkpoints, not at every commit. A power loss can then lose the last
  // commits (never corrupt the file): a heartbeat lost that way leaves its run looking lost, and a
  // lost run is charged its ceiling, which is conservative; a lost final row is replaced by the
  // run's spooled one. What it buys: a heartbeat costs no fsync.
  exec("PRAGMA synchronous = NORMAL");
  migrate();
  struct stat file_status {};
  if (stat(path.c_str(), &file_status) == 0) owner_at_open = file_status.st_uid;
  file_ids = sqlite_detail::ledger_file_ids(path);
}

// ---- SqliteStore ----

SqliteStore::SqliteStore(const std::string& path, std::function<double()> wall_clock,
                         SqliteOptions sqlite_options)
    : impl_(std::make_unique<Impl>()) {
  std::error_code ignored;
  auto absolute = std::filesystem::weakly_canonical(std::filesystem::absolute(path), ignored);
  impl_->path = absolute.empty() ? path : absolute.string();
  impl_->url = "sqlite:" + impl_->path;
  impl_->wall_clock = std::move(wall_clock);
  impl_->sqlite_options = sqlite_options;
  impl_->open();
}

SqliteStore::~SqliteStore() = default;

std::string SqliteStore::url() const {
  return impl_->url;
}
const std::string& SqliteStore::path() const {
  return impl_->path;
}

void SqliteStore::transact(Access access, const std::function<void(StoreTxn&)>& body) {
  impl_->transaction(access == Access::write, [&] { body(*impl_); });
}

void SqliteStore::Impl::settle_rollups() {
  if (!journal_pending()) return;
  // A report must not wait the whole lock timeout behind a writer (or fail on a ledger it may
  // only read): the rows it leaves are read beside the cells.
  Nanos lock_timeout = sqlite_options.lock_timeout;
  sqlite_options.lock_timeout = std::min<Nanos>(lock_timeout, std::chrono::milliseconds(200));
  try {
    transaction(
        true, [] {}, 1);
  } catch (const Error&) {
  }
  sqlite_options.lock_timeout = lock_timeout;
}

void SqliteStore::settle_rollups() {
  impl_->settle_rollups();
}

int SqliteStore::latest_schema_version() {
  return sqlite_detail::latest_schema_version();
}

int SqliteStore::schema_version() {
  return impl_->read([&] { return impl_->current_schema_version(); });
}

bool SqliteStore::caller_is_owner() {
  struct stat file_status {};
  if (stat(impl_->path.c_str(), &file_status) == 0) {
    impl_->owner_at_open = file_status.st_uid;
  } else if (!impl_->owner_at_open) {
    throw impl_->error("cannot inspect " + impl_->path + ": " + errno_text(errno));
  }
  uid_t caller = impl_->sqlite_options.effective_uid.value_or(geteuid());
  return caller == 0 || caller == *impl_->owner_at_open;
}

bool SqliteStore::is_personal() {
  struct stat file_status {
  }, dir_status{};
  std::string directory = std::filesystem::path(impl_->path).parent_path().string();
  if (stat(impl_->path.c_str(), &file_status) != 0 || stat(directory.c_str(), &dir_status) != 0) {
    return false;
  }
  uid_t caller = impl_->sqlite_options.effective_uid.value_or(geteuid());
  bool others_may_write = (file_status.st_mode | dir_status.st_mode) & (S_IWGRP | S_IWOTH);
  return file_status.st_uid == caller && !others_may_write;
}

std::string SqliteStore::owner_name() {
  struct stat file_status {};
  std::optional<uid_t> owner = impl_->owner_at_open;
  if (stat(impl_->path.c_str(), &file_status) == 0) owner = file_status.st_uid;
  if (!owner) return "its owner";
  const passwd* entry = getpwuid(*owner);
  return entry ? entry->pw_name : "uid " + std::to_string(*owner);
}

}  // namespace spendcap
