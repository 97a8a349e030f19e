// Errors at the edges (command line, policy, ledger). They are thrown as spendcap::Error and
// printed once, by main, as `spendcap: WHAT: WHY (HINT)`, quoting the operand in WHAT. The kill
// path never throws.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

#include "spendcap/base/exit_code.hpp"

namespace spendcap {

class Error : public std::runtime_error {
 public:
  Error(std::string what, std::string why, std::string hint = {},
        ExitCode code = ExitCode::internal);

  const std::string& subject() const { return what_; }
  const std::string& why() const { return why_; }
  const std::string& hint() const { return hint_; }
  ExitCode code() const { return code_; }
  // Extra lines printed under the first (e.g. every error of a policy file).
  std::vector<std::string> details;

 private:
  std::string what_, why_, hint_;
  ExitCode code_;
};

// "WHAT: WHY (HINT)" without the "spendcap: " prefix.
std::string format_error(const Error& error);

// The text of errno `err`, e.g. "No such file or directory".
std::string errno_text(int err);

}  // namespace spendcap
