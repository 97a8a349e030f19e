#include "spendcap/process/cgroup.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "spendcap/base/error.hpp"

namespace spendcap {

namespace {

bool write_file(const std::string& path, const char* text) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  ssize_t n = ::write(fd, text, std::strlen(text));
  ::close(fd);
  return n == static_cast<ssize_t>(std::strlen(text));
}

}  // namespace

bool locate_cgroup_v2(std::string* mount_point_out, std::string* own_dir, std::string* why_not) {
  auto fail = [&](std::string why) {
    if (why_not) *why_not = std::move(why);
    return false;
  };
  // The v2 hierarchy may be mounted alone (/sys/fs/cgroup) or beside v1 ("hybrid",
  // /sys/fs/cgroup/unified); mountinfo says where, and with which root.
  std::ifstream mountinfo("/proc/self/mountinfo");
  std::string line, mount_point, mount_root;
  while (std::getline(mountinfo, line)) {
    size_t dash = line.find(" - ");
    if (dash == std::string::npos) continue;
    std::istringstream after(line.substr(dash + 3));
    std::string fstype;
    after >> fstype;
    if (fstype != "cgroup2") continue;
    std::istringstream fields(line.substr(0, dash));
    std::string id, parent, devices;
    fields >> id >> parent >> devices >> mount_root >> mount_point;
    break;
  }
  if (mount_point.empty()) return fail("no cgroup v2 hierarchy is mounted");

  std::ifstream self("/proc/self/cgroup");
  std::string own;
  while (std::getline(self, line)) {
    if (line.rfind("0::", 0) == 0) own = line.substr(3);
  }
  if (own.empty()) return fail("this process is in no cgroup v2 group");
  if (mount_root != "/" && own.rfind(mount_root, 0) == 0) own = own.substr(mount_root.size());
  *mount_point_out = mount_point;
  *own_dir = mount_point + (own == "/" ? "" : own);
  return true;
}

std::optional<std::string> own_cgroup_dir(std::string* why_not) {
  std::string mount_point, dir;
  if (!locate_cgroup_v2(&mount_point, &dir, why_not)) return std::nullopt;
  if (::access(dir.c_str(), W_OK) != 0) {
    if (why_not) *why_not = dir + " is not writable: " + errno_text(errno);
    return std::nullopt;
  }
  return dir;
}

std::optional<Cgroup> Cgroup::create(const std::string& name, std::string* why_not) {
  auto parent = own_cgroup_dir(why_not);
  if (!parent) return std::nullopt;
  std::string path = *parent + "/" + name;
  if (::mkdir(path.c_str(), 0755) != 0) {
    if (why_not) *why_not = "cannot create " + path + ": " + errno_text(errno);
    return std::nullopt;
  }
  Cgroup cgroup(path);
  if (::access(cgroup.procs_file().c_str(), W_OK) != 0) {
    if (why_not) *why_not = cgroup.procs_file() + " is not writable";
    cgroup.remove();
    return std::nullopt;
  }
  return cgroup;
}

std::vector<pid_t> Cgroup::procs() const {
  // cgroup.procs lists only this level: a job that runs a container runtime, systemd-run or a
  // nested spendcap puts processes in child cgroups, and they belong to the run all the same.
  std::vector<pid_t> pids;
  std::vector<std::string> pending{path_};
  while (!pending.empty()) {
    std::string dir = std::move(pending.back());
    pending.pop_back();
    std::ifstream file(dir + "/cgroup.procs");
    pid_t pid;
    while (file >> pid) pids.push_back(pid);
    if (DIR* listing = ::opendir(dir.c_str())) {
      while (dirent* entry = ::readdir(listing)) {
        if (entry->d_type == DT_DIR && entry->d_name[0] != '.') {
          pending.push_back(dir + "/" + entry->d_name);
        }
      }
      ::closedir(listing);
    }
  }
  return pids;
}

bool Cgroup::holds(pid_t pid) const {
  // The directory's name holds the run id: unique, so matching it in the "0::" path is enough.
  // (A cgroup path is absolute, so rfind finds the slash that leads the name.)
  std::string name = path_.substr(path_.rfind('/'));
  std::ifstream file("/proc/" + std::to_string(pid) + "/cgroup");
  std::string line;
  while (std::getline(file, line)) {
    if (line.rfind("0::", 0) != 0) continue;
    size_t at = line.find(name);
    while (at != std::string::npos) {
      size_t end = at + name.size();
      if (end == line.size() || line[end] == '/') return true;
      at = line.find(name, at + 1);
    }
  }
  return false;
}

bool Cgroup::kill() const {
  if (kill_fd_ >= 0) return ::pwrite(kill_fd_, "1", 1, 0) == 1;
  return write_file(path_ + "/cgroup.kill", "1");
}

void Cgroup::remove() const noexcept {
  // Child cgroups (made by the job's container runtime or a nested spendcap) first.
  if (DIR* listing = ::opendir(path_.c_str())) {
    while (dirent* entry = ::readdir(listing)) {
      if (entry->d_type == DT_DIR && entry->d_name[0] != '.') {
        Cgroup(path_ + "/" + entry->d_name).remove();
      }
    }
    ::closedir(listing);
  }
  ::rmdir(path_.c_str());
}

}  // namespace spendcap
