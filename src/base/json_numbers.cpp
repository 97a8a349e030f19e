#include "spendcap/base/json_numbers.hpp"

#include <cctype>
#include <cstdlib>

namespace spendcap {

namespace {

bool digit(char c) {
  return std::isdigit(static_cast<unsigned char>(c)) != 0;
}

// "-4.617e-05" -> "-0.00004617"; "1.5e+21" -> "1500000000000000000000"; nullopt-like "" when it
// is not an exponent form this rewrites.
std::string plain(const std::string& number) {
  size_t e = number.find_first_of("eE");
  if (e == std::string::npos) return "";
  std::string mantissa = number.substr(0, e);
  int exponent = std::atoi(number.c_str() + e + 1);
  if (exponent < -30 || exponent > 30) return "";
  bool negative = !mantissa.empty() && mantissa[0] == '-';
  if (negative) mantissa.erase(0, 1);
  size_t dot = mantissa.find('.');
  std::string digits = mantissa;
  int point = static_cast<int>(mantissa.size());  // where the point sits in `digits`
  if (dot != std::string::npos) {
    digits = mantissa.substr(0, dot) + mantissa.substr(dot + 1);
    point = static_cast<int>(dot);
  }
  point += exponent;
  std::string out;
  if (point <= 0) {
    out = "0." + std::string(static_cast<size_t>(-point), '0') + digits;
  } else if (point >= static_cast<int>(digits.size())) {
    out = digits + std::string(static_cast<size_t>(point) - digits.size(), '0');
  } else {
    out = digits.substr(0, static_cast<size_t>(point)) + "." +
          digits.substr(static_cast<size_t>(point));
  }
  // Leading zeros of the integer part ("00.5" cannot come from nlohmann, but stay safe).
  while (out.size() > 1 && out[0] == '0' && out[1] != '.') out.erase(0, 1);
  return (negative ? "-" : "") + out;
}

}  // namespace

std::string plain_json_numbers(const std::string& json) {
  std::string out;
  out.reserve(json.size());
  bool in_string = false;
  for (size_t i = 0; i < json.size(); ++i) {
    char c = json[i];
    if (in_string) {
      out += c;
      if (c == '\\' && i + 1 < json.size()) {
        out += json[++i];
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
      out += c;
      continue;
    }
    if (c == '-' || digit(c)) {
      size_t end = i + 1;
      while (end < json.size() && (digit(json[end]) || json[end] == '.' || json[end] == 'e' ||
                                   json[end] == 'E' || json[end] == '+' || json[end] == '-')) {
        ++end;
      }
      std::string number = json.substr(i, end - i);
      std::string rewritten = plain(number);
      out += rewritten.empty() ? number : rewritten;
      i = end - 1;
      continue;
    }
    out += c;
  }
  return out;
}

}  // namespace spendcap
