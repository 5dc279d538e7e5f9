// Basic auth for the server: the credentials of a request checked against bcrypt hashes, with
// what passed remembered (as digests) so that a scrape every few seconds costs no bcrypt each.
#include "headroom/net/detail/basic_auth.h"

#include <crypt.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <memory>
#include <string_view>

namespace headroom::net_detail {
namespace {

// The cache of checks that passed: bounded, emptied when full (a handful of users in practice).
constexpr std::size_t kMaxPassed = 256;

std::array<unsigned char, 32> digest(const std::string& user, const std::string& password, const std::string& hash) {
  std::string all = user + '\0' + password + '\0' + hash;
  std::array<unsigned char, 32> d{};
  unsigned int len = 0;
  EVP_Digest(all.data(), all.size(), d.data(), &len, EVP_sha256(), nullptr);
  OPENSSL_cleanse(all.data(), all.size());
  return d;
}

// "" for anything that is not base64 of a sensible length.
std::string decodeBase64(std::string_view in) {
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

}  // namespace

BasicAuth::BasicAuth(std::map<std::string, std::string> users) : users_(std::move(users)) {
  dummy_hash_ = users_.empty() ? std::string() : users_.begin()->second;
}

bool BasicAuth::allows(const std::string& header) {
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
  if (passed_.size() >= kMaxPassed) passed_.clear();
  passed_.insert(key);
  return true;
}

}  // namespace headroom::net_detail
