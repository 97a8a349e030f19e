// The HttpClient over libcurl, loaded with dlopen (base/dynamic_library) when the first webhook is
// configured, never linked: a run without webhooks does not map it. TLS verification stays on;
// only http and https are allowed, redirects are not followed.
#pragma once

#include <memory>

#include "spendcap/notify/delivery.hpp"

namespace spendcap {

// Throws Error when libcurl (libcurl.so.4) cannot be loaded or lacks a function spendcap uses.
std::unique_ptr<HttpClient> make_curl_http();

// The same, loaded on the first post (on the caller's thread); never throws: when libcurl cannot
// be loaded, every post fails with the reason (a transport error, not retried).
std::unique_ptr<HttpClient> make_lazy_curl_http();

}  // namespace spendcap
