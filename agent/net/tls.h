// The server's TLS, from the web config's tls_server_config: an OpenSSL context built again when
// a certificate file changes, and the check of a client certificate's names. Private to agent/net.
#pragma once

#include <openssl/ssl.h>

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "headroom/net/web_config.h"
#include "headroom/util/result.h"

namespace headroom::net_detail {

// The TLS context, built again for the next connection when a file it came from changed (a
// renewed certificate is served without a restart); a rebuild that fails keeps the last one.
class TlsContext {
 public:
  // An error names the key and the file that cannot be used.
  static Result<std::shared_ptr<TlsContext>> create(const WebTlsConfig& cfg);
  explicit TlsContext(WebTlsConfig cfg) : cfg_(std::move(cfg)) {}

  std::shared_ptr<SSL_CTX> current();
  const WebTlsConfig& config() const { return cfg_; }

 private:
  using Stamp = std::pair<std::int64_t, std::int64_t>;  // a file's mtime and inode
  std::array<Stamp, 3> stamps() const;

  WebTlsConfig cfg_;
  std::mutex m_;
  std::array<Stamp, 3> stamps_{};
  std::shared_ptr<SSL_CTX> ctx_;
};

// Whether a verified client certificate names one of `allowed` (DNS, IP, e-mail or URI SAN).
bool certificateAllowed(SSL* ssl, const std::vector<std::string>& allowed);

}  // namespace headroom::net_detail
