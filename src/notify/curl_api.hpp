// The few libcurl functions spendcap calls, as function pointer types taken from <curl/curl.h>'s
// declarations (decltype only: nothing here links libcurl; `ldd spendcap` does not list it).
#pragma once

#include <curl/curl.h>

namespace spendcap::curl_api {

using global_init = decltype(&curl_global_init);
using easy_init = decltype(&curl_easy_init);
using easy_setopt = decltype(&curl_easy_setopt);
using easy_perform = decltype(&curl_easy_perform);
using easy_getinfo = decltype(&curl_easy_getinfo);
using easy_cleanup = decltype(&curl_easy_cleanup);
using easy_strerror = decltype(&curl_easy_strerror);
using slist_append = decltype(&curl_slist_append);
using slist_free_all = decltype(&curl_slist_free_all);

}  // namespace spendcap::curl_api
