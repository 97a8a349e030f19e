#include "spendcap/base/environment.hpp"

#include <cstring>

extern char** environ;

namespace spendcap {

Environment current_environment() {
  Environment env;
  for (char** entry = environ; entry && *entry; ++entry) {
    const char* eq = std::strchr(*entry, '=');
    if (!eq) continue;
    env.emplace(std::string(*entry, static_cast<size_t>(eq - *entry)), std::string(eq + 1));
  }
  return env;
}

}  // namespace spendcap
