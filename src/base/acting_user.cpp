#include "spendcap/base/acting_user.hpp"

#include <fcntl.h>
#include <sys/fsuid.h>
#include <unistd.h>

namespace spendcap {

uid_t acting_uid() {
  // An invalid id changes nothing and returns the current filesystem uid.
  return static_cast<uid_t>(::setfsuid(static_cast<uid_t>(-1)));
}

int access_as_user(const char* path, int mode) {
  return ::faccessat(AT_FDCWD, path, mode, AT_EACCESS);
}

}  // namespace spendcap
