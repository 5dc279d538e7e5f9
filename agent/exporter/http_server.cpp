// The agent's HTTP server. cpp-httplib parses requests and routes them; the connections are
// headroom's own, so that no client can take the server from the scrapes:
// - a connection waiting (for its TLS handshake, for its request's bytes, for its next request
//   when kept alive) is watched by one thread with epoll and holds no thread: idle clients and
//   clients sending a byte at a time cost a socket each, no more;
// - a request arrived whole goes to one of a few workers, which parse, route and answer it;
// - deadlines on each request as a whole (not per read), on the handshake and on each response;
//   a cap on header bytes, on body bytes (refused unread), on waiting connections (the one
//   waiting longest is closed for a newcomer) and on whole requests queued (503 beyond);
// - TLS (OpenSSL) and basic auth (bcrypt through crypt(3)) from the web configuration file.
// httplib's own socket loop is replaced by overriding Server::process_and_close_socket: httplib
// hands each accepted socket over, and a worker drives Server::process_request over a Stream of
// headroom's.
#include <arpa/inet.h>
#include <crypt.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <httplib.h>
#include <netinet/in.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <charconv>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <set>
#include <unordered_map>
#include <vector>

#include "headroom/exporter/http.h"

namespace headroom {
namespace exporter_detail {
namespace {

using Clock = std::chrono::steady_clock;

struct Counters {
  std::atomic<std::uint64_t> connections{0}, open{0}, requests{0}, timeouts{0}, evicted{0}, busy{0}, too_large{0},
      tls_failures{0}, unauthorized{0};
};

// ---- TLS ------------------------------------------------------------------------------------

std::string opensslError() {
  std::string out;
  while (unsigned long e = ERR_get_error()) {
    std::array<char, 256> buf{};
    ERR_error_string_n(e, buf.data(), buf.size());
    if (!out.empty()) out += "; ";
    out += buf.data();
  }
  return out.empty() ? "unknown OpenSSL error" : out;
}

int tlsVersion(const std::string& v) {
  if (v == "TLS10") return TLS1_VERSION;
  if (v == "TLS11") return TLS1_1_VERSION;
  if (v == "TLS13") return TLS1_3_VERSION;
  return TLS1_2_VERSION;
}

struct SslCtxFree {
  void operator()(SSL_CTX* c) const { SSL_CTX_free(c); }
};

int acceptAnyCertificate(int /*preverified*/, X509_STORE_CTX* /*ctx*/) { return 1; }

int selectHttp11(SSL* /*ssl*/, const unsigned char** out, unsigned char* outlen, const unsigned char* in,
                 unsigned int inlen, void* /*arg*/) {
  static constexpr unsigned char kHttp11[] = {8, 'h', 't', 't', 'p', '/', '1', '.', '1'};
  unsigned char* selected = nullptr;
  if (SSL_select_next_proto(&selected, outlen, kHttp11, sizeof(kHttp11), in, inlen) != OPENSSL_NPN_NEGOTIATED)
    return SSL_TLSEXT_ERR_NOACK;
  *out = selected;
  return SSL_TLSEXT_ERR_OK;
}

// The web config's IANA cipher suite names as OpenSSL's.
Result<std::string> cipherList(SSL_CTX* ctx, const std::vector<std::string>& suites) {
  std::string list;
  STACK_OF(SSL_CIPHER)* all = SSL_CTX_get_ciphers(ctx);
  for (const auto& name : suites) {
    const char* found = nullptr;
    for (int i = 0; all != nullptr && i < sk_SSL_CIPHER_num(all); ++i) {
      const SSL_CIPHER* c = sk_SSL_CIPHER_value(all, i);
      const char* standard = SSL_CIPHER_standard_name(c);
      if (standard != nullptr && name == standard) found = SSL_CIPHER_get_name(c);
    }
    if (found == nullptr)
      return badInput(
          fmt::format("tls_server_config.cipher_suites: {} is not a TLS 1.2 suite this OpenSSL "
                      "offers (TLS 1.3's are not configurable)",
                      name));
    list += fmt::format("{}{}", list.empty() ? "" : ":", found);
  }
  return list;
}

Result<std::shared_ptr<SSL_CTX>> buildContext(const WebTlsConfig& t) {
  ERR_clear_error();
  std::shared_ptr<SSL_CTX> ctx(SSL_CTX_new(TLS_server_method()), SslCtxFree{});
  if (!ctx) return ioError("cannot make a TLS context: " + opensslError());
  SSL_CTX* c = ctx.get();
  SSL_CTX_set_min_proto_version(c, tlsVersion(t.min_version));
  if (!t.max_version.empty()) SSL_CTX_set_max_proto_version(c, tlsVersion(t.max_version));
  SSL_CTX_set_options(c,
                      SSL_OP_NO_RENEGOTIATION | (t.prefer_server_cipher_suites ? SSL_OP_CIPHER_SERVER_PREFERENCE : 0));
  SSL_CTX_set_mode(c, SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  if (SSL_CTX_use_certificate_chain_file(c, t.cert_file.c_str()) != 1)
    return badInput(fmt::format("tls_server_config.cert_file {}: {}", t.cert_file, opensslError()));
  if (SSL_CTX_use_PrivateKey_file(c, t.key_file.c_str(), SSL_FILETYPE_PEM) != 1)
    return badInput(fmt::format("tls_server_config.key_file {}: {}", t.key_file, opensslError()));
  if (SSL_CTX_check_private_key(c) != 1)
    return badInput(fmt::format("tls_server_config.key_file {} is not the key of cert_file {}: {}", t.key_file,
                                t.cert_file, opensslError()));
  if (!t.cipher_suites.empty()) {
    auto list = cipherList(c, t.cipher_suites);
    if (!list) return list.error();
    if (SSL_CTX_set_cipher_list(c, list->c_str()) != 1)
      return badInput(fmt::format("tls_server_config.cipher_suites: {}", opensslError()));
  }
  if (!t.curve_preferences.empty()) {
    std::string groups;
    for (const auto& curve : t.curve_preferences) {
      std::string g = curve == "X25519" ? "X25519" : "P-" + curve.substr(std::string_view("CurveP").size());
      groups += fmt::format("{}{}", groups.empty() ? "" : ":", g);
    }
    if (SSL_CTX_set1_groups_list(c, groups.c_str()) != 1)
      return badInput(fmt::format("tls_server_config.curve_preferences: {}", opensslError()));
  }
  if (!t.client_ca_file.empty()) {
    if (SSL_CTX_load_verify_locations(c, t.client_ca_file.c_str(), nullptr) != 1)
      return badInput(fmt::format("tls_server_config.client_ca_file {}: {}", t.client_ca_file, opensslError()));
    STACK_OF(X509_NAME)* names = SSL_load_client_CA_file(t.client_ca_file.c_str());
    if (names != nullptr) SSL_CTX_set_client_CA_list(c, names);
  }
  switch (t.client_auth) {
    case ClientAuth::kNone: SSL_CTX_set_verify(c, SSL_VERIFY_NONE, nullptr); break;
    case ClientAuth::kRequest: SSL_CTX_set_verify(c, SSL_VERIFY_PEER, acceptAnyCertificate); break;
    case ClientAuth::kRequireAny:
      SSL_CTX_set_verify(c, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, acceptAnyCertificate);
      break;
    case ClientAuth::kVerifyIfGiven: SSL_CTX_set_verify(c, SSL_VERIFY_PEER, nullptr); break;
    case ClientAuth::kRequireAndVerify:
      SSL_CTX_set_verify(c, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
      break;
  }
  static constexpr unsigned char kSessionContext[] = "headroom";
  SSL_CTX_set_session_id_context(c, kSessionContext, sizeof(kSessionContext) - 1);
  SSL_CTX_set_alpn_select_cb(c, selectHttp11, nullptr);
  return ctx;
}

// The TLS context, built again for the next connection when a file it came from changed (a
// renewed certificate is served without a restart); a rebuild that fails keeps the last one.
class TlsContext {
 public:
  static Result<std::shared_ptr<TlsContext>> create(const WebTlsConfig& cfg) {
    auto tls = std::make_shared<TlsContext>(cfg);
    tls->stamps_ = tls->stamps();
    auto ctx = buildContext(cfg);
    if (!ctx) return ctx.error();
    tls->ctx_ = std::move(*ctx);
    return tls;
  }
  explicit TlsContext(WebTlsConfig cfg) : cfg_(std::move(cfg)) {}

  std::shared_ptr<SSL_CTX> current() {
    std::lock_guard lk(m_);
    auto now = stamps();
    if (now != stamps_) {
      stamps_ = now;
      if (auto ctx = buildContext(cfg_); ctx) {
        ctx_ = std::move(*ctx);
        spdlog::info("web config: TLS certificate files changed; serving the new ones");
      } else {
        spdlog::error("web config: TLS certificate files changed but cannot be used ({}); serving the previous ones",
                      ctx.error().describe());
      }
    }
    return ctx_;
  }
  const WebTlsConfig& config() const { return cfg_; }

 private:
  using Stamp = std::pair<std::int64_t, std::int64_t>;
  std::array<Stamp, 3> stamps() const {
    std::array<Stamp, 3> out{};
    const std::array<const std::string*, 3> files = {&cfg_.cert_file, &cfg_.key_file, &cfg_.client_ca_file};
    for (std::size_t i = 0; i < files.size(); ++i) {
      struct stat st {};
      if (!files[i]->empty() && ::stat(files[i]->c_str(), &st) == 0)
        out[i] = {st.st_mtim.tv_sec * 1'000'000'000LL + st.st_mtim.tv_nsec, static_cast<std::int64_t>(st.st_ino)};
    }
    return out;
  }

  WebTlsConfig cfg_;
  std::mutex m_;
  std::array<Stamp, 3> stamps_{};
  std::shared_ptr<SSL_CTX> ctx_;
};

// Whether a verified client certificate names one of `allowed` (DNS, IP, e-mail or URI SAN).
bool certificateAllowed(SSL* ssl, const std::vector<std::string>& allowed) {
  if (allowed.empty()) return true;
  X509* cert = SSL_get1_peer_certificate(ssl);
  if (cert == nullptr) return true;  // none sent, and the auth type let it be
  bool found = false;
  auto* names = static_cast<GENERAL_NAMES*>(X509_get_ext_d2i(cert, NID_subject_alt_name, nullptr, nullptr));
  for (int i = 0; names != nullptr && !found && i < sk_GENERAL_NAME_num(names); ++i) {
    const GENERAL_NAME* n = sk_GENERAL_NAME_value(names, i);
    std::string value;
    if (n->type == GEN_DNS || n->type == GEN_EMAIL || n->type == GEN_URI) {
      const ASN1_IA5STRING* s = n->d.ia5;
      value.assign(reinterpret_cast<const char*>(ASN1_STRING_get0_data(s)),
                   static_cast<std::size_t>(ASN1_STRING_length(s)));
    } else if (n->type == GEN_IPADD) {
      const ASN1_OCTET_STRING* s = n->d.iPAddress;
      std::array<char, INET6_ADDRSTRLEN> buf{};
      int len = ASN1_STRING_length(s);
      if ((len == 4 || len == 16) &&
          ::inet_ntop(len == 4 ? AF_INET : AF_INET6, ASN1_STRING_get0_data(s), buf.data(), buf.size()) != nullptr)
        value = buf.data();
    }
    found = !value.empty() && std::find(allowed.begin(), allowed.end(), value) != allowed.end();
  }
  GENERAL_NAMES_free(names);
  X509_free(cert);
  return found;
}

// ---- Basic auth -----------------------------------------------------------------------------

// Verifies "Authorization: Basic ..." against the bcrypt hashes. A bcrypt check costs tens of
// milliseconds by design, so a (user, password, hash) that passed is remembered, as a SHA-256
// digest only, for the next scrape; an unknown user costs a check too (no timing tells users).
class BasicAuth {
 public:
  explicit BasicAuth(std::map<std::string, std::string> users) : users_(std::move(users)) {
    dummy_hash_ = users_.empty() ? std::string() : users_.begin()->second;
  }

  bool allows(const std::string& header) {
    constexpr std::string_view kBasic = "basic ";
    if (header.size() <= kBasic.size() || !std::equal(kBasic.begin(), kBasic.end(), header.begin(), [](char a, char b) {
          return a == std::tolower(static_cast<unsigned char>(b));
        }))
      return false;
    std::string decoded = decodeBase64(std::string_view(header).substr(kBasic.size()));
    auto colon = decoded.find(':');
    if (colon == std::string::npos) return false;
    std::string user = decoded.substr(0, colon), password = decoded.substr(colon + 1);
    auto it = users_.find(user);
    const std::string& hash = it == users_.end() ? dummy_hash_ : it->second;
    Digest key = digest(user, password, hash);
    {
      std::lock_guard lk(m_);
      if (passed_.contains(key)) return it != users_.end();
    }
    auto data = std::make_unique<crypt_data>();
    const char* got = ::crypt_rn(password.c_str(), hash.c_str(), data.get(), sizeof(crypt_data));
    bool match = got != nullptr && std::strlen(got) == hash.size() && CRYPTO_memcmp(got, hash.data(), hash.size()) == 0;
    if (!match || it == users_.end()) return false;
    std::lock_guard lk(m_);
    if (passed_.size() >= 256) passed_.clear();
    passed_.insert(key);
    return true;
  }

 private:
  using Digest = std::array<unsigned char, 32>;

  static Digest digest(const std::string& user, const std::string& password, const std::string& hash) {
    std::string all = user + '\0' + password + '\0' + hash;
    Digest d{};
    unsigned int len = 0;
    EVP_Digest(all.data(), all.size(), d.data(), &len, EVP_sha256(), nullptr);
    OPENSSL_cleanse(all.data(), all.size());
    return d;
  }

  static std::string decodeBase64(std::string_view in) {
    while (!in.empty() && in.back() == ' ') in.remove_suffix(1);
    if (in.empty() || in.size() % 4 != 0 || in.size() > 4096) return {};
    std::string out(in.size() / 4 * 3, '\0');
    int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                            reinterpret_cast<const unsigned char*>(in.data()), static_cast<int>(in.size()));
    if (n < 0) return {};
    std::size_t pad = in.size() - in.find_last_not_of('=') - 1;
    out.resize(static_cast<std::size_t>(n) - std::min<std::size_t>(pad, 2));
    return out;
  }

  std::map<std::string, std::string> users_;
  std::string dummy_hash_;
  std::mutex m_;
  std::set<Digest> passed_;
};

// What the web config makes of each new connection; swapped whole at a reload.
struct Security {
  std::shared_ptr<TlsContext> tls;
  std::shared_ptr<BasicAuth> auth;
  std::vector<std::pair<std::string, std::string>> headers;
};

Result<std::shared_ptr<const Security>> securityOf(const std::optional<WebConfig>& web) {
  auto s = std::make_shared<Security>();
  if (web) {
    if (web->tls) {
      auto tls = TlsContext::create(*web->tls);
      if (!tls) return tls.error().wrap(fmt::format("web config {}", web->path)).as(ErrorKind::kBadInput);
      s->tls = std::move(*tls);
    }
    if (!web->basic_auth_users.empty()) s->auth = std::make_shared<BasicAuth>(web->basic_auth_users);
    s->headers = web->headers;
  }
  return std::shared_ptr<const Security>(std::move(s));
}

// ---- Connections ----------------------------------------------------------------------------

void describePeer(int fd, bool local, std::string& ip, int& port) {
  sockaddr_storage a{};
  socklen_t len = sizeof(a);
  int rc = local ? ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len)
                 : ::getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len);
  if (rc != 0) return;
  std::array<char, INET6_ADDRSTRLEN> buf{};
  if (a.ss_family == AF_INET) {
    const auto* v4 = reinterpret_cast<const sockaddr_in*>(&a);
    if (::inet_ntop(AF_INET, &v4->sin_addr, buf.data(), buf.size()) != nullptr) ip = buf.data();
    port = ntohs(v4->sin_port);
  } else if (a.ss_family == AF_INET6) {
    const auto* v6 = reinterpret_cast<const sockaddr_in6*>(&a);
    if (::inet_ntop(AF_INET6, &v6->sin6_addr, buf.data(), buf.size()) != nullptr) ip = buf.data();
    port = ntohs(v6->sin6_port);
  }
}

// The value of header `name` (lower case) in a request's header block, "" when absent.
std::string_view headerValue(std::string_view block, std::string_view name) {
  for (std::size_t at = block.find("\r\n"); at != std::string_view::npos; at = block.find("\r\n", at + 2)) {
    std::string_view line = block.substr(at + 2);
    line = line.substr(0, line.find("\r\n"));
    if (line.size() <= name.size() || line[name.size()] != ':') continue;
    if (!std::equal(name.begin(), name.end(), line.begin(),
                    [](char a, char b) { return a == std::tolower(static_cast<unsigned char>(b)); }))
      continue;
    std::string_view v = line.substr(name.size() + 1);
    while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
    while (!v.empty() && (v.back() == ' ' || v.back() == '\t')) v.remove_suffix(1);
    return v;
  }
  return {};
}

enum class Step { kDone, kAgain, kFailed };

// One connection's bytes, plain or TLS, on a non-blocking socket. The poller fills the buffer
// without ever waiting, until a request is whole; a worker then reads it from there, and reads
// past it (a body after "100 Continue", a pipelined request) only up to the request's deadline.
// A response is written within a deadline of its own.
class ConnectionStream final : public httplib::Stream {
 public:
  ConnectionStream(int fd, const HttpLimits& limits, Counters& counters)
      : fd_(fd), limits_(limits), counters_(counters) {}
  ~ConnectionStream() override {
    if (ssl_ != nullptr) SSL_free(ssl_);
  }
  ConnectionStream(const ConnectionStream&) = delete;
  ConnectionStream& operator=(const ConnectionStream&) = delete;

