// Standard Webhooks' symmetric signature (spec/standard-webhooks.md, "Signature scheme" and
// "Webhook headers"): webhook-id is the event id, webhook-timestamp the attempt's unix seconds,
// webhook-signature "v1," + base64(HMAC-SHA256(key, id + "." + timestamp + "." + body)).
// The key: a secret written "whsec_<base64>" (the spec's serialization) is the base64 decoded;
// any other secret is used as its raw bytes, the key today's X-Spendcap-Signature also uses (the
// reference libraries take such a key as "whsec_" + base64 of those bytes).
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace spendcap {

// RFC 4648 base64 with padding.
std::string base64_encode(std::string_view bytes);
// nullopt for text that is not padded RFC 4648 base64.
std::optional<std::string> base64_decode(std::string_view text);

inline constexpr std::string_view kWhsecPrefix = "whsec_";

// The HMAC key of `secret`, or nullopt for a "whsec_" secret whose rest is not base64.
std::optional<std::string> standard_webhooks_key(const std::string& secret);

// "v1,<base64>" for `key` (already decoded).
std::string standard_webhooks_signature(const std::string& key, const std::string& id,
                                        const std::string& timestamp, const std::string& body);

}  // namespace spendcap
