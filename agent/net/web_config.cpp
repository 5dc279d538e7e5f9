#include "headroom/net/web_config.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>

#include "headroom/util/text.h"

namespace headroom {
namespace {

Result<std::string> readFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return errnoError(fmt::format("cannot read {}", path));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return errnoError(fmt::format("reading {}", path));
  return ss.str();
}

constexpr std::array<std::pair<ClientAuth, const char*>, 5> kClientAuth = {{
    {ClientAuth::kNone, "NoClientCert"},
    {ClientAuth::kRequest, "RequestClientCert"},
    {ClientAuth::kRequireAny, "RequireAnyClientCert"},
    {ClientAuth::kVerifyIfGiven, "VerifyClientCertIfGiven"},
    {ClientAuth::kRequireAndVerify, "RequireAndVerifyClientCert"},
}};
constexpr std::array<const char*, 4> kVersions = {"TLS10", "TLS11", "TLS12", "TLS13"};
constexpr std::array<const char*, 4> kCurves = {"CurveP256", "CurveP384", "CurveP521", "X25519"};
// The security headers the Prometheus exporters allow in http_server_config.headers.
constexpr std::array<const char*, 5> kHeaders = {"Strict-Transport-Security", "X-Content-Type-Options",
                                                 "X-Frame-Options", "X-XSS-Protection", "Content-Security-Policy"};

// Parsing keeps the file's name and says where in it a value is wrong.
class Reader {
 public:
  explicit Reader(std::string path) : path_(std::move(path)) {}

  Error fail(const YAML::Node& n, std::string_view key, std::string_view reason) const {
    auto m = n.Mark();
    std::string where = m.line >= 0 ? fmt::format(" line {}", m.line + 1) : "";
    return badInput(fmt::format("web config {}{}: {}: {}", path_, where, key, reason));
  }

  Result<std::string> string(const YAML::Node& n, std::string_view key) const {
    if (!n.IsScalar()) return fail(n, key, "must be a string");
    return n.Scalar();
  }

  Result<bool> boolean(const YAML::Node& n, std::string_view key) const {
    if (n.IsScalar()) {
      const std::string& s = n.Scalar();
      if (s == "true") return true;
      if (s == "false") return false;
    }
    return fail(n, key, "must be true or false");
  }

  Result<std::vector<std::string>> strings(const YAML::Node& n, std::string_view key) const {
    if (!n.IsSequence()) return fail(n, key, "must be a list of strings");
    std::vector<std::string> out;
    for (const auto& item : n) {
      if (!item.IsScalar()) return fail(item, key, "must be a list of strings");
      out.push_back(item.Scalar());
    }
    return out;
  }

  // A file named in the config, relative to the config's own directory.
  Result<std::string> file(const YAML::Node& n, std::string_view key) const {
    auto s = string(n, key);
    if (!s) return s;
    if (s->empty()) return fail(n, key, "must name a file");
    if (s->front() == '/') return s;
    auto slash = path_.rfind('/');
    std::string dir = slash == std::string::npos ? "." : path_.substr(0, slash == 0 ? 1 : slash);
    return dir == "/" ? "/" + *s : dir + "/" + *s;
  }

  // Every key of the mapping must be one of `known`.
  Status keys(const YAML::Node& n, std::string_view section, std::initializer_list<std::string_view> known) const {
    if (!n.IsMap()) return fail(n, section, "must be a mapping");
    for (const auto& kv : n) {
      std::string k = kv.first.Scalar();
      if (std::find(known.begin(), known.end(), k) == known.end()) {
        std::string list;
        for (auto w : known) list += fmt::format("{}{}", list.empty() ? "" : ", ", w);
        std::string name = section.empty() ? k : fmt::format("{}.{}", section, k);
        return fail(kv.first, name, fmt::format("is not a key headroom knows (known: {})", list));
      }
    }
    return ok();
  }

