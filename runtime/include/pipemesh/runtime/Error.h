//===- Error.h - runtime errors ---------------------------------*- C++ -*-===//
//
// Every user-facing failure of pipemesh-run is an `Error` whose message is
// complete on its own ("plan format version 2, this runtime reads 1"); main()
// prints it and exits non-zero. Nothing is reported with assert or abort.
//
//===----------------------------------------------------------------------===//
#ifndef PIPEMESH_RUNTIME_ERROR_H
#define PIPEMESH_RUNTIME_ERROR_H

#include <cmath>
#include <sstream>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

namespace pipemesh::rt {

class Error : public std::runtime_error {
public:
  explicit Error(const std::string &message) : std::runtime_error(message) {}
};

/// An error every rank of the job reaches identically and before any
/// communication (a plan compiled for another world size): rank 0 alone
/// reports it and every rank exits without aborting the others.
class UniformError : public Error {
public:
  using Error::Error;
};

/// `v` with a NaN's sign bit cleared: streams and printf write a negative NaN
/// (x86's 0 * inf) as "-nan"; messages and log lines say "nan".
inline double unsignedNan(double v) { return std::isnan(v) ? std::fabs(v) : v; }

namespace detail {
/// A message's piece; floating values through unsignedNan.
template <typename T> void putPiece(std::ostringstream &os, T &&x) {
  if constexpr (std::is_floating_point_v<std::decay_t<T>>)
    os << unsignedNan(x);
  else
    os << std::forward<T>(x);
}
} // namespace detail

/// Concatenates its arguments with operator<< into one message.
template <typename... Args> std::string concat(Args &&...args) {
  std::ostringstream os;
  (detail::putPiece(os, std::forward<Args>(args)), ...);
  return os.str();
}

/// Throws an Error built from the arguments.
template <typename... Args> [[noreturn]] void fail(Args &&...args) {
  throw Error(concat(std::forward<Args>(args)...));
}

} // namespace pipemesh::rt

#endif // PIPEMESH_RUNTIME_ERROR_H
