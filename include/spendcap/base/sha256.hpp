// SHA-256 and HMAC-SHA256 (FIPS 180-4, RFC 2104), self-contained: webhook signatures need only
// these two, and neither linking libcrypto (its loader work is paid on every exec) nor loading it
// at run time (one more library a host must have) is worth it for 100 lines. Tested against the
// FIPS and RFC 4231 vectors.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace spendcap {

using Sha256Digest = std::array<std::uint8_t, 32>;

Sha256Digest sha256(std::string_view data);
Sha256Digest hmac_sha256(std::string_view key, std::string_view message);

// Lowercase hex.
std::string to_hex(const Sha256Digest& digest);

}  // namespace spendcap
