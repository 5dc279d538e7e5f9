// The HTTP endpoint's web configuration file: TLS and basic auth, in the format of the
// Prometheus exporters' own (`--web.config.file`), so that an operator reuses theirs:
//
//   tls_server_config:
//     cert_file: server.crt            # relative paths: to this file's directory
//     key_file: server.key
//     client_auth_type: RequireAndVerifyClientCert
//     client_ca_file: clients-ca.crt
//     min_version: TLS12
//   http_server_config:
//     headers: {Strict-Transport-Security: max-age=31536000}
//   basic_auth_users:
//     prometheus: $2y$10$...           # bcrypt, e.g. from `htpasswd -nBC 10 ""`
//
// docs/operations.md describes every key. An unknown key, a missing file or a hash that is not
// bcrypt is an error that names the file and the key.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "headroom/util/result.h"

namespace headroom {

enum class ClientAuth {
  kNone,              // NoClientCert
  kRequest,           // RequestClientCert: asked for, not required, not verified
  kRequireAny,        // RequireAnyClientCert: required, not verified
  kVerifyIfGiven,     // VerifyClientCertIfGiven: verified against client_ca_file when sent
  kRequireAndVerify,  // RequireAndVerifyClientCert
};
const char* toString(ClientAuth a);

struct WebTlsConfig {
  std::string cert_file, key_file;  // absolute
  ClientAuth client_auth = ClientAuth::kNone;
  std::string client_ca_file;                      // absolute, or empty
  std::string min_version = "TLS12", max_version;  // TLS10..TLS13; max empty: the newest
  std::vector<std::string> cipher_suites;          // IANA names (TLS 1.2 and below); empty: the defaults
  std::vector<std::string> curve_preferences;      // CurveP256, CurveP384, CurveP521, X25519
  bool prefer_server_cipher_suites = true;
  std::vector<std::string> client_allowed_sans;  // a verified client certificate must name one
  bool operator==(const WebTlsConfig&) const = default;
};

struct WebConfig {
  std::string path;  // the file it came from
  std::optional<WebTlsConfig> tls;
  std::map<std::string, std::string> basic_auth_users;       // user -> bcrypt hash
  std::vector<std::pair<std::string, std::string>> headers;  // added to every response
  std::vector<std::string> notes;                            // said in the log at start: e.g. http2 asked for
  bool operator==(const WebConfig&) const = default;
};

// Parses the file's text; `path` names it in errors and anchors relative paths.
Result<WebConfig> parseWebConfig(std::string_view text, const std::string& path);
// Reads and parses the file, and checks that the files it names can be read.
Result<WebConfig> loadWebConfig(const std::string& path);

// Whether `hash` is one crypt(3) takes as bcrypt ($2a$, $2b$, $2y$ with a cost of 4..31).
bool isBcryptHash(std::string_view hash);

}  // namespace headroom
