//===- Checksum.h - XXH3-64 of plans and checkpoints ------------*- C++ -*-===//
//
// The plan container and the checkpoint manifests checksum their bytes with
// XXH3-64 (seed 0) from libxxhash: at tens of GB/s it costs little beside
// reading the bytes, where a byte-at-a-time hash made a checksum of a
// multi-gigabyte plan or checkpoint take seconds. Python reaches the same
// function through libxxhash.so (runtime/tools/make_test_plan.py).
//
//===----------------------------------------------------------------------===//
#ifndef PIPEMESH_RUNTIME_CHECKSUM_H
#define PIPEMESH_RUNTIME_CHECKSUM_H

#include <cstddef>
#include <cstdint>
#include <string>

namespace pipemesh::rt {

/// XXH3-64 of `n` bytes.
uint64_t checksum64(const void *data, size_t n);

/// XXH3-64 of bytes given in pieces (equal to checksum64 of their concatenation).
class Checksum64 {
public:
  Checksum64();
  ~Checksum64();
  Checksum64(const Checksum64 &) = delete;
  Checksum64 &operator=(const Checksum64 &) = delete;
  void update(const void *data, size_t n);
  uint64_t digest() const;

private:
  void *state; // XXH3_state_t, kept out of this header
};

/// "0x" followed by 16 lower-case hex digits.
std::string hex64(uint64_t v);
/// Parses hex64's format (the 0x is optional); false when it is not one.
bool parseHex64(const std::string &s, uint64_t &v);

} // namespace pipemesh::rt

#endif // PIPEMESH_RUNTIME_CHECKSUM_H
