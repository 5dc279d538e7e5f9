// Result<T>: expected failures as values, shaped like std::expected so it can become one later.
// Error carries a kind, an errno value when the system gave one, and a human context chain
// ("reading memory.stat of X: No such file or directory").
#pragma once

#include <cerrno>
#include <cstring>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>

namespace headroom {

// What kind of failure an error is, for whoever must act on it: one function turns kinds into
// exit codes (util/exit_codes.h), never the message's words.
enum class ErrorKind {
  kIo,            // the system refused a read, a write or a call (`code` says which errno)
  kUsage,         // the command line is wrong: a missing command or argument, flags that clash
  kBadInput,      // what a user gave is wrong: a flag's or config key's value, a file or path to use
  kBadData,       // what was read is malformed: a kernel file, an answer, a damaged record
  kNotFound,      // what was asked for does not exist: a file, a cgroup, a process
  kNotPermitted,  // the system said EPERM or EACCES
  kUnsupported,   // this kernel or machine cannot do it: no memory controller, no BPF, no tracepoint
  kUnavailable,   // the answer is no, for now: no room for a budget, no decision yet
  kNotPlaced,     // a command could not be placed where it must run (its cgroup): a shell's 126
  kNotStarted,    // a command could not be executed: a shell's 127
};
inline const char* toString(ErrorKind k) {
  switch (k) {
    case ErrorKind::kIo: return "io";
    case ErrorKind::kUsage: return "usage";
    case ErrorKind::kBadInput: return "bad_input";
    case ErrorKind::kBadData: return "bad_data";
    case ErrorKind::kNotFound: return "not_found";
    case ErrorKind::kNotPermitted: return "not_permitted";
    case ErrorKind::kUnsupported: return "unsupported";
    case ErrorKind::kUnavailable: return "unavailable";
    case ErrorKind::kNotPlaced: return "not_placed";
    case ErrorKind::kNotStarted: return "not_started";
  }
  return "?";
}

// The kind an errno value says.
inline ErrorKind kindOfErrno(int code) {
  switch (code) {
    case ENOENT:
    case ESRCH: return ErrorKind::kNotFound;
    case EPERM:
    case EACCES: return ErrorKind::kNotPermitted;
    case ENOSYS:
    case EOPNOTSUPP:
    case ENODEV: return ErrorKind::kUnsupported;
    default: return ErrorKind::kIo;
  }
}

struct Error {
  ErrorKind kind = ErrorKind::kBadData;
  int code = 0;         // errno value, or 0 when the system said none
  std::string message;  // what was being done, outermost context first

  // "reading X: No such file or directory"
  std::string describe() const {
    if (code == 0) return message;
    return message + ": " + std::strerror(code);
  }

  // Prepends context: err.wrap("reading memory.stat of /a") -> "reading memory.stat of /a: <old>".
  Error wrap(const std::string& context) const {
    return Error{kind, code, message.empty() ? context : context + ": " + message};
  }
  // The same failure judged by a caller that knows more: a --config file that cannot be read
  // is the user's bad input, whatever errno the read gave.
  Error as(ErrorKind k) const { return Error{k, code, message}; }
};

// A failure the system reported with errno value `code` (the kind follows from it, kindOfErrno);
// errnoError takes errno itself. Never for a failure no system call gave: name its kind below.
inline Error sysError(int code, std::string message) { return Error{kindOfErrno(code), code, std::move(message)}; }
inline Error errnoError(std::string message) { return sysError(errno, std::move(message)); }
inline Error makeError(ErrorKind kind, std::string message, int code = 0) {
  return Error{kind, code, std::move(message)};
}
inline Error usageError(std::string message) { return Error{ErrorKind::kUsage, 0, std::move(message)}; }
inline Error badInput(std::string message) { return Error{ErrorKind::kBadInput, 0, std::move(message)}; }
inline Error badData(std::string message) { return Error{ErrorKind::kBadData, 0, std::move(message)}; }
inline Error notFound(std::string message) { return Error{ErrorKind::kNotFound, 0, std::move(message)}; }
inline Error unsupported(std::string message) { return Error{ErrorKind::kUnsupported, 0, std::move(message)}; }
inline Error ioError(std::string message) { return Error{ErrorKind::kIo, 0, std::move(message)}; }

// Tag so that Result<Error> stays unambiguous; use unexpected(err) like std::unexpected.
struct Unexpected {
  Error error;
};
inline Unexpected unexpected(Error e) { return Unexpected{std::move(e)}; }

template <typename T>
class [[nodiscard]] Result {
 public:
  using value_type = T;

  Result(const T& v) : v_(v) {}                     // NOLINT(google-explicit-constructor): mirrors std::expected
  Result(T&& v) : v_(std::move(v)) {}               // NOLINT(google-explicit-constructor)
  Result(Unexpected u) : v_(std::move(u.error)) {}  // NOLINT(google-explicit-constructor)
  Result(Error e) : v_(std::move(e)) {}             // NOLINT(google-explicit-constructor)

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
  // Judges an error anew (Error::as), passes a value through.
  Result as(ErrorKind k) && {
    if (has_value()) return std::move(*this);
    return error().as(k);
  }

 private:
  std::variant<T, Error> v_;
};

// Result<void> equivalent.
struct Ok {};
using Status = Result<Ok>;
inline Status ok() { return Ok{}; }

}  // namespace headroom
