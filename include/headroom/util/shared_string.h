// An immutable string whose copies share one buffer: a copy costs a reference count, not an
// allocation and a copy of the bytes. For what a thousand processes repeat every sample: the
// twenty cgroup paths they are in, the command line the sampler read once per program.
#pragma once

#include <fmt/format.h>

#include <compare>
#include <memory>
#include <ostream>
#include <string>
#include <string_view>

namespace headroom {

class SharedString {
 public:
  SharedString() = default;
  SharedString(std::string s)  // NOLINT(google-explicit-constructor): a string is one
      : text_(s.empty() ? nullptr : std::make_shared<const std::string>(std::move(s))) {}
  SharedString(std::string_view s) : SharedString(std::string(s)) {}  // NOLINT(google-explicit-constructor)
  SharedString(const char* s) : SharedString(std::string(s)) {}       // NOLINT(google-explicit-constructor)

  const std::string& str() const { return text_ ? *text_ : blank(); }
  operator const std::string&() const { return str(); }  // NOLINT(google-explicit-constructor)
  operator std::string_view() const { return str(); }    // NOLINT(google-explicit-constructor)
  const char* c_str() const { return str().c_str(); }
  std::size_t size() const { return str().size(); }
  bool empty() const { return !text_; }
  // Whether both name the same buffer: equal without comparing a byte.
  bool sharesWith(const SharedString& o) const { return text_ == o.text_; }
  // The buffer, watched without being kept: for a memo keyed by it (a buffer watched cannot
  // be reused for another string while the watch lasts, so the key stays unambiguous).
  std::weak_ptr<const std::string> watch() const { return text_; }
  const void* identity() const { return text_.get(); }

  friend bool operator==(const SharedString& a, const SharedString& b) {
    return a.text_ == b.text_ || a.str() == b.str();
  }
  friend bool operator==(const SharedString& a, std::string_view b) { return std::string_view(a.str()) == b; }
  friend bool operator==(const SharedString& a, const std::string& b) { return a.str() == b; }
  friend bool operator==(const SharedString& a, const char* b) { return a.str() == b; }
  friend std::strong_ordering operator<=>(const SharedString& a, const SharedString& b) {
    return a.str().compare(b.str()) <=> 0;
  }
  friend std::ostream& operator<<(std::ostream& os, const SharedString& s) { return os << s.str(); }

 private:
  static const std::string& blank() {
    static const std::string kEmpty;
    return kEmpty;
  }
  std::shared_ptr<const std::string> text_;
};

}  // namespace headroom

template <>
struct fmt::formatter<headroom::SharedString> : fmt::formatter<std::string_view> {
  template <typename FormatContext>
  auto format(const headroom::SharedString& s, FormatContext& ctx) const {
    return fmt::formatter<std::string_view>::format(std::string_view(s.str()), ctx);
  }
};
