#include "spendcap/base/text.hpp"

#include <sys/random.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <ctime>

#include "spendcap/base/error.hpp"

namespace spendcap {

namespace {

// The length of the well-formed UTF-8 sequence at text[at], and its code point; 0 if there is none.
size_t utf8_sequence(std::string_view text, size_t at, char32_t& code_point) {
  auto byte = [&](size_t i) { return static_cast<unsigned char>(text[i]); };
  unsigned char lead = byte(at);
  if (lead < 0x80) {
    code_point = lead;
    return 1;
  }
  size_t length;
  char32_t min;
  if ((lead & 0xE0) == 0xC0) {
    length = 2, min = 0x80, code_point = lead & 0x1F;
  } else if ((lead & 0xF0) == 0xE0) {
    length = 3, min = 0x800, code_point = lead & 0x0F;
  } else if ((lead & 0xF8) == 0xF0) {
    length = 4, min = 0x10000, code_point = lead & 0x07;
  } else {
    return 0;
  }
  if (at + length > text.size()) return 0;
  for (size_t i = 1; i < length; ++i) {
    if ((byte(at + i) & 0xC0) != 0x80) return 0;
    code_point = (code_point << 6) | (byte(at + i) & 0x3F);
  }
  if (code_point < min || code_point > 0x10FFFF) return 0;
  if (code_point >= 0xD800 && code_point <= 0xDFFF) return 0;
  return length;
}

bool is_control(char32_t c) {
  return c < 0x20 || c == 0x7F || (c >= 0x80 && c <= 0x9F);
}

}  // namespace

bool is_valid_utf8(std::string_view text) {
  for (size_t at = 0; at < text.size();) {
    char32_t c;
    size_t length = utf8_sequence(text, at, c);
    if (length == 0) return false;
    at += length;
  }
  return true;
}

std::string escape_for_terminal(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  char buffer[16];
  for (size_t at = 0; at < text.size();) {
    char32_t c;
    size_t length = utf8_sequence(text, at, c);
    if (length == 0) {
      std::snprintf(buffer, sizeof buffer, "\\x%02X", static_cast<unsigned char>(text[at]));
      out += buffer;
      ++at;
      continue;
    }
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == 0x1B) {
      out += "\\e";
    } else if (c < 0x80 && is_control(c)) {
      std::snprintf(buffer, sizeof buffer, "\\x%02X", static_cast<unsigned>(c));
      out += buffer;
    } else if (is_control(c)) {
      std::snprintf(buffer, sizeof buffer, "\\u{%04X}", static_cast<unsigned>(c));
      out += buffer;
    } else {
      out.append(text.substr(at, length));
    }
    at += length;
  }
  return out;
}

std::string printable_excerpt(std::string_view text, std::size_t max_chars) {
  std::string out;
  std::size_t chars = 0;
  for (size_t at = 0; at < text.size() && chars < max_chars;) {
    char32_t c;
    size_t length = utf8_sequence(text, at, c);
    if (length == 0) {
      ++at;
      continue;
    }
    if (c == '\t') {
      out += ' ';
      ++chars;
    } else if (!is_control(c)) {
      out.append(text.substr(at, length));
      ++chars;
    }
    at += length;
  }
  return out;
}

void require_printable_name(std::string_view value, std::string_view flag) {
  bool control = false;
  for (size_t at = 0; at < value.size();) {
    char32_t c;
    size_t length = utf8_sequence(value, at, c);
    if (length == 0) {
      throw Error(std::string(flag) + " " + std::string(value), "not valid UTF-8",
                  "names are printed and stored as text: use UTF-8");
    }
    control |= is_control(c);
    at += length;
  }
  if (control) {
    throw Error(std::string(flag) + " " + std::string(value), "holds a control character",
                "names are printed to terminals: use printable text");
  }
}

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

std::string random_uuid() {
  unsigned char bytes[16];
  for (std::size_t got = 0; got < sizeof bytes;) {
    ssize_t n = ::getrandom(bytes + got, sizeof bytes - got, 0);
    if (n > 0) got += static_cast<std::size_t>(n);
  }
  bytes[6] = static_cast<unsigned char>((bytes[6] & 0x0f) | 0x40);  // version 4
  bytes[8] = static_cast<unsigned char>((bytes[8] & 0x3f) | 0x80);  // RFC 4122 variant
  char text[37];
  std::snprintf(text, sizeof text,
                "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", bytes[0],
                bytes[1], bytes[2], bytes[3], bytes[4], bytes[5], bytes[6], bytes[7], bytes[8],
                bytes[9], bytes[10], bytes[11], bytes[12], bytes[13], bytes[14], bytes[15]);
  return text;
}

namespace {

std::tm utc_tm(double unix_seconds) {
  std::time_t t = static_cast<std::time_t>(std::floor(unix_seconds));
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  return tm;
}

}  // namespace

std::string format_utc(double unix_seconds, UtcForm form) {
  const char* pattern = "%Y-%m-%dT%H:%M:%SZ";
  switch (form) {
    case UtcForm::rfc3339:
      break;
    case UtcForm::date:
      pattern = "%Y-%m-%d";
      break;
    case UtcForm::clock:
      pattern = "%Y-%m-%d %H:%M:%S";
      break;
    case UtcForm::clock_z:
      pattern = "%Y-%m-%d %H:%M:%SZ";
      break;
    case UtcForm::clock_utc:
      pattern = "%Y-%m-%d %H:%M:%S UTC";
      break;
  }
  std::tm tm = utc_tm(unix_seconds);
  char text[40];
  std::strftime(text, sizeof text, pattern, &tm);
  return text;
}

std::string rfc3339_utc(double unix_seconds) {
  return format_utc(unix_seconds, UtcForm::rfc3339);
}

UtcFields utc_fields(double unix_seconds) {
  std::tm tm = utc_tm(unix_seconds);
  return {tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday};
}

}  // namespace spendcap
