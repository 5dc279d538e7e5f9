// The web configuration file (TLS, basic auth): hand-made files in the Prometheus exporters'
// format, good and broken.
#include "headroom/net/web_config.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace headroom {
namespace {

constexpr const char* kHash = "$2y$10$X0Zn3Nn2ZzBQpRQdE8Vl4eFZbpu0R6a8eIvZ7t8jtr3o2sI9V1c9W";

Result<WebConfig> parse(const std::string& text) { return parseWebConfig(text, "/etc/headroom/web.yml"); }

std::string errorOf(const std::string& text) {
  auto c = parse(text);
  EXPECT_FALSE(c) << text;
  if (c) return "";
  EXPECT_EQ(c.error().kind, ErrorKind::kBadInput);
  return c.error().describe();
}

TEST(WebConfig, AnEmptyFileMeansPlainHttpWithoutAuth) {
  auto c = parse("");
  ASSERT_TRUE(c) << c.error().describe();
  EXPECT_FALSE(c->tls);
  EXPECT_TRUE(c->basic_auth_users.empty());
  auto comments = parse("# nothing yet\n");
  ASSERT_TRUE(comments);
  EXPECT_FALSE(comments->tls);
}

TEST(WebConfig, EveryKeyIsRead) {
  auto c = parse(std::string(R"(# hand-made: every key headroom reads
tls_server_config:
  cert_file: server.crt
  key_file: /etc/ssl/private/server.key
  client_auth_type: RequireAndVerifyClientCert
  client_ca_file: clients/ca.crt
  min_version: TLS13
  max_version: TLS13
  cipher_suites: [TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256]
  curve_preferences: [X25519, CurveP256]
  prefer_server_cipher_suites: false
  client_allowed_sans: [prometheus.example]
http_server_config:
  http2: true
  headers:
    x-content-type-options: nosniff
basic_auth_users:
  prometheus: )") +
                 kHash + "\n");
  ASSERT_TRUE(c) << c.error().describe();
  ASSERT_TRUE(c->tls);
  EXPECT_EQ(c->tls->cert_file, "/etc/headroom/server.crt") << "relative to the file's own directory";
  EXPECT_EQ(c->tls->key_file, "/etc/ssl/private/server.key");
  EXPECT_EQ(c->tls->client_ca_file, "/etc/headroom/clients/ca.crt");
  EXPECT_EQ(c->tls->client_auth, ClientAuth::kRequireAndVerify);
  EXPECT_EQ(c->tls->min_version, "TLS13");
  EXPECT_EQ(c->tls->max_version, "TLS13");
  EXPECT_EQ(c->tls->cipher_suites, std::vector<std::string>{"TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256"});
  EXPECT_EQ(c->tls->curve_preferences, (std::vector<std::string>{"X25519", "CurveP256"}));
  EXPECT_FALSE(c->tls->prefer_server_cipher_suites);
  EXPECT_EQ(c->tls->client_allowed_sans, std::vector<std::string>{"prometheus.example"});
  ASSERT_EQ(c->headers.size(), 1u);
  EXPECT_EQ(c->headers[0].first, "X-Content-Type-Options") << "the header's own spelling";
  EXPECT_EQ(c->basic_auth_users.at("prometheus"), kHash);
  ASSERT_EQ(c->notes.size(), 1u) << "http2 asked for is said, not dropped in silence";
  EXPECT_NE(c->notes[0].find("HTTP/1.1"), std::string::npos);
}

TEST(WebConfig, MistakesNameTheFileTheLineAndTheKey) {
  EXPECT_EQ(errorOf("tls_config:\n  cert_file: a\n"),
            "web config /etc/headroom/web.yml line 1: tls_config: is not a key headroom knows (known: "
            "tls_server_config, http_server_config, basic_auth_users)");
  EXPECT_NE(errorOf("tls_server_config:\n  key_file: k\n").find("cert_file is missing"), std::string::npos);
  EXPECT_NE(errorOf("tls_server_config:\n  cert_file: c\n").find("key_file is missing"), std::string::npos);
  std::string auth = errorOf("tls_server_config:\n  cert_file: c\n  key_file: k\n  client_auth_type: Always\n");
  EXPECT_NE(auth.find("line 4: tls_server_config.client_auth_type \"Always\": must be one of"), std::string::npos)
      << auth;
  EXPECT_NE(errorOf("tls_server_config:\n  cert_file: c\n  key_file: k\n  client_auth_type: "
                    "RequireAndVerifyClientCert\n")
                .find("client_ca_file: is needed"),
            std::string::npos);
  EXPECT_NE(errorOf("tls_server_config:\n  cert_file: c\n  key_file: k\n  client_ca_file: ca\n")
                .find("verifies no client certificate"),
            std::string::npos);
  EXPECT_NE(errorOf("tls_server_config:\n  cert_file: c\n  key_file: k\n  min_version: TLS14\n")
                .find("must be one of TLS10, TLS11, TLS12, TLS13"),
            std::string::npos);
  EXPECT_NE(errorOf("tls_server_config:\n  cert_file: c\n  key_file: k\n  min_version: TLS13\n  max_version: TLS12\n")
                .find("older than min_version"),
            std::string::npos);
  EXPECT_NE(errorOf("tls_server_config:\n  cert_file: c\n  key_file: k\n  curve_preferences: [P256]\n")
                .find("must be among CurveP256"),
            std::string::npos);
  EXPECT_NE(errorOf("tls_server_config:\n  cert: |\n    -----BEGIN CERTIFICATE-----\n").find("not supported"),
            std::string::npos);
  EXPECT_NE(errorOf("basic_auth_users:\n  prometheus: hunter2\n").find("must be a bcrypt hash"), std::string::npos);
  EXPECT_NE(errorOf("basic_auth_users:\n  prometheus: $1$abc$def\n").find("must be a bcrypt hash"), std::string::npos);
  EXPECT_NE(errorOf("http_server_config:\n  headers:\n    Server: headroom\n").find("is not one of"),
            std::string::npos);
  EXPECT_NE(errorOf("http_server_config:\n  http2: maybe\n").find("must be true or false"), std::string::npos);
  EXPECT_NE(errorOf("basic_auth_users: [a, b]\n").find("must be a mapping"), std::string::npos);
  std::string yaml = errorOf("tls_server_config: {cert_file: [\n");
  EXPECT_NE(yaml.find("not YAML"), std::string::npos) << yaml;
}

TEST(WebConfig, BcryptHashesAreTold) {
  EXPECT_TRUE(isBcryptHash(kHash));
  EXPECT_TRUE(isBcryptHash("$2b$04$abcdefghijklmnopqrstuuM8Ck3kqpmJ5a9Uq1lq0Dr1.3bQ3yE0i"));
  EXPECT_FALSE(isBcryptHash("$2b$3$abcdefghijklmnopqrstuuM8Ck3kqpmJ5a9Uq1lq0Dr1.3bQ3yE0i"));
  EXPECT_FALSE(isBcryptHash("$2x$10$X0Zn3Nn2ZzBQpRQdE8Vl4eFZbpu0R6a8eIvZ7t8jtr3o2sI9V1c9W"));
  EXPECT_FALSE(isBcryptHash("$2y$10$X0Zn3Nn2ZzBQpRQdE8Vl4eFZbpu0R6a8eIvZ7t8jtr3o2sI9V1c9"));
  EXPECT_FALSE(isBcryptHash("$2y$10$X0Zn3Nn2ZzBQpRQdE8Vl4eFZbpu0R6a8eIvZ7t8jtr3o2sI9V1c9!"));
  EXPECT_FALSE(isBcryptHash(""));
}

TEST(WebConfig, LoadingChecksTheFilesItNames) {
  auto dir = std::filesystem::temp_directory_path() / "headroom-web-config-test";
  std::filesystem::create_directories(dir);
  std::string path = (dir / "web.yml").string();
  std::ofstream(path) << "tls_server_config:\n  cert_file: missing.crt\n  key_file: missing.key\n";
  auto c = loadWebConfig(path);
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error().kind, ErrorKind::kBadInput);
  EXPECT_NE(c.error().describe().find("tls_server_config.cert_file: cannot read " + (dir / "missing.crt").string()),
            std::string::npos)
      << c.error().describe();
  auto none = loadWebConfig((dir / "absent.yml").string());
  ASSERT_FALSE(none);
  EXPECT_NE(none.error().describe().find("absent.yml"), std::string::npos);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace headroom