  SSL* ssl() const { return ssl_; }
  bool handshaken() const { return handshaken_; }
  std::size_t buffered() const { return buf_.size() - pos_; }
  bool done() const { return failed_ || close_after_; }
  bool failed() const { return failed_; }
  // After this response the connection closes: what follows a malformed request cannot be
  // trusted to be the next one.
  void closeAfter() { close_after_ = true; }

  // One step of the TLS handshake (the poller calls it again when the socket is ready).
  Step handshakeStep(SSL_CTX* ctx) {
    if (ssl_ == nullptr) {
      ssl_ = SSL_new(ctx);
      if (ssl_ == nullptr || SSL_set_fd(ssl_, fd_) != 1) return Step::kFailed;
    }
    ERR_clear_error();
    int r = SSL_accept(ssl_);
    if (r == 1) {
      handshaken_ = true;
      return Step::kDone;
    }
    int e = SSL_get_error(ssl_, r);
    if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) return Step::kAgain;
    failed_ = true;
    return Step::kFailed;
  }

  // Reads what the socket holds now. kAgain: all of it (more may come); kDone: enough to judge
  // the request; kFailed: the peer closed or the connection broke.
  Step readAvailable() {
    const std::size_t enough = limits_.max_header_bytes + limits_.max_body_bytes + 4;
    compact();
    for (;;) {
      if (buffered() > enough) return Step::kDone;
      std::array<char, 4096> tmp;
      ssize_t n = rawRead(tmp.data(), tmp.size());
      if (n > 0) {
        buf_.append(tmp.data(), static_cast<std::size_t>(n));
        continue;
      }
      if (n == -1) return Step::kAgain;
      return Step::kFailed;
    }
  }

