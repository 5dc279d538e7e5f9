// Result<T>: expected failures as values, shaped like std::expected so it can become one later.
// Error carries an errno-style code and a human context chain ("reading memory.stat of X: ENOENT").
#pragma once

#include <cerrno>
#include <cstring>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>

namespace headroom {

struct Error {
  int code = 0;         // errno value, or 0 for a content error (garbage, truncated)
  std::string message;  // what was being done, outermost context first

  // "reading X: No such file or directory (ENOENT)"
  std::string describe() const {
    if (code == 0) return message;
    return message + ": " + std::strerror(code);
  }

  // Prepends context: err.wrap("reading memory.stat of /a") -> "reading memory.stat of /a: <old>".
  Error wrap(const std::string& context) const {
    return Error{code, message.empty() ? context : context + ": " + message};
  }
};

inline Error makeError(int code, std::string message) { return Error{code, std::move(message)}; }
inline Error errnoError(std::string message) { return Error{errno, std::move(message)}; }

// Tag so that Result<Error> stays unambiguous; use unexpected(err) like std::unexpected.
struct Unexpected {
  Error error;
};
inline Unexpected unexpected(Error e) { return Unexpected{std::move(e)}; }

template <typename T>
class [[nodiscard]] Result {
 public:
  using value_type = T;

  Result(const T& v) : v_(v) {}  // NOLINT(google-explicit-constructor): mirrors std::expected
  Result(T&& v) : v_(std::move(v)) {}  // NOLINT(google-explicit-constructor)
  Result(Unexpected u) : v_(std::move(u.error)) {}  // NOLINT(google-explicit-constructor)
  Result(Error e) : v_(std::move(e)) {}  // NOLINT(google-explicit-constructor)

  bool has_value() const { return std::holds_alternative<T>(v_); }
  explicit operator bool() const { return has_value(); }

  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T&& operator*() && { return std::move(*this).value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

  const Error& error() const { return std::get<Error>(v_); }

  T value_or(T fallback) const { return has_value() ? value() : std::move(fallback); }

  // f: const T& -> Result<U>
  template <typename F>
  auto and_then(F&& f) const -> decltype(f(std::declval<const T&>())) {
    if (has_value()) return f(value());
    return error();
  }

  // f: const T& -> U; returns Result<U>
  template <typename F>
  auto transform(F&& f) const -> Result<decltype(f(std::declval<const T&>()))> {
    if (has_value()) return f(value());
    return error();
  }

  // Adds context to an error, passes a value through.
  Result wrap(const std::string& context) && {
    if (has_value()) return std::move(*this);
    return error().wrap(context);
  }

 private:
  std::variant<T, Error> v_;
};

// Result<void> equivalent.
struct Ok {};
using Status = Result<Ok>;
inline Status ok() { return Ok{}; }

}  // namespace headroom
