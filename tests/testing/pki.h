// Certificates and password hashes for the TLS and basic auth tests, made as an operator would:
// with the openssl command (a CA, a server, a client CA, a client, a stranger) and crypt(3).
#pragma once

#include <string>

namespace headroom::testing {

struct Pki {
  std::string ca, server_crt, server_key;         // the server's (127.0.0.1, localhost) and its CA
  std::string client_ca, client_crt, client_key;  // a client's (DNS:prometheus.example) and its CA
  std::string stranger_crt, stranger_key;         // a client's of a CA no config names
  // Makes them all in `dir`; a failure is a gtest failure (call under ASSERT_NO_FATAL_FAILURE).
  void make(const std::string& dir);
};

// A bcrypt hash of `password` ($2b$), as `htpasswd -nBC cost` makes one; "" when crypt cannot.
std::string bcrypt(const std::string& password, int cost = 10);

}  // namespace headroom::testing