  enum class Request { kPartial, kWhole, kTooLarge };
  // Whether the buffer holds a whole request: its headers within max_header_bytes, and its body
  // when one up to max_body_bytes is announced (a larger one is refused by the worker unread).
  Request request() const {
    std::string_view b(buf_.data() + pos_, buffered());
    auto end = b.find("\r\n\r\n");
    if (end == std::string_view::npos)
      return b.size() > limits_.max_header_bytes ? Request::kTooLarge : Request::kPartial;
    if (end + 4 > limits_.max_header_bytes) return Request::kTooLarge;
    std::string_view headers = b.substr(0, end + 2);
    if (!headerValue(headers, "expect").empty()) return Request::kWhole;  // the worker says 100 Continue
    std::string_view length = headerValue(headers, "content-length");
    std::uint64_t n = 0;
    auto [p, ec] = std::from_chars(length.data(), length.data() + length.size(), n);
    if (!length.empty() && ec == std::errc() && p == length.data() + length.size() && n <= limits_.max_body_bytes &&
        b.size() - end - 4 < n)
      return Request::kPartial;
    return Request::kWhole;
  }

  // A worker starts on the next request in the buffer.
  void beginRequest() {
    read_deadline_ = Clock::now() + limits_.request_timeout;
    write_started_ = false;
  }