 private:
  std::string path_;
};

Result<WebTlsConfig> parseTls(const Reader& r, const YAML::Node& n) {
  constexpr std::string_view kS = "tls_server_config";
  if (auto st = r.keys(
          n, kS,
          {"cert_file", "key_file", "client_auth_type", "client_ca_file", "min_version", "max_version", "cipher_suites",
           "curve_preferences", "prefer_server_cipher_suites", "client_allowed_sans", "cert", "key", "client_ca"});
      !st)
    return st.error();
  for (const char* inline_pem : {"cert", "key", "client_ca"}) {
    if (n[inline_pem])
      return r.fail(n[inline_pem], fmt::format("{}.{}", kS, inline_pem),
                    "certificates written into the file are not supported; name them with cert_file, key_file and "
                    "client_ca_file");
  }
  WebTlsConfig t;
  if (!n["cert_file"]) return r.fail(n, kS, "cert_file is missing");
  if (!n["key_file"]) return r.fail(n, kS, "key_file is missing");
  auto cert = r.file(n["cert_file"], "tls_server_config.cert_file");
  if (!cert) return cert.error();
  auto key = r.file(n["key_file"], "tls_server_config.key_file");
  if (!key) return key.error();
  t.cert_file = *cert;
  t.key_file = *key;
  if (auto a = n["client_auth_type"]) {
    auto s = r.string(a, "tls_server_config.client_auth_type");
    if (!s) return s.error();
    auto it = std::find_if(kClientAuth.begin(), kClientAuth.end(), [&](const auto& p) { return *s == p.second; });
    if (it == kClientAuth.end())
      return r.fail(a, fmt::format("tls_server_config.client_auth_type {}", quotedText(*s)),
                    "must be one of NoClientCert, RequestClientCert, RequireAnyClientCert, VerifyClientCertIfGiven, "
                    "RequireAndVerifyClientCert");
    t.client_auth = it->first;
  }
  if (auto ca = n["client_ca_file"]) {
    auto f = r.file(ca, "tls_server_config.client_ca_file");
    if (!f) return f.error();
    t.client_ca_file = *f;
  }
  bool verifies = t.client_auth == ClientAuth::kVerifyIfGiven || t.client_auth == ClientAuth::kRequireAndVerify;
  if (verifies && t.client_ca_file.empty())
    return r.fail(n, "tls_server_config.client_ca_file",
                  fmt::format("is needed when client_auth_type is {}", toString(t.client_auth)));
  if (!verifies && !t.client_ca_file.empty())
    return r.fail(n["client_ca_file"], "tls_server_config.client_ca_file",
                  fmt::format("is given but client_auth_type {} verifies no client certificate (use "
                              "VerifyClientCertIfGiven or RequireAndVerifyClientCert)",
                              toString(t.client_auth)));
  for (auto [name, field] : {std::pair{"min_version", &t.min_version}, std::pair{"max_version", &t.max_version}}) {
    auto v = n[name];
    if (!v) continue;
    std::string what = fmt::format("{}.{}", kS, name);
    auto s = r.string(v, what);
    if (!s) return s.error();
    if (std::find_if(kVersions.begin(), kVersions.end(), [&](const char* x) { return *s == x; }) == kVersions.end())
      return r.fail(v, fmt::format("{} {}", what, quotedText(*s)), "must be one of TLS10, TLS11, TLS12, TLS13");
    *field = *s;
  }
  if (!t.max_version.empty() && t.max_version < t.min_version)
    return r.fail(n["max_version"], "tls_server_config.max_version",
                  fmt::format("{} is older than min_version {}", t.max_version, t.min_version));
  if (auto c = n["cipher_suites"]) {
    auto v = r.strings(c, "tls_server_config.cipher_suites");
    if (!v) return v.error();
    t.cipher_suites = std::move(*v);
  }
  if (auto c = n["curve_preferences"]) {
    auto v = r.strings(c, "tls_server_config.curve_preferences");
    if (!v) return v.error();
    for (const auto& curve : *v) {
      if (std::find_if(kCurves.begin(), kCurves.end(), [&](const char* x) { return curve == x; }) == kCurves.end())
        return r.fail(c, fmt::format("tls_server_config.curve_preferences {}", quotedText(curve)),
                      "must be among CurveP256, CurveP384, CurveP521, X25519");
    }
    t.curve_preferences = std::move(*v);
  }
  if (auto p = n["prefer_server_cipher_suites"]) {
    auto b = r.boolean(p, "tls_server_config.prefer_server_cipher_suites");
    if (!b) return b.error();
    t.prefer_server_cipher_suites = *b;
  }
  if (auto s = n["client_allowed_sans"]) {
    auto v = r.strings(s, "tls_server_config.client_allowed_sans");
    if (!v) return v.error();
    if (!verifies && !v->empty())
      return r.fail(s, "tls_server_config.client_allowed_sans",
                    "needs a client_auth_type that verifies the client's certificate");
    t.client_allowed_sans = std::move(*v);
  }
  return t;
}

Result<WebConfig> parseYaml(const Reader& r, const YAML::Node& root, const std::string& path) {
  WebConfig c;
  c.path = path;
  if (!root || root.IsNull()) return c;  // an empty file: plain HTTP, no auth (as the exporters do)
  if (auto st = r.keys(root, "", {"tls_server_config", "http_server_config", "basic_auth_users"}); !st)
    return st.error();
  if (auto t = root["tls_server_config"]; t && !t.IsNull()) {
    auto tls = parseTls(r, t);
    if (!tls) return tls.error();
    c.tls = std::move(*tls);
  }
  if (auto h = root["http_server_config"]; h && !h.IsNull()) {
    if (auto st = r.keys(h, "http_server_config", {"http2", "headers"}); !st) return st.error();
    if (auto v = h["http2"]) {
      auto b = r.boolean(v, "http_server_config.http2");
      if (!b) return b.error();
      if (*b)
        c.notes.push_back(
            fmt::format("{}: http_server_config.http2 is true, but headroom serves HTTP/1.1 only "
                        "(clients fall back to it)",
                        path));
    }
    if (auto hs = h["headers"]; hs && !hs.IsNull()) {
      if (!hs.IsMap()) return r.fail(hs, "http_server_config.headers", "must be a mapping of header to value");
      for (const auto& kv : hs) {
        std::string name = kv.first.Scalar();
        auto it = std::find_if(kHeaders.begin(), kHeaders.end(), [&](const char* x) {
          return name.size() == std::string_view(x).size() &&
                 std::equal(name.begin(), name.end(), x, [](char a, char b) {
                   return std::tolower(static_cast<unsigned char>(a)) == std::tolower(static_cast<unsigned char>(b));
                 });
        });
        if (it == kHeaders.end())
          return r.fail(kv.first, fmt::format("http_server_config.headers {}", quotedText(name)),
                        "is not one of Strict-Transport-Security, X-Content-Type-Options, X-Frame-Options, "
                        "X-XSS-Protection, Content-Security-Policy");
        auto v = r.string(kv.second, fmt::format("http_server_config.headers.{}", name));
        if (!v) return v.error();
        if (v->find_first_of("\r\n") != std::string::npos)
          return r.fail(kv.second, fmt::format("http_server_config.headers.{}", name), "must be one line");
        c.headers.emplace_back(*it, *v);
      }
    }
  }
  if (auto u = root["basic_auth_users"]; u && !u.IsNull()) {
    if (!u.IsMap()) return r.fail(u, "basic_auth_users", "must be a mapping of user name to bcrypt hash");
    for (const auto& kv : u) {
      std::string user = kv.first.Scalar();
      std::string key = fmt::format("basic_auth_users.{}", user);
      if (user.empty() || user.find(':') != std::string::npos)
        return r.fail(kv.first, "basic_auth_users",
                      fmt::format("user name {} must be non-empty and without ':'", quotedText(user)));
      auto h = r.string(kv.second, key);
      if (!h) return h.error();
      if (!isBcryptHash(*h))
        return r.fail(kv.second, key,
                      "must be a bcrypt hash ($2y$..., e.g. from htpasswd -nBC 10 \"\"), not a password");
      c.basic_auth_users.emplace(user, *h);
    }
  }
  return c;
}

}  // namespace

