#include "spendcap/base/files.hpp"

#include <fcntl.h>
#include <pwd.h>
#include <sys/fsuid.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <ctime>

#include "spendcap/base/error.hpp"

namespace spendcap {

namespace {

std::string home_directory() {
  if (const char* home = std::getenv("HOME"); home && *home) return home;
  if (const passwd* entry = ::getpwuid(::geteuid()); entry && entry->pw_dir) return entry->pw_dir;
  return "/";
}

std::string random_suffix() {
  unsigned char bytes[8] = {};
  if (::getrandom(bytes, sizeof bytes, 0) != sizeof bytes) {
    // No entropy (very early boot): the pid and the clock still make a name O_EXCL can retry.
    std::uint64_t fallback = static_cast<std::uint64_t>(::getpid()) << 32 ^ ::time(nullptr);
    for (unsigned char& byte : bytes) byte = static_cast<unsigned char>(fallback >>= 8);
  }
  char text[17];
  for (int i = 0; i < 8; ++i) std::snprintf(text + 2 * i, 3, "%02x", bytes[i]);
  return text;
}

void sync_directory(const std::string& directory) {
  if (int fd = ::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

}  // namespace

std::string xdg_dir(XdgDir which) {
  const char* variable = which == XdgDir::data     ? "XDG_DATA_HOME"
                         : which == XdgDir::config ? "XDG_CONFIG_HOME"
                                                   : "XDG_STATE_HOME";
  if (const char* value = std::getenv(variable); value && value[0] == '/') return value;
  const char* fallback = which == XdgDir::data     ? "/.local/share"
                         : which == XdgDir::config ? "/.config"
                                                   : "/.local/state";
  std::string home = home_directory();
  if (home == "/") home.clear();
  return home + fallback;
}

void make_private_directories(const std::string& directory, const std::string& what) {
  // Each prefix that ends before a '/' (and the whole path), parents first.
  for (std::size_t end = 0; end != std::string::npos;) {
    end = directory.find('/', end + 1);
    std::string prefix = directory.substr(0, end);
    if (::mkdir(prefix.c_str(), 0700) != 0 && errno != EEXIST) {
      int err = errno;
      std::string operand = what;
      operand.append(" ").append(directory);
      throw Error(operand,
                  std::string("cannot create ").append(prefix).append(": ") + errno_text(err));
    }
  }
}

bool write_all(int fd, const std::string& text) {
  std::size_t written = 0;
  while (written < text.size()) {
    ssize_t n = ::write(fd, text.data() + written, text.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return false;
    written += static_cast<std::size_t>(n);
  }
  return true;
}

void write_file_atomically(const std::string& path, const std::string& text, mode_t mode,
                           const std::string& what, bool durable) {
  std::size_t slash = path.rfind('/');
  std::string prefix = slash == std::string::npos ? "" : path.substr(0, slash + 1);
  std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
  if (base.empty()) throw Error(what, "names a directory, not a file", "give a file name");

  // O_EXCL|O_NOFOLLOW: a name someone planted (a file or a symlink) is never opened; another
  // random name is tried instead.
  std::string temporary;
  int fd = -1;
  for (int attempt = 0; attempt < 16 && fd < 0; ++attempt) {
    temporary = prefix + "." + base + ".tmp-" + random_suffix();
    fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
    if (fd < 0 && errno != EEXIST) {
      throw Error(what, "cannot create a file beside it: " + errno_text(errno));
    }
  }
  if (fd < 0) throw Error(what, "cannot create a temporary file beside it (names taken)");
  int err = 0;
  if (::fchmod(fd, mode) != 0) err = errno;  // the umask must not widen or narrow it
  if (!err && !write_all(fd, text)) err = errno;
  if (!err && durable && ::fsync(fd) != 0) err = errno;
  if (::close(fd) != 0 && !err) err = errno;
  if (!err && ::rename(temporary.c_str(), path.c_str()) != 0) err = errno;
  if (err) {
    ::unlink(temporary.c_str());
    throw Error(what, "cannot write: " + errno_text(err));
  }
  if (durable) sync_directory(prefix.empty() ? "." : prefix);
}

bool as_effective_user(const std::function<bool()>& body) {
  auto run = [&] {
    try {
      return body();
    } catch (...) {
      return false;
    }
  };
  if (static_cast<uid_t>(::setfsuid(static_cast<uid_t>(-1))) == ::geteuid()) return run();
  pid_t child = ::fork();
  if (child < 0) return false;
  if (child == 0) {
    ::setfsuid(::geteuid());
    ::_exit(run() ? 0 : 1);
  }
  int status = 0;
  while (::waitpid(child, &status, 0) < 0) {
    if (errno != EINTR) return false;
  }
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

}  // namespace spendcap
