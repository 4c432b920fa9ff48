//===- Checksum.h - FNV-1a 64 -----------------------------------*- C++ -*-===//
//
// The plan container and the checkpoint manifests checksum their bytes with
// 64-bit FNV-1a (offset basis 0xcbf29ce484222325, prime 0x100000001b3), a
// function every language writes in three lines.
//
//===----------------------------------------------------------------------===//
#ifndef PIPEMESH_RUNTIME_CHECKSUM_H
#define PIPEMESH_RUNTIME_CHECKSUM_H

#include <cstddef>
#include <cstdint>
#include <string>

namespace pipemesh::rt {

constexpr uint64_t kFnv1aBasis = 0xcbf29ce484222325ull;

/// Continues an FNV-1a 64 hash `h` over `n` bytes (start with kFnv1aBasis).
uint64_t fnv1a64(const void *data, size_t n, uint64_t h = kFnv1aBasis);

/// "0x" followed by 16 lower-case hex digits.
std::string hex64(uint64_t v);
/// Parses hex64's format (the 0x is optional); false when it is not one.
bool parseHex64(const std::string &s, uint64_t &v);

} // namespace pipemesh::rt

#endif // PIPEMESH_RUNTIME_CHECKSUM_H