const char* toString(ClientAuth a) {
  for (const auto& [k, name] : kClientAuth)
    if (k == a) return name;
  return "?";
}

bool isBcryptHash(std::string_view h) {
  // $2b$10$ + 22 characters of salt + 31 of hash.
  if (h.size() != 60 || h[0] != '$' || h[1] != '2' || h[3] != '$' || h[6] != '$') return false;
  if (h[2] != 'a' && h[2] != 'b' && h[2] != 'y') return false;
  if (!std::isdigit(static_cast<unsigned char>(h[4])) || !std::isdigit(static_cast<unsigned char>(h[5]))) return false;
  int cost = (h[4] - '0') * 10 + (h[5] - '0');
  if (cost < 4 || cost > 31) return false;
  return std::all_of(h.begin() + 7, h.end(),
                     [](char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '.' || c == '/'; });
}

Result<WebConfig> parseWebConfig(std::string_view text, const std::string& path) {
  Reader r(path);
  try {
    YAML::Node root = YAML::Load(std::string(text));
    return parseYaml(r, root, path);
  } catch (const YAML::Exception& e) {
    std::string where = e.mark.line >= 0 ? fmt::format(" line {}", e.mark.line + 1) : "";
    return badInput(fmt::format("web config {}{}: not YAML: {}", path, where, e.msg));
  }
}

Result<WebConfig> loadWebConfig(const std::string& path) {
  auto text = readFile(path);
  if (!text) return text.error().wrap("web config").as(ErrorKind::kBadInput);
  auto c = parseWebConfig(*text, path);
  if (!c) return c;
  if (c->tls) {
    for (const auto& [key, file] : {std::pair{"cert_file", c->tls->cert_file}, std::pair{"key_file", c->tls->key_file},
                                    std::pair{"client_ca_file", c->tls->client_ca_file}}) {
      if (file.empty()) continue;
      if (auto t = readFile(file); !t)
        return t.error().wrap(fmt::format("web config {}: tls_server_config.{}", path, key)).as(ErrorKind::kBadInput);
    }
  }
  return c;
}

}  // namespace headroom
