#include "spendcap/notify/curl_http.hpp"

#include <cctype>
#include <mutex>
#include <string>

#include "curl_api.hpp"
#include "spendcap/base/dynamic_library.hpp"
#include "spendcap/base/error.hpp"

namespace spendcap {

namespace {

// Failures with no HTTP answer that may pass: the endpoint down or slow, the network.
bool transient(CURLcode code) {
  switch (code) {
    case CURLE_COULDNT_RESOLVE_PROXY:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_CONNECT:
    case CURLE_PARTIAL_FILE:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
      return true;
    default:
      return false;
  }
}

size_t discard_body(char*, size_t size, size_t count, void*) {
  return size * count;
}

// Keeps a Retry-After header.
size_t read_header(char* data, size_t size, size_t count, void* user) {
  std::string line(data, size * count);
  static const std::string kName = "retry-after:";
  if (line.size() > kName.size()) {
    std::string head = line.substr(0, kName.size());
    for (char& c : head) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (head == kName) *static_cast<std::string*>(user) = line.substr(kName.size());
  }
  return size * count;
}

class CurlHttp final : public HttpClient {
 public:
  CurlHttp() : library_("libcurl.so.4", "libcurl (webhooks)") {
    load(global_init_, "curl_global_init");
    load(easy_init_, "curl_easy_init");
    load(setopt_, "curl_easy_setopt");
    load(perform_, "curl_easy_perform");
    load(getinfo_, "curl_easy_getinfo");
    load(cleanup_, "curl_easy_cleanup");
    load(strerror_, "curl_easy_strerror");
    load(slist_append_, "curl_slist_append");
    load(slist_free_all_, "curl_slist_free_all");
    if (global_init_(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
      throw Error("libcurl (webhooks)", "curl_global_init failed");
    }
  }

  AttemptResult post(const HttpRequest& request) override {
    AttemptResult result;
    CURL* curl = easy_init_();
    if (!curl) {
      result.transport_error = true;
      result.error = "curl_easy_init failed";
      return result;
    }
    curl_slist* headers = nullptr;
    for (const std::string& header : request.headers) {
      headers = slist_append_(headers, header.c_str());
    }
    headers = slist_append_(headers, "Expect:");  // no 100-continue round trip
    std::string retry_after;
    char error_buffer[CURL_ERROR_SIZE] = {};
    setopt_(curl, CURLOPT_URL, request.url.c_str());
    setopt_(curl, CURLOPT_PROTOCOLS_STR, "http,https");
    setopt_(curl, CURLOPT_FOLLOWLOCATION, 0L);
    setopt_(curl, CURLOPT_NOSIGNAL, 1L);  // not on the kill path's signals: a thread of its own
    setopt_(curl, CURLOPT_SSL_VERIFYPEER, 1L);
    setopt_(curl, CURLOPT_SSL_VERIFYHOST, 2L);
    setopt_(curl, CURLOPT_POST, 1L);
    setopt_(curl, CURLOPT_POSTFIELDS, request.body.data());
    setopt_(curl, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(request.body.size()));
    setopt_(curl, CURLOPT_HTTPHEADER, headers);
    setopt_(curl, CURLOPT_CONNECTTIMEOUT_MS, milliseconds(request.connect_timeout));
    setopt_(curl, CURLOPT_TIMEOUT_MS, milliseconds(request.total_timeout));
    setopt_(curl, CURLOPT_WRITEFUNCTION, &discard_body);
    setopt_(curl, CURLOPT_HEADERFUNCTION, &read_header);
    setopt_(curl, CURLOPT_HEADERDATA, &retry_after);
    setopt_(curl, CURLOPT_ERRORBUFFER, error_buffer);
    CURLcode code = perform_(curl);
    if (code == CURLE_OK) {
      long status = 0;
      getinfo_(curl, CURLINFO_RESPONSE_CODE, &status);
      result.status = status;
      if (!retry_after.empty()) result.retry_after = parse_retry_after(retry_after);
    } else {
      result.transport_error = true;
      result.retryable_transport = transient(code);
      result.error = error_buffer[0] ? error_buffer : strerror_(code);
    }
    slist_free_all_(headers);
    cleanup_(curl);
    return result;
  }

 private:
  template <typename Function>
  void load(Function& slot, const char* name) {
    slot = library_.function<Function>(name);
    if (!slot) throw Error("libcurl " + library_.path(), std::string("lacks ") + name);
  }

  static long milliseconds(Nanos duration) {
    long ms =
        static_cast<long>(std::chrono::duration_cast<std::chrono::milliseconds>(duration).count());
    return ms < 1 ? 1 : ms;
  }

  DynamicLibrary library_;
  curl_api::global_init global_init_ = nullptr;
  curl_api::easy_init easy_init_ = nullptr;
  curl_api::easy_setopt setopt_ = nullptr;
  curl_api::easy_perform perform_ = nullptr;
  curl_api::easy_getinfo getinfo_ = nullptr;
  curl_api::easy_cleanup cleanup_ = nullptr;
  curl_api::easy_strerror strerror_ = nullptr;
  curl_api::slist_append slist_append_ = nullptr;
  curl_api::slist_free_all slist_free_all_ = nullptr;
};

// Loads libcurl on the first post, on the notifier's thread: a run whose webhooks send nothing
// (most runs: `finished` is not subscribed by default) does not pay for loading libcurl and its
// thirty libraries (about 20 ms of a short run, and a larger guard fork). A library that cannot be
// loaded fails every attempt, not retried: the events go to the outbox.
class LazyCurlHttp final : public HttpClient {
 public:
  AttemptResult post(const HttpRequest& request) override {
    if (!real_ && failure_.empty()) {
      try {
        real_ = make_curl_http();
      } catch (const Error& error) {
        failure_ = format_error(error);
      }
    }
    if (real_) return real_->post(request);
    AttemptResult result;
    result.transport_error = true;
    result.error = failure_;
    return result;
  }

 private:
  std::unique_ptr<HttpClient> real_;
  std::string failure_;
};

}  // namespace

std::unique_ptr<HttpClient> make_curl_http() {
  return std::make_unique<CurlHttp>();
}

std::unique_ptr<HttpClient> make_lazy_curl_http() {
  return std::make_unique<LazyCurlHttp>();
}

}  // namespace spendcap