  // Answers with `status` and closes, without waiting on the client.
  void refuse(std::string_view status) {
    std::string r = fmt::format("HTTP/1.1 {}\r\nConnection: close\r\nContent-Length: 0\r\n\r\n", status);
    if (ssl_ != nullptr)
      (void)SSL_write(ssl_, r.data(), static_cast<int>(r.size()));
    else
      (void)::send(fd_, r.data(), r.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    failed_ = true;
  }

  bool is_readable() const override { return buffered() > 0 || (ssl_ != nullptr && SSL_pending(ssl_) > 0); }
  bool is_writable() const override { return !failed_; }

  ssize_t read(char* ptr, size_t size) override {
    if (failed_) return -1;
    while (buffered() == 0) {
      compact();
      std::array<char, 4096> tmp;
      ssize_t n = rawRead(tmp.data(), tmp.size());
      if (n > 0) {
        buf_.append(tmp.data(), static_cast<std::size_t>(n));
      } else if (n == -1) {
        if (!waitFor(POLLIN, read_deadline_)) return -1;
      } else {
        return n == 0 ? 0 : -1;
      }
    }
    std::size_t take = std::min(size, buffered());
    std::memcpy(ptr, buf_.data() + pos_, take);
    pos_ += take;
    return static_cast<ssize_t>(take);
  }

  ssize_t write(const char* ptr, size_t size) override {
    if (failed_) return -1;
    if (!write_started_) {
      write_started_ = true;
      write_deadline_ = Clock::now() + limits_.write_timeout;
    }
    for (;;) {
      if (ssl_ != nullptr) {
        ERR_clear_error();
        int r = SSL_write(ssl_, ptr, static_cast<int>(std::min<std::size_t>(size, 1 << 30)));
        if (r > 0) return r;
        int e = SSL_get_error(ssl_, r);
        if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
          if (!waitFor(e == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT, write_deadline_)) return -1;
          continue;
        }
      } else {
        ssize_t n = ::send(fd_, ptr, size, MSG_NOSIGNAL);
        if (n >= 0) return n;
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
          if (!waitFor(POLLOUT, write_deadline_)) return -1;
          continue;
        }
      }
      failed_ = true;
      return -1;
    }
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override { describePeer(fd_, false, ip, port); }
  void get_local_ip_and_port(std::string& ip, int& port) const override { describePeer(fd_, true, ip, port); }
  socket_t socket() const override { return fd_; }

