// The server's basic auth on its own: the header's forms, right and wrong credentials, unknown
// users, and a check that passed remembered without keeping the password.
#include "headroom/net/detail/basic_auth.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <string>

#include "testing/pki.h"

namespace headroom {
namespace {

using net_detail::BasicAuth;

// "Basic " and base64 of "user:password", as a client sends them.
std::string header(const std::string& scheme, const std::string& credentials) {
  static constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  for (std::size_t i = 0; i < credentials.size(); i += 3) {
    std::uint32_t v = static_cast<unsigned char>(credentials[i]) << 16;
    if (i + 1 < credentials.size()) v |= static_cast<unsigned char>(credentials[i + 1]) << 8;
    if (i + 2 < credentials.size()) v |= static_cast<unsigned char>(credentials[i + 2]);
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += i + 1 < credentials.size() ? kAlphabet[(v >> 6) & 63] : '=';
    out += i + 2 < credentials.size() ? kAlphabet[v & 63] : '=';
  }
  return scheme + " " + out;
}

BasicAuth users() {
  return BasicAuth({{"prometheus", testing::bcrypt("s3cret scrape", 4)}, {"ops", testing::bcrypt("pw", 4)}});
}

TEST(BasicAuth, TheRightPasswordOfAKnownUserPassesInAnyCaseOfBasic) {
  BasicAuth auth = users();
  EXPECT_TRUE(auth.allows(header("Basic", "prometheus:s3cret scrape")));
  EXPECT_TRUE(auth.allows(header("basic", "prometheus:s3cret scrape"))) << "the scheme is case-insensitive";
  EXPECT_TRUE(auth.allows(header("BASIC", "ops:pw")));
  EXPECT_TRUE(auth.allows(header("Basic", "prometheus:s3cret scrape"))) << "again, from what passed";
}

TEST(BasicAuth, AnythingElseIsRefused) {
  BasicAuth auth = users();
  EXPECT_FALSE(auth.allows(""));
  EXPECT_FALSE(auth.allows("Basic"));
  EXPECT_FALSE(auth.allows("Basic "));
  EXPECT_FALSE(auth.allows(header("Bearer", "prometheus:s3cret scrape")));
  EXPECT_FALSE(auth.allows(header("Basic", "prometheus:guess")));
  EXPECT_FALSE(auth.allows(header("Basic", "prometheus:s3cret scrape ")));
  EXPECT_FALSE(auth.allows(header("Basic", "ops:s3cret scrape"))) << "another user's password";
  EXPECT_FALSE(auth.allows(header("Basic", "nobody:pw"))) << "an unknown user";
  EXPECT_FALSE(auth.allows(header("Basic", "prometheus"))) << "no colon";
  EXPECT_FALSE(auth.allows("Basic not*base64!"));
  EXPECT_FALSE(auth.allows("Basic " + std::string(8192, 'A'))) << "longer than any credentials";
  // A wrong password after the right one passed is still wrong: what is remembered is the pair.
  EXPECT_TRUE(auth.allows(header("Basic", "ops:pw")));
  EXPECT_FALSE(auth.allows(header("Basic", "ops:pw2")));
}

TEST(BasicAuth, NoUsersAllowNobody) {
  BasicAuth none({});
  EXPECT_FALSE(none.allows(header("Basic", "ops:pw")));
  EXPECT_FALSE(none.allows(header("Basic", ":")));
}

}  // namespace
}  // namespace headroom
