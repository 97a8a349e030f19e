#include "spendcap/notify/runner_files.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "spendcap/base/error.hpp"

namespace spendcap {

namespace {

constexpr size_t kMaxSecretFile = 64 * 1024;

// open(2) with the saved group as the effective one, when the group is set aside (setgid install:
// effective gid the caller's, saved gid spendcap's); plainly otherwise. Only open(2) runs raised:
// the read and every check after it need no privilege. Called before any thread is started.
int open_as_runner(const std::string& path) {
  gid_t real = 0, effective = 0, saved = 0;
  bool raise = ::getresgid(&real, &effective, &saved) == 0 && saved != effective;
  if (raise && ::setegid(saved) != 0) raise = false;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  int saved_errno = errno;
  if (raise && ::setegid(effective) != 0) {
    if (fd >= 0) ::close(fd);
    throw Error(path, "cannot set the runner's group aside again: " + errno_text(errno),
                "check the install (scripts/install-shared-runner.sh)");
  }
  errno = saved_errno;
  return fd;
}

}  // namespace

std::string read_secret_file(const std::string& path, bool runner_held, const std::string& what) {
  std::string where = what + " " + path;
  if (path.empty() || path.front() != '/') {
    throw Error(where, "not an absolute path", "name the file by its absolute path");
  }
  int fd = runner_held ? open_as_runner(path)
                       : ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (fd < 0) {
    int error = errno;
    throw Error(where, "cannot read it: " + errno_text(error),
                runner_held ? "the runner's owner creates it (root:spendcap 0640 on the setgid "
                              "install, scripts/install-shared-runner.sh)"
                            : "create it, readable by you only (chmod 0600)");
  }
  struct stat status {};
  if (::fstat(fd, &status) != 0 || !S_ISREG(status.st_mode)) {
    ::close(fd);
    throw Error(where, "not a regular file", "name a file that holds the value on one line");
  }
  if (status.st_mode & S_IROTH) {
    ::close(fd);
    throw Error(where, "everyone may read it, so it holds no secret",
                "chmod o-r " + path + " (0640 root:spendcap on a shared runner, 0600 else)");
  }
  if (static_cast<size_t>(status.st_size) > kMaxSecretFile) {
    ::close(fd);
    throw Error(where, "larger than 64 KiB", "the file holds one line: the URL or the secret");
  }
  std::string content;
  char buffer[4096];
  while (content.size() <= kMaxSecretFile) {
    ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      int error = errno;
      ::close(fd);
      throw Error(where, "cannot read it: " + errno_text(error), "check the file");
    }
    content.append(buffer, static_cast<size_t>(n));
  }
  ::close(fd);
  while (!content.empty() && (content.back() == '\n' || content.back() == '\r' ||
                              content.back() == ' ' || content.back() == '\t')) {
    content.pop_back();
  }
  if (content.empty()) throw Error(where, "the file is empty", "write the value into it");
  return content;
}

std::string ledger_password(const Policy& policy, const std::optional<Policy>& locked) {
  if (!policy.ledger_password_file) return "";
  bool held = locked && locked->ledger_password_file == policy.ledger_password_file;
  return read_secret_file(*policy.ledger_password_file, held, "ledger_password_file");
}

}  // namespace spendcap
