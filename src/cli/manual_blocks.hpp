// The blocks a man page is made of, as manual.cpp and manual_policy_page.cpp write them. Private to
// the cli library.
#pragma once

#include <string>
#include <utility>

#include "spendcap/cli/manual.hpp"

namespace spendcap::manual_blocks {

inline ManBlock paragraph(std::string text) {
  return {ManBlock::Kind::paragraph, "", std::move(text)};
}
inline ManBlock item(std::string term, std::string text) {
  return {ManBlock::Kind::item, std::move(term), std::move(text)};
}
inline ManBlock code(std::string lines) {
  return {ManBlock::Kind::code, "", std::move(lines)};
}

}  // namespace spendcap::manual_blocks
