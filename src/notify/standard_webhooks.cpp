#include "spendcap/notify/standard_webhooks.hpp"

#include <cstdint>

#include "spendcap/base/sha256.hpp"

namespace spendcap {

namespace {

constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

int sextet(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

}  // namespace

std::string base64_encode(std::string_view bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    std::uint32_t n = (std::uint32_t(std::uint8_t(bytes[i])) << 16) |
                      (std::uint32_t(std::uint8_t(bytes[i + 1])) << 8) | std::uint8_t(bytes[i + 2]);
    out += kAlphabet[(n >> 18) & 63];
    out += kAlphabet[(n >> 12) & 63];
    out += kAlphabet[(n >> 6) & 63];
    out += kAlphabet[n & 63];
  }
  if (i < bytes.size()) {
    std::uint32_t n = std::uint32_t(std::uint8_t(bytes[i])) << 16;
    bool two = i + 1 < bytes.size();
    if (two) n |= std::uint32_t(std::uint8_t(bytes[i + 1])) << 8;
    out += kAlphabet[(n >> 18) & 63];
    out += kAlphabet[(n >> 12) & 63];
    out += two ? kAlphabet[(n >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

std::optional<std::string> base64_decode(std::string_view text) {
  if (text.size() % 4 != 0) return std::nullopt;
  std::string out;
  out.reserve(text.size() / 4 * 3);
  for (size_t i = 0; i < text.size(); i += 4) {
    bool last = i + 4 == text.size();
    int a = sextet(text[i]), b = sextet(text[i + 1]);
    int c = text[i + 2] == '=' && last && text[i + 3] == '=' ? -2 : sextet(text[i + 2]);
    int d = text[i + 3] == '=' && last ? -2 : sextet(text[i + 3]);
    if (a < 0 || b < 0 || c == -1 || d == -1 || (c == -2 && d != -2)) return std::nullopt;
    std::uint32_t n = (std::uint32_t(a) << 18) | (std::uint32_t(b) << 12) |
                      (std::uint32_t(c < 0 ? 0 : c) << 6) | std::uint32_t(d < 0 ? 0 : d);
    out += static_cast<char>((n >> 16) & 0xff);
    if (c >= 0) out += static_cast<char>((n >> 8) & 0xff);
    if (d >= 0) out += static_cast<char>(n & 0xff);
  }
  return out;
}

std::optional<std::string> standard_webhooks_key(const std::string& secret) {
  if (!secret.starts_with(kWhsecPrefix)) return secret;
  return base64_decode(std::string_view(secret).substr(kWhsecPrefix.size()));
}

std::string standard_webhooks_signature(const std::string& key, const std::string& id,
                                        const std::string& timestamp, const std::string& body) {
  Sha256Digest mac = hmac_sha256(key, id + "." + timestamp + "." + body);
  return "v1," +
         base64_encode(std::string_view(reinterpret_cast<const char*>(mac.data()), mac.size()));
}

}  // namespace spendcap
