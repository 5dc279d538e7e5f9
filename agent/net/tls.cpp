// TLS for the server (OpenSSL): the web config's tls_server_config made into a context, and the
// names of a client's certificate checked against client_allowed_sans.
#include "tls.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <openssl/err.h>
#include <openssl/x509v3.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <algorithm>
#include <string_view>

namespace headroom::net_detail {
namespace {

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

}  // namespace

Result<std::shared_ptr<TlsContext>> TlsContext::create(const WebTlsConfig& cfg) {
  auto tls = std::make_shared<TlsContext>(cfg);
  tls->stamps_ = tls->stamps();
  auto ctx = buildContext(cfg);
  if (!ctx) return ctx.error();
  tls->ctx_ = std::move(*ctx);
  return tls;
}

std::shared_ptr<SSL_CTX> TlsContext::current() {
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

std::array<TlsContext::Stamp, 3> TlsContext::stamps() const {
  std::array<Stamp, 3> out{};
  const std::array<const std::string*, 3> files = {&cfg_.cert_file, &cfg_.key_file, &cfg_.client_ca_file};
  for (std::size_t i = 0; i < files.size(); ++i) {
    struct stat st {};
    if (!files[i]->empty() && ::stat(files[i]->c_str(), &st) == 0)
      out[i] = {st.st_mtim.tv_sec * 1'000'000'000LL + st.st_mtim.tv_nsec, static_cast<std::int64_t>(st.st_ino)};
  }
  return out;
}

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

}  // namespace headroom::net_detail
