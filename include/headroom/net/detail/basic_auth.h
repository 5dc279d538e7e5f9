// The server's basic auth: an "Authorization: Basic ..." header checked against the web config's
// bcrypt hashes (crypt(3)). Internal to the net layer; here so that its tests can reach it.
#pragma once

#include <array>
#include <map>
#include <mutex>
#include <set>
#include <string>

namespace headroom::net_detail {

// A bcrypt check costs tens of milliseconds by design, so a (user, password, hash) that passed
// is remembered, as a SHA-256 digest only, for the next scrape; an unknown user costs a check
// too (no timing tells users).
class BasicAuth {
 public:
  explicit BasicAuth(std::map<std::string, std::string> users);  // user -> bcrypt hash

  // Whether the header's value ("Basic dXNlcjpwYXNz") names a user and that user's password.
  bool allows(const std::string& header);

 private:
  using Digest = std::array<unsigned char, 32>;

  std::map<std::string, std::string> users_;
  std::string dummy_hash_;
  std::mutex m_;
  std::set<Digest> passed_;
};

}  // namespace headroom::net_detail
