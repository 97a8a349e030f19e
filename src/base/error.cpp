#include "spendcap/base/error.hpp"

#include <cstring>

namespace spendcap {

namespace {
std::string compose(const std::string& what, const std::string& why, const std::string& hint) {
  std::string text = what.empty() ? why : what + ": " + why;
  if (!hint.empty()) text += " (" + hint + ")";
  return text;
}
}  // namespace

Error::Error(std::string what, std::string why, std::string hint, ExitCode code)
    : std::runtime_error(compose(what, why, hint)),
      what_(std::move(what)),
      why_(std::move(why)),
      hint_(std::move(hint)),
      code_(code) {}

std::string format_error(const Error& error) {
  return error.std::runtime_error::what();
}

std::string errno_text(int err) {
  return std::strerror(err);
}

}  // namespace spendcap
