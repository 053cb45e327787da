#pragma once
// paco::errc, paco::error, paco::result<T>: how I/O, network and user input report failure.
// Library code never calls exit() or abort(); contract violations are PACO_ASSERT (debug only).

#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <system_error>
#include <utility>
#include <variant>

namespace paco {

// Error codes of paco's own category. Values are stable (they appear on the wire).
enum class errc : int {
  ok = 0,
  invalid_argument = 1,  // a config field or argument outside its accepted range
  io = 2,                // a file could not be read or written
  corrupt = 3,           // a file or frame failed a format or checksum check
  not_found = 4,         // a file, key or module does not exist
  timeout = 5,           // a deadline passed
  peer_lost = 6,         // a peer closed, crashed or stopped heartbeating
  cancelled = 7,         // the operation was cancelled
  protocol = 8,          // a peer sent something the protocol does not allow
  auth = 9,              // a peer failed authentication
  version = 10,          // incompatible wire or file version
  too_large = 11,        // a length exceeds the configured bound
  mismatch = 12,         // hashes, shapes or sizes that must agree do not
  unsupported = 13,      // valid request this build or backend cannot do
};

inline const std::error_category& paco_category() noexcept {
  struct category final : std::error_category {
    const char* name() const noexcept override { return "paco"; }
    std::string message(int v) const override {
      switch (static_cast<errc>(v)) {
        case errc::ok: return "ok";
        case errc::invalid_argument: return "invalid argument";
        case errc::io: return "i/o error";
        case errc::corrupt: return "corrupt data";
        case errc::not_found: return "not found";
        case errc::timeout: return "deadline exceeded";
        case errc::peer_lost: return "peer lost";
        case errc::cancelled: return "cancelled";
        case errc::protocol: return "protocol violation";
        case errc::auth: return "authentication failed";
        case errc::version: return "version mismatch";
        case errc::too_large: return "length exceeds bound";
        case errc::mismatch: return "mismatch";
        case errc::unsupported: return "unsupported";
      }
      return "unknown paco error";
    }
  };
  static const category c;
  return c;
}

inline std::error_code make_error_code(errc e) noexcept {
  return {static_cast<int>(e), paco_category()};
}

}  // namespace paco

template <>
struct std::is_error_code_enum<paco::errc> : std::true_type {};

namespace paco {

// An error code plus a human-readable message naming what was wrong (a field, a path, a peer).
struct error {
  std::error_code code;
  std::string message;

  error() = default;
  error(std::error_code c, std::string m = {}) : code(c), message(std::move(m)) {}
  error(errc c, std::string m = {}) : code(make_error_code(c)), message(std::move(m)) {}

  explicit operator bool() const noexcept { return static_cast<bool>(code); }
  // "message (category: code message)".
  std::string what() const {
    std::string s = message.empty() ? code.message() : message;
    if (!message.empty()) s += " (" + code.message() + ")";
    return s;
  }
};

// Thrown only at the boundary of tools and tests that choose exceptions (value_or_throw).
struct error_exception : std::runtime_error {
  paco::error err;
  explicit error_exception(paco::error e) : std::runtime_error(e.what()), err(std::move(e)) {}
};

// result<T>: a T or an error. Requires: value() only when ok().
template <class T>
class result {
 public:
  result(T v) : v_(std::move(v)) {}
  result(paco::error e) : v_(std::move(e)) {}
  result(errc c, std::string m) : v_(paco::error{c, std::move(m)}) {}

  bool ok() const noexcept { return v_.index() == 0; }
  explicit operator bool() const noexcept { return ok(); }
  T& value() & { return std::get<0>(v_); }
  const T& value() const& { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T&& operator*() && { return std::move(*this).value(); }
  const paco::error& error() const { return std::get<1>(v_); }
  T value_or_throw() && {
    if (!ok()) throw error_exception(std::get<1>(v_));
    return std::get<0>(std::move(v_));
  }

 private:
  std::variant<T, paco::error> v_;
};

// status: result<void>.
class status {
 public:
  status() = default;
  status(paco::error e) : e_(std::move(e)) {}
  status(errc c, std::string m) : e_(c, std::move(m)) {}
  bool ok() const noexcept { return !e_; }
  explicit operator bool() const noexcept { return ok(); }
  const paco::error& error() const { return e_; }
  void throw_if_error() const {
    if (e_) throw error_exception(e_);
  }

 private:
  paco::error e_;
};

}  // namespace paco

// PACO_ASSERT(cond, msg): a contract check in debug builds (NDEBUG removes it).
#ifdef NDEBUG
#define PACO_ASSERT(cond, msg) ((void)0)
#else
#define PACO_ASSERT(cond, msg)                                                              \
  ((cond) ? (void)0                                                                         \
          : throw std::logic_error(std::string("paco contract violated: ") + (msg) + " [" + \
                                   #cond + "] at " + __FILE__ + ":" + std::to_string(__LINE__)))
#endif