 private:
  void compact() {
    if (pos_ == buf_.size()) {
      buf_.clear();
      pos_ = 0;
    }
  }

  // > 0 bytes; 0 the peer closed; -1 nothing now; -2 an error.
  ssize_t rawRead(char* to, std::size_t size) {
    for (;;) {
      if (ssl_ != nullptr) {
        ERR_clear_error();
        int r = SSL_read(ssl_, to, static_cast<int>(size));
        if (r > 0) return r;
        int e = SSL_get_error(ssl_, r);
        if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) return -1;
        if (e == SSL_ERROR_ZERO_RETURN) return 0;
        failed_ = true;
        return -2;
      }
      ssize_t n = ::recv(fd_, to, size, 0);
      if (n >= 0) return n;
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return -1;
      failed_ = true;
      return -2;
    }
  }

  // Polls for `events` until `deadline`; at the deadline the connection is done, and counted.
  bool waitFor(short events, Clock::time_point deadline) {
    for (;;) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0) break;
      pollfd p{fd_, events, 0};
      int r = ::poll(&p, 1, static_cast<int>(std::min<long long>(left, 60'000)));
      if (r > 0) return true;
      if (r < 0 && errno != EINTR) {
        failed_ = true;
        return false;
      }
    }
    ++counters_.timeouts;
    failed_ = true;
    return false;
  }

  int fd_;
  const HttpLimits& limits_;
  Counters& counters_;
  SSL* ssl_ = nullptr;
  bool handshaken_ = false;
  std::string buf_;
  std::size_t pos_ = 0;
  bool write_started_ = false, failed_ = false, close_after_ = false;
  Clock::time_point read_deadline_ = Clock::now(), write_deadline_ = Clock::now();
};

// A connection, owned by whichever holds it: the poller while it waits, a worker while it is
// served.
struct Connection {
  Connection(int socket, const HttpLimits& limits, Counters& c, std::shared_ptr<const Security> s)
      : fd(socket), stream(socket, limits, c), security(std::move(s)), counters(c) {
    ++counters.open;
  }
  ~Connection() {
    if (stream.ssl() != nullptr && stream.handshaken() && !stream.failed()) SSL_shutdown(stream.ssl());
    ::shutdown(fd, SHUT_RDWR);
    ::close(fd);
    --counters.open;
  }
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  int fd;
  ConnectionStream stream;
  std::shared_ptr<const Security> security;  // as it was when the connection came
  Counters& counters;
  Clock::time_point since = Clock::now();  // waiting since
  Clock::time_point deadline;              // closed then if still waiting
  std::size_t requests_left = 100;         // keep-alive: requests on one connection
  bool answered = false;                   // a request answered: waiting now is keep-alive idle time
};

std::string busyAnswer() {
  constexpr std::string_view kBody = R"({"error":"too many connections now"})";
  return fmt::format(
      "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\n"
      "Connection: close\r\nContent-Length: {}\r\n\r\n{}",
      kBody.size(), kBody);
}

// The connections: those waiting (for a handshake, a request's bytes, or a kept-alive
// connection's next request) are watched by one thread with epoll and cost no thread of their
// own; a request arrived whole goes to one of a few workers. Waiting connections beyond
// max_connections: the one waiting longest is closed. Whole requests beyond max_pending: 503.
class Poller {
 public:
  using Serve = std::function<bool(Connection&)>;  // true: keep the connection for the next request

