// The HTTP client, on libcurl: one easy handle a GET, bounded by a total timeout and a cap on the
// body, with TLS verified (a CA file, a client certificate), basic auth and unix sockets.
#include "headroom/net/http_client.h"

#include <curl/curl.h>
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>
#include <string_view>

#include "headroom/util/units.h"

namespace headroom {
namespace {

struct CurlFree {
  void operator()(CURL* c) const { curl_easy_cleanup(c); }
};
struct CurlUrlFree {
  void operator()(CURLU* u) const { curl_url_cleanup(u); }
};

// Where a transfer's body goes: up to `max` bytes; beyond, the transfer is ended.
struct Sink {
  std::string body;
  std::size_t max = 0;
  bool over = false;
};

std::size_t collect(char* data, std::size_t size, std::size_t n, void* user) {
  auto* sink = static_cast<Sink*>(user);
  const std::size_t bytes = size * n;
  if (bytes > sink->max - sink->body.size()) {
    sink->over = true;
    return 0;  // less than was given: libcurl ends the transfer
  }
  sink->body.append(data, bytes);
  return bytes;
}

// The URL's shape, checked before libcurl is asked: the messages say what to write instead.
Status checkUrl(const std::string& url) {
  const std::string_view scheme = url.starts_with("https://") ? "https://" : "http://";
  if (!url.starts_with(scheme))
    return badInput(fmt::format("{}: not an http:// or https:// URL (e.g. http://127.0.0.1:9464/v1/budget)", url));
  if (url.size() == scheme.size() || url[scheme.size()] == '/') return badInput(fmt::format("{}: no host", url));
  std::unique_ptr<CURLU, CurlUrlFree> parsed(curl_url());
  if (!parsed) return ioError(fmt::format("{}: libcurl could not start", url));
  if (CURLUcode rc = curl_url_set(parsed.get(), CURLUPART_URL, url.c_str(), 0); rc != CURLUE_OK)
    return badInput(fmt::format("{}: not a valid URL ({})", url, curl_url_strerror(rc)));
  return ok();
}

// The transfer's milliseconds as libcurl takes them; never 0, which it reads as "no limit".
long millis(std::chrono::milliseconds t) { return static_cast<long>(std::max<std::int64_t>(1, t.count())); }

}  // namespace

void initHttpClient() {
  static const bool done = [] { return curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK; }();
  (void)done;
}

namespace {

struct CurlHeaders {
  void operator()(curl_slist* l) const { curl_slist_free_all(l); }
};

// One exchange: a GET, or a POST of `body` (nullptr: a GET) as `content_type`.
Result<HttpResponse> exchange(const std::string& url, const HttpGetOptions& o, const std::string* body,
                              const std::string& content_type) {
  const char* method = body != nullptr ? "POST" : "GET";
  if (auto st = checkUrl(url); !st) return st.error();
  initHttpClient();
  std::unique_ptr<CURL, CurlFree> curl(curl_easy_init());
  if (!curl) return ioError(fmt::format("{} {}: libcurl could not start", method, url));
  CURL* c = curl.get();
  Sink sink{{}, o.max_body_bytes, false};
  std::array<char, CURL_ERROR_SIZE> error{};
  curl_easy_setopt(c, CURLOPT_URL, url.c_str());
  curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(c, CURLOPT_HTTP_VERSION, static_cast<long>(CURL_HTTP_VERSION_1_1));
  curl_easy_setopt(c, CURLOPT_PROXY, "");     // never an http_proxy of the environment: our endpoints are direct
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);  // threads ask too: no SIGALRM for name lookups
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, millis(o.timeout));
  curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, millis(o.timeout));
  curl_easy_setopt(c, CURLOPT_MAXFILESIZE_LARGE, static_cast<curl_off_t>(o.max_body_bytes));
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, collect);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &sink);
  curl_easy_setopt(c, CURLOPT_ERRORBUFFER, error.data());
  if (!o.unix_socket.empty()) curl_easy_setopt(c, CURLOPT_UNIX_SOCKET_PATH, o.unix_socket.c_str());
  const HttpClientAuth& a = o.auth;
  if (!a.ca_file.empty()) curl_easy_setopt(c, CURLOPT_CAINFO, a.ca_file.c_str());
  if (!a.cert_file.empty()) curl_easy_setopt(c, CURLOPT_SSLCERT, a.cert_file.c_str());
  if (!a.key_file.empty()) curl_easy_setopt(c, CURLOPT_SSLKEY, a.key_file.c_str());
  if (!a.user.empty()) {
    curl_easy_setopt(c, CURLOPT_HTTPAUTH, static_cast<long>(CURLAUTH_BASIC));
    curl_easy_setopt(c, CURLOPT_USERNAME, a.user.c_str());
    curl_easy_setopt(c, CURLOPT_PASSWORD, a.password.c_str());
  }
  std::unique_ptr<curl_slist, CurlHeaders> headers;
  if (body != nullptr) {
    headers.reset(curl_slist_append(nullptr, ("Content-Type: " + content_type).c_str()));
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers.get());
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body->data());
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body->size()));
  }

  const CURLcode rc = curl_easy_perform(c);
  const std::string what = o.unix_socket.empty() ? fmt::format("{} {}", method, url)
                                                 : fmt::format("{} {} on {}", method, url, o.unix_socket);
  if (sink.over || rc == CURLE_FILESIZE_EXCEEDED)
    return badData(fmt::format("{}: the answer is larger than {}", what, formatBytes(o.max_body_bytes)));
  if (rc != CURLE_OK) {
    std::string why = error[0] != '\0' ? error.data() : curl_easy_strerror(rc);
    // A CA file or client certificate that cannot be used is the caller's to fix, not the server's.
    if (rc == CURLE_SSL_CACERT_BADFILE || rc == CURLE_SSL_CERTPROBLEM)
      return badInput(fmt::format("{}: {}", what, why));
    // Said as the caller's reader would: the whole answer took longer than it may.
    if (rc == CURLE_OPERATION_TIMEDOUT)
      return ioError(fmt::format("{}: no answer for {} ms (the endpoint is slow or stuck)", what, millis(o.timeout)));
    return ioError(fmt::format("{}: {}", what, why));
  }
  HttpResponse out;
  long status = 0;
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
  out.status = static_cast<int>(status);
  const char* type = nullptr;
  curl_easy_getinfo(c, CURLINFO_CONTENT_TYPE, &type);
  out.content_type = type != nullptr ? type : "";
  out.body = std::move(sink.body);
  return out;
}

}  // namespace

Result<HttpResponse> httpGet(const std::string& url, const HttpGetOptions& o) { return exchange(url, o, nullptr, ""); }

Result<HttpResponse> httpPost(const std::string& url, const std::string& body, const std::string& content_type,
                              const HttpGetOptions& o) {
  return exchange(url, o, &body, content_type);
}

Result<HttpResponse> httpGet(const std::string& url, std::chrono::milliseconds timeout, const HttpClientAuth& auth) {
  HttpGetOptions o;
  o.timeout = timeout;
  o.auth = auth;
  return httpGet(url, o);
}

}  // namespace headroom
