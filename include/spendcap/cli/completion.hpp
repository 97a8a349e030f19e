// The bash completion (share/completions/spendcap.bash), written from the command tree the verb
// table builds (cli/verbs.hpp, read as a CommandDoc by cli/help.hpp): every verb, its verbs and
// its flags as the parser holds them, so a flag cannot be missing from it. What an option's value
// completes to (files, directories, variables, a list of words) is the one table in
// completion.cpp. `spendcap help --completion` prints it; the packaging test checks that the
// installed file is this text. Pure: no I/O.
#pragma once

#include <string>

#include "spendcap/cli/manual.hpp"

namespace spendcap {

std::string bash_completion(const CommandDoc& root);

}  // namespace spendcap
