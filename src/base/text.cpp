#include "spendcap/base/text.hpp"

namespace spendcap {

std::string join(const std::vector<std::string>& items, std::string_view separator) {
  std::string out;
  for (const std::string& item : items) {
    if (!out.empty()) out += separator;
    out += item;
  }
  return out;
}

std::vector<std::string> split(std::string_view text, char separator) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(separator, start);
    if (end == std::string_view::npos) end = text.size();
    if (end > start) parts.emplace_back(text.substr(start, end - start));
    start = end + 1;
  }
  return parts;
}

std::string redact_password(std::string url) {
  std::size_t scheme = url.find("://");
  if (scheme == std::string::npos) return url;
  std::size_t at = url.find('@', scheme + 3);
  std::size_t colon = url.find(':', scheme + 3);
  if (at != std::string::npos && colon != std::string::npos && colon < at) {
    url.replace(colon + 1, at - colon - 1, "***");
  }
  for (std::size_t key = url.find("password="); key != std::string::npos;
       key = url.find("password=", key + 1)) {
    std::size_t start = key + 9, end = url.find('&', start);
    url.replace(start, (end == std::string::npos ? url.size() : end) - start, "***");
  }
  return url;
}

}  // namespace spendcap
