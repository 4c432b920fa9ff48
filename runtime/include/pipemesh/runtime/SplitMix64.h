//===- SplitMix64.h - the runtime's PRNG --------------------------*- C++ -*-===//
//
// splitmix64 (Steele, Lea, Flood 2014), chosen because a Python reference is
// five lines:
//     state = (state + 0x9E3779B97F4A7C15) mod 2^64
//     z = state
//     z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) mod 2^64
//     z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) mod 2^64
//     return z ^ (z >> 31)
//
//===----------------------------------------------------------------------===//
#ifndef PIPEMESH_RUNTIME_SPLITMIX64_H
#define PIPEMESH_RUNTIME_SPLITMIX64_H

#include <cstdint>

namespace pipemesh::rt {

struct SplitMix64 {
  uint64_t state;
  explicit SplitMix64(uint64_t seed) : state(seed) {}
  uint64_t next() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
};

} // namespace pipemesh::rt

#endif // PIPEMESH_RUNTIME_SPLITMIX64_H