  Poller(const HttpLimits& limits, Counters& counters, Serve serve)
      : limits_(limits), counters_(counters), serve_(std::move(serve)) {
    epoll_ = ::epoll_create1(EPOLL_CLOEXEC);
    wake_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.ptr = nullptr;
    ::epoll_ctl(epoll_, EPOLL_CTL_ADD, wake_, &ev);
    poller_ = std::thread([this] { loop(); });
    for (std::size_t i = 0; i < limits_.workers; ++i) workers_.emplace_back([this] { work(); });
  }
  ~Poller() { stop(); }
  Poller(const Poller&) = delete;
  Poller& operator=(const Poller&) = delete;

  // A new connection (the listen thread) or one kept alive after its answer (a worker).
  void watch(std::unique_ptr<Connection> c) {
    {
      std::lock_guard lk(m_);
      if (stopping_) return;
      incoming_.push_back(std::move(c));
    }
    std::uint64_t one = 1;
    [[maybe_unused]] auto n = ::write(wake_, &one, sizeof(one));
  }

  void stop() {
    {
      std::lock_guard lk(m_);
      if (stopping_) return;
      stopping_ = true;
    }
    std::uint64_t one = 1;
    [[maybe_unused]] auto n = ::write(wake_, &one, sizeof(one));
    poller_.join();
    {
      // A worker waiting on a slow client is woken at once rather than at its deadline.
      std::lock_guard lk(ready_m_);
      ready_stop_ = true;
      for (Connection* c : serving_) ::shutdown(c->fd, SHUT_RDWR);
    }
    ready_cv_.notify_all();
    for (auto& t : workers_) t.join();
    ready_.clear();
    incoming_.clear();
    ::close(epoll_);
    ::close(wake_);
  }

