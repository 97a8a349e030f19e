// The HttpClient over libcurl, loaded with dlopen (base/dynamic_library) when the first webhook is
// configured, never linked: a run without webhooks does not map it. TLS verification stays on;
// only http and https are allowed, redirects are not followed.
#pragma once

#include <memory>

#include "spendcap/notify/delivery.hpp"

namespace spendcap {

// Throws Error when libcurl (libcurl.so.4) cannot be loaded or lacks a function spendcap uses.
std::unique_ptr<HttpClient> make_curl_http();

}  // namespace spendcap
