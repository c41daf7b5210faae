// Errors as values. Every fallible call returns Result<T>; the message names the op, the
// argument, what was expected and what was given.
#pragma once
#include <string>
#include <utility>
#include <variant>

namespace baracuda {

enum class Status {
  Ok,
  InvalidProblem,     // the descriptor or arguments describe no valid computation
  Unsupported,        // valid, but no implementation accepts it (dtype, layout, arch, preference)
  MisalignedOperand,  // a pointer or stride the chosen kernel cannot handle
  BufferTooSmall,     // a tensor's footprint exceeds what was described
  WorkspaceTooSmall,
  BackendError,       // a vendor library refused (its own message is carried)
  CudaError,
  NoDevice,
};

const char* to_string(Status s);

struct Error {
  Status code = Status::InvalidProblem;
  std::string message;
};

template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Error e) : v_(std::move(e)) {}      // NOLINT
  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }
  T& value() & { return std::get<0>(v_); }
  const T& value() const& { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  T* operator->() { return &std::get<0>(v_); }
  const T* operator->() const { return &std::get<0>(v_); }
  T& operator*() & { return value(); }
  const Error& error() const { return std::get<1>(v_); }
  Status status() const { return ok() ? Status::Ok : error().code; }
  const std::string& message() const {
    static const std::string empty;
    return ok() ? empty : error().message;
  }

 private:
  std::variant<T, Error> v_;
};

template <>
class [[nodiscard]] Result<void> {
 public:
  Result() = default;
  Result(Error e) : err_(std::move(e)), ok_(false) {}  // NOLINT
  bool ok() const { return ok_; }
  explicit operator bool() const { return ok_; }
  const Error& error() const { return err_; }
  Status status() const { return ok_ ? Status::Ok : err_.code; }
  const std::string& message() const { return err_.message; }

 private:
  Error err_{Status::Ok, {}};
  bool ok_ = true;
};

inline Error make_error(Status s, std::string msg) { return Error{s, std::move(msg)}; }

}  // namespace baracuda

/// Propagates an error from an expression returning Result<...>.
#define BARACUDA_TRY(expr)                              \
  do {                                                  \
    auto baracuda_try_r_ = (expr);                      \
    if (!baracuda_try_r_.ok()) return baracuda_try_r_.error(); \
  } while (0)