 private:
  void loop() {
    std::array<epoll_event, 64> events{};
    for (;;) {
      // Awake for events, or at the next deadline of a connection waiting: none, no wakeups.
      int timeout = -1;
      if (!waiting_.empty()) {
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(next_deadline_ - Clock::now()).count();
        timeout = static_cast<int>(std::clamp<long long>(left + 1, 0, 60'000));
      }
      int n = ::epoll_wait(epoll_, events.data(), static_cast<int>(events.size()), timeout);
      for (int i = 0; i < n; ++i) {
        if (events[static_cast<std::size_t>(i)].data.ptr == nullptr) {
          std::uint64_t v = 0;
          [[maybe_unused]] auto r = ::read(wake_, &v, sizeof(v));
          continue;
        }
        auto* c = static_cast<Connection*>(events[static_cast<std::size_t>(i)].data.ptr);
        if (waiting_.contains(c)) progress(*c);
      }
      std::vector<std::unique_ptr<Connection>> arrived;
      {
        std::lock_guard lk(m_);
        if (stopping_) break;
        arrived.swap(incoming_);
      }
      for (auto& c : arrived) admit(std::move(c));
      if (auto now = Clock::now(); now >= next_deadline_) expire(now);
    }
    for (auto& [c, owned] : waiting_) ::epoll_ctl(epoll_, EPOLL_CTL_DEL, c->fd, nullptr);
    waiting_.clear();
  }

  void admit(std::unique_ptr<Connection> c) {
    if (waiting_.size() >= limits_.max_connections) {
      // Room for the newcomer: the connection that has waited longest goes.
      Connection* oldest = nullptr;
      for (const auto& [waiting, owned] : waiting_)
        if (oldest == nullptr || waiting->since < oldest->since) oldest = waiting;
      if (oldest != nullptr) {
        ++counters_.evicted;
        close(*oldest);
      }
    }
    c->since = Clock::now();
    c->deadline = c->since + (c->answered ? limits_.idle_timeout : limits_.request_timeout);
    if (waiting_.empty() || c->deadline < next_deadline_) next_deadline_ = c->deadline;
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET;
    ev.data.ptr = c.get();
    if (::epoll_ctl(epoll_, EPOLL_CTL_ADD, c->fd, &ev) != 0) return;  // closed with it
    Connection& ref = *c;
    waiting_.emplace(c.get(), std::move(c));
    progress(ref);
  }

  // What a waiting connection's new bytes make of it.
  void progress(Connection& c) {
    ConnectionStream& s = c.stream;
    if (c.security->tls && !s.handshaken()) {
      Step h = s.handshakeStep(c.security->tls->current().get());
      if (h == Step::kAgain) return;
      if (h == Step::kFailed || !certificateAllowed(s.ssl(), c.security->tls->config().client_allowed_sans)) {
        ++counters_.tls_failures;
        close(c);
        return;
      }
    }
    Step r = s.readAvailable();
    switch (s.request()) {
      case ConnectionStream::Request::kWhole: dispatch(c); return;
      case ConnectionStream::Request::kTooLarge:
        ++counters_.too_large;
        s.refuse("431 Request Header Fields Too Large");
        close(c);
        return;
      case ConnectionStream::Request::kPartial:
        if (r == Step::kFailed) close(c);
        return;
    }
  }

  void expire(Clock::time_point now) {
    std::vector<Connection*> late;
    next_deadline_ = Clock::time_point::max();
    for (const auto& [c, owned] : waiting_) {
      if (now >= c->deadline)
        late.push_back(c);
      else
        next_deadline_ = std::min(next_deadline_, c->deadline);
    }
    for (Connection* c : late) {
      // A kept-alive connection's idle time running out is no fault; a request that never came
      // whole (or a handshake that never ended) is.
      if (!c->answered || c->stream.buffered() > 0) ++counters_.timeouts;
      close(*c);
    }
  }

  void close(Connection& c) {
    ::epoll_ctl(epoll_, EPOLL_CTL_DEL, c.fd, nullptr);
    waiting_.erase(&c);
  }

  void dispatch(Connection& c) {
    ::epoll_ctl(epoll_, EPOLL_CTL_DEL, c.fd, nullptr);
    auto node = waiting_.extract(&c);
    if (node.empty()) return;
    std::unique_ptr<Connection> owned = std::move(node.mapped());
    {
      std::lock_guard lk(ready_m_);
      if (ready_.size() < limits_.max_pending) {
        ready_.push_back(std::move(owned));
        ready_cv_.notify_one();
        return;
      }
    }
    ++counters_.busy;
    if (!owned->security->tls) {
      static const std::string kBusy = busyAnswer();
      [[maybe_unused]] auto n = ::send(owned->fd, kBusy.data(), kBusy.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
    }
  }

  void work() {
    for (;;) {
      std::unique_ptr<Connection> c;
      {
        std::unique_lock lk(ready_m_);
        ready_cv_.wait(lk, [&] { return ready_stop_ || !ready_.empty(); });
        if (ready_stop_) return;
        c = std::move(ready_.front());
        ready_.pop_front();
        serving_.push_back(c.get());
      }
      bool keep = serve_(*c);
      {
        std::lock_guard lk(ready_m_);
        serving_.erase(std::find(serving_.begin(), serving_.end(), c.get()));
      }
      if (keep) {
        c->answered = true;
        watch(std::move(c));
      }
    }
  }

  HttpLimits limits_;
  Counters& counters_;
  Serve serve_;
  int epoll_ = -1, wake_ = -1;
  std::mutex m_;
  bool stopping_ = false;
  std::vector<std::unique_ptr<Connection>> incoming_;
  std::unordered_map<Connection*, std::unique_ptr<Connection>> waiting_;  // the poller thread's alone
  std::mutex ready_m_;
  std::condition_variable ready_cv_;
  bool ready_stop_ = false;
  std::deque<std::unique_ptr<Connection>> ready_;
  std::vector<Connection*> serving_;                            // by the workers now
  Clock::time_point next_deadline_ = Clock::time_point::max();  // the poller thread's alone
  std::thread poller_;
  std::vector<std::thread> workers_;
};

// httplib hands each accepted socket over at once (on the listen thread), never to a pool.
class HandOver final : public httplib::TaskQueue {
 public:
  void enqueue(std::function<void()> fn) override { fn(); }
  void shutdown() override {}
};

// The connection a worker serves (httplib's handlers do not say).
thread_local ConnectionStream* t_stream = nullptr;

}  // namespace

// httplib's server with headroom's connections.
class HttpCore final : public httplib::Server {
 public:
  HttpCore(HttpLimits limits, std::shared_ptr<const Security> initial)
      : limits_(limits),
        security_(std::move(initial)),
        poller_(limits_, counters_, [this](Connection& c) { return serve(c); }) {
    new_task_queue = [] { return new HandOver(); };
    set_payload_max_length(limits_.max_body_bytes);
    set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
      auto sec = security();
      // A body over the limit is refused before it is read (httplib would read it all first).
      if (auto length = req.get_header_value("Content-Length"); !length.empty()) {
        std::uint64_t n = 0;
        auto [end, ec] = std::from_chars(length.data(), length.data() + length.size(), n);
        bool number = ec == std::errc() && end == length.data() + length.size();
        if (!number || n > limits_.max_body_bytes) {
          if (t_stream != nullptr) t_stream->closeAfter();
          res.status = number ? 413 : 400;
          res.set_header("Connection", "close");
          return HandlerResponse::Handled;
        }
      }
      if (sec->auth && !sec->auth->allows(req.get_header_value("Authorization"))) {
        ++counters_.unauthorized;
        res.status = 401;
        res.set_header("WWW-Authenticate", R"(Basic realm="headroom", charset="UTF-8")");
        res.set_content("{\"error\":\"unauthorized\"}\n", "application/json");
        for (const auto& [k, v] : sec->headers) res.set_header(k, v);
        return HandlerResponse::Handled;
      }
      return HandlerResponse::Unhandled;
    });
    set_post_routing_handler([this](const httplib::Request&, httplib::Response& res) {
      for (const auto& [k, v] : security()->headers) res.set_header(k, v);
    });
    set_logger([this](const httplib::Request&, const httplib::Response& res) {
      ++counters_.requests;
      if (t_stream != nullptr && (res.status == 400 || res.status == 413 || res.status == 414)) t_stream->closeAfter();
    });
  }
  ~HttpCore() override { poller_.stop(); }
  HttpCore(const HttpCore&) = delete;
  HttpCore& operator=(const HttpCore&) = delete;

  // httplib's listen backlog is 5: a burst of scrapes would wait on SYN retransmits.
  void widenBacklog() { ::listen(svr_sock_, 1024); }

  std::shared_ptr<const Security> security() const {
    std::lock_guard lk(security_m_);
    return security_;
  }
  void setSecurity(std::shared_ptr<const Security> s) {
    std::lock_guard lk(security_m_);
    security_ = std::move(s);
  }

