#include "testing/pki.h"

#include <crypt.h>
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <array>

#include "testing/child_process.h"

namespace headroom::testing {
namespace {

void run(const std::string& cmd) {
  auto r = runCommand({"/bin/sh", "-c", cmd + " 2>&1"});
  ASSERT_EQ(r.exit_code, 0) << cmd << "\n" << r.out;
}

}  // namespace

void Pki::make(const std::string& d) {
  auto p = [&](const char* name) { return fmt::format("{}/{}", d, name); };
  ca = p("ca.crt");
  server_crt = p("server.crt");
  server_key = p("server.key");
  client_ca = p("client-ca.crt");
  client_crt = p("client.crt");
  client_key = p("client.key");
  stranger_crt = p("stranger.crt");
  stranger_key = p("stranger.key");
  auto caCmd = [&](const std::string& name, const std::string& cn) {
    return fmt::format(
        "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj /CN={} "
        "-keyout {d}/{n}.key -out {d}/{n}.crt",
        cn, fmt::arg("d", d), fmt::arg("n", name));
  };
  auto leaf = [&](const std::string& name, const std::string& cn, const std::string& signer, const std::string& san) {
    return fmt::format(
        "openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN={cn} -keyout {d}/{n}.key "
        "-out {d}/{n}.csr && printf 'subjectAltName={san}\\n' > {d}/{n}.ext && "
        "openssl x509 -req -in {d}/{n}.csr -CA {d}/{s}.crt -CAkey {d}/{s}.key -CAcreateserial -days 2 "
        "-extfile {d}/{n}.ext -out {d}/{n}.crt",
        fmt::arg("cn", cn), fmt::arg("d", d), fmt::arg("n", name), fmt::arg("s", signer), fmt::arg("san", san));
  };
  ASSERT_NO_FATAL_FAILURE(run(caCmd("ca", "headroom-test-ca")));
  ASSERT_NO_FATAL_FAILURE(run(leaf("server", "headroom-test", "ca", "IP:127.0.0.1,DNS:localhost")));
  ASSERT_NO_FATAL_FAILURE(run(caCmd("client-ca", "headroom-test-clients")));
  ASSERT_NO_FATAL_FAILURE(run(leaf("client", "prometheus", "client-ca", "DNS:prometheus.example")));
  ASSERT_NO_FATAL_FAILURE(run(caCmd("stranger-ca", "someone-else")));
  ASSERT_NO_FATAL_FAILURE(run(leaf("stranger", "prometheus", "stranger-ca", "DNS:prometheus.example")));
}

std::string bcrypt(const std::string& password, int cost) {
  std::array<char, CRYPT_GENSALT_OUTPUT_SIZE> salt{};
  if (::crypt_gensalt_rn("$2b$", static_cast<unsigned long>(cost), nullptr, 0, salt.data(),
                         static_cast<int>(salt.size())) == nullptr)
    return "";
  crypt_data data{};
  const char* h = ::crypt_rn(password.c_str(), salt.data(), &data, sizeof(data));
  return h == nullptr ? "" : h;
}

}  // namespace headroom::testing
