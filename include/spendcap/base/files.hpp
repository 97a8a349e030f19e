// Files spendcap writes and the directories it keeps them in: the XDG base directories, private
// directories (0700), and the one atomic writer that every file a user names (--status-file,
// spool rows, later the metrics) goes through.
//
// The atomic writer never follows a link an attacker planted: the temporary is created with
// O_CREAT|O_EXCL|O_NOFOLLOW under a random name in the target's own directory, synced, then renamed
// over the target (rename replaces a symlink at the target itself, never its destination).
#pragma once

#include <sys/types.h>

#include <functional>
#include <string>

namespace spendcap {

enum class XdgDir {
  data,    // $XDG_DATA_HOME, else ~/.local/share
  config,  // $XDG_CONFIG_HOME, else ~/.config
  state,   // $XDG_STATE_HOME, else ~/.local/state
};

// The base directory: the variable when it is absolute (the XDG spec says a relative one is
// invalid and must be ignored), else under $HOME, else under the passwd entry's home, else "/".
std::string xdg_dir(XdgDir which);

// mkdir -p, creating missing directories 0700. Throws Error naming `what` and the directory.
void make_private_directories(const std::string& directory, const std::string& what);

// Writes `text` to `path` atomically: readers see the old file or the new one, never a part.
// The file gets `mode`; with `durable` the data and the rename are fsynced (a crash of the host
// keeps the row). Throws Error naming `what` (e.g. "--status-file /x") with the reason.
void write_file_atomically(const std::string& path, const std::string& text, mode_t mode,
                           const std::string& what, bool durable = true);

// Runs `body` with the process's effective uid as its filesystem uid, so that what it creates is
// the effective user's: in place where the two are the same, else in a forked child that takes the
// effective uid back (no capability needed) and ends. That is the privileged runner's supervisor,
// which holds the caller's filesystem uid for the files the caller names and could not come back
// from its own. True when `body` returned true; a throw counts as false. `body` must do only what a
// child forked from a threaded process may.
bool as_effective_user(const std::function<bool()>& body);

// Writes all of `text` to `fd`, retrying short writes and EINTR. False (errno set) on failure.
bool write_all(int fd, const std::string& text);

}  // namespace spendcap
