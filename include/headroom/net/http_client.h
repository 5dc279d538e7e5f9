// The one HTTP client of headroom (libcurl): the CLI asking the agent (TLS, a client certificate,
// basic auth), the agent asking the prover's self-report URL and the container engines on their
// unix sockets. Every GET is bounded in time and in the size of the answer it takes.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>

#include "headroom/net/http_response.h"
#include "headroom/util/result.h"

namespace headroom {

// How a client proves itself to, and checks, an endpoint behind a web config (TLS, basic auth).
struct HttpClientAuth {
  std::string ca_file;              // https: the CA the server's certificate must chain to ("": the system's)
  std::string cert_file, key_file;  // https: a client certificate, when the server asks for one
  std::string user, password;       // basic auth, when `user` is not empty
};

// The largest body a GET takes unless told otherwise: the agent's largest document (/v1/snapshot
// of a busy host) with room to spare.
inline constexpr std::size_t kHttpMaxBodyBytes = 64U << 20;

struct HttpGetOptions {
  // To connect, and again for the whole exchange: an endpoint that drips its answer a byte at a
  // time ends there too.
  std::chrono::milliseconds timeout{2000};
  HttpClientAuth auth;
  // Connect to this unix socket instead of the URL's host and port (the URL still gives the
  // path and the Host header): Docker's and Podman's API sockets.
  std::string unix_socket;
  // A body larger than this is an error, read no further: a hostile endpoint cannot grow us.
  std::size_t max_body_bytes = kHttpMaxBodyBytes;
};

// libcurl's process-wide set-up, which is not thread-safe: main() calls it before any thread
// starts, and so does each object that asks from a thread of its own (for the tests' programs).
void initHttpClient();

// GET `url` ("http://HOST:PORT/PATH" or "https://..."); no proxy, no redirects. Any HTTP status
// is a response. An error names the URL: one that is not a URL, or a CA or client certificate
// that cannot be used, is bad input; no answer (refused, unreachable, timed out, a certificate
// that does not verify) is I/O; a body over max_body_bytes is bad data.
Result<HttpResponse> httpGet(const std::string& url, const HttpGetOptions& options);
// The same with `timeout` and `auth`, and the other options as they are by default.
Result<HttpResponse> httpGet(const std::string& url, std::chrono::milliseconds timeout,
                             const HttpClientAuth& auth = {});
// POSTs `body` as `content_type` to `url`, with GET's bounds and errors ("POST URL: ...").
Result<HttpResponse> httpPost(const std::string& url, const std::string& body, const std::string& content_type,
                              const HttpGetOptions& options);

}  // namespace headroom
