// The user spendcap acts for, and the access checks made as that user. Under the privileged
// runner (shared_runner/entry.hpp) the supervisor's real and effective uid are the service
// user's and only its filesystem uid is the caller's; elsewhere all of them are the caller's. So
// spendcap names, records and checks as the filesystem uid, never the real one: access(2) checks
// with the real ids, faccessat(AT_EACCESS) with the filesystem ones, as open(2) will.
#pragma once

#include <sys/types.h>

namespace spendcap {

// The filesystem uid: the caller's everywhere.
uid_t acting_uid();

// access(2) as the acting user: faccessat(AT_FDCWD, path, mode, AT_EACCESS). 0 or -1 with errno.
int access_as_user(const char* path, int mode);

}  // namespace spendcap