  HttpServerStats stats() const {
    HttpServerStats s;
    s.connections = counters_.connections;
    s.open = counters_.open;
    s.requests = counters_.requests;
    s.timeouts = counters_.timeouts;
    s.evicted = counters_.evicted;
    s.busy = counters_.busy;
    s.too_large = counters_.too_large;
    s.tls_failures = counters_.tls_failures;
    s.unauthorized = counters_.unauthorized;
    return s;
  }

 private:
  bool process_and_close_socket(socket_t sock) override {
    ++counters_.connections;
    ::fcntl(sock, F_SETFL, ::fcntl(sock, F_GETFL) | O_NONBLOCK);
    poller_.watch(std::make_unique<Connection>(sock, limits_, counters_, security()));
    return true;
  }

  // A worker: the requests the buffer holds. True: the connection waits for its next one.
  bool serve(Connection& c) {
    ConnectionStream& s = c.stream;
    t_stream = &s;
    bool keep = true;
    do {
      s.beginRequest();
      bool closed = false, last = c.requests_left <= 1;
      bool ok = process_request(s, last, closed, [&](httplib::Request& req) { req.ssl = s.ssl(); });
      --c.requests_left;
      keep = ok && !closed && !last && !s.done();
    } while (keep && s.buffered() > 0);
    t_stream = nullptr;
    return keep;
  }

  HttpLimits limits_;
  Counters counters_;
  mutable std::mutex security_m_;
  std::shared_ptr<const Security> security_;
  Poller poller_;  // last: stopped first
};

}  // namespace exporter_detail

using exporter_detail::HttpCore;

Result<std::unique_ptr<HttpServer>> HttpServer::start(const ListenAddress& addr,
                                                      const std::map<std::string, HttpHandler>& routes,
                                                      const std::map<std::string, HttpHandler>& post_routes,
                                                      const std::optional<WebConfig>& web, HttpLimits limits) {
  auto security = exporter_detail::securityOf(web);
  if (!security) return security.error();
  // Each connection is a descriptor: those waiting, and those queued, a quarter of the limit each.
  if (rlimit rl{}; ::getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
    limits.max_connections = std::max<std::size_t>(1, std::min<std::size_t>(limits.max_connections, rl.rlim_cur / 4));
    limits.max_pending = std::max<std::size_t>(1, std::min<std::size_t>(limits.max_pending, rl.rlim_cur / 4));
  }
  std::unique_ptr<HttpServer> s(new HttpServer());
  s->core_ = std::make_unique<HttpCore>(limits, std::move(*security));
  HttpCore& srv = *s->core_;
  auto wrap = [](const HttpHandler& h) {
    return [h](const httplib::Request& req, httplib::Response& res) {
      HttpQuery q;
      for (const auto& [k, v] : req.params) q[k] = v;
      HttpResponse r = h(q);
      res.status = r.status;
      res.set_content(r.body, r.content_type);
    };
  };
  for (const auto& [path, handler] : routes) srv.Get(path, wrap(handler));
  for (const auto& [path, handler] : post_routes) srv.Post(path, wrap(handler));
  auto notAllowed = [](const httplib::Request&, httplib::Response& res) {
    res.status = 405;
    res.set_header("Allow", "GET");
    res.set_content("{\"error\":\"only GET is served\"}\n", "application/json");
  };
  srv.Post(".*", notAllowed);
  srv.Put(".*", notAllowed);
  srv.Delete(".*", notAllowed);
  srv.Patch(".*", notAllowed);
  srv.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (res.status == 404)
      res.set_content(fmt::format("{{\"error\":\"no such path: {}\",\"paths\":[\"/metrics\",\"/healthz\","
                                  "\"/v1/snapshot\",\"/v1/budget\",\"/v1/ooms\"]}}\n",
                                  req.path.size() > 200 ? req.path.substr(0, 200) : req.path),
                      "application/json");
  });

  // httplib takes "::1" for IPv6, not "[::1]".
  std::string host = addr.host;
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  int port = addr.port;
  if (port == 0) {
    port = srv.bind_to_any_port(host);
    if (port < 0) port = 0;
  } else if (!srv.bind_to_port(host, port)) {
    port = 0;
  }
  if (port == 0) {
    return sysError(
        errno == 0 ? EADDRNOTAVAIL : errno,
        fmt::format("cannot listen on {} (address in use, or not an address of this machine)", addr.text()));
  }
  srv.widenBacklog();
  ListenAddress bound = addr;
  bound.port = static_cast<std::uint16_t>(port);
  s->address_ = bound.text();
  s->port_ = bound.port;
  s->thread_ = std::thread([&srv] { srv.listen_after_bind(); });
  // stop() before the loop runs would be lost (and the join would wait forever).
  for (int i = 0; i < 5000 && !srv.is_running(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return s;
}

HttpServer::~HttpServer() {
  if (core_) core_->stop();
  if (thread_.joinable()) thread_.join();
}

std::string HttpServer::address() const { return address_; }

bool HttpServer::tls() const { return core_ && core_->security()->tls != nullptr; }

HttpServerStats HttpServer::stats() const { return core_ ? core_->stats() : HttpServerStats{}; }

Status HttpServer::setWebConfig(const std::optional<WebConfig>& web) {
  auto security = exporter_detail::securityOf(web);
  if (!security) return security.error();
  core_->setSecurity(std::move(*security));
  return ok();
}

}  // namespace headroom
