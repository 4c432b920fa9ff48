//===- Checksum.cpp - XXH3-64 ---------------------------------------------===//
#include "pipemesh/runtime/Checksum.h"
#include "pipemesh/runtime/Error.h"

#include <cstdio>

// The implementation inlined from the header: no libxxhash.so to ship with
// pipemesh-run (bench/gpu_bundle.sh), the same function as the library's.
#define XXH_INLINE_ALL
#include <xxhash.h>

namespace pipemesh::rt {

uint64_t checksum64(const void *data, size_t n) { return XXH3_64bits(data, n); }

Checksum64::Checksum64() : state(XXH3_createState()) {
  if (!state)
    fail("out of memory for a checksum state");
  XXH3_64bits_reset(static_cast<XXH3_state_t *>(state));
}

Checksum64::~Checksum64() { XXH3_freeState(static_cast<XXH3_state_t *>(state)); }

void Checksum64::update(const void *data, size_t n) {
  XXH3_64bits_update(static_cast<XXH3_state_t *>(state), data, n);
}

uint64_t Checksum64::digest() const {
  return XXH3_64bits_digest(static_cast<const XXH3_state_t *>(state));
}

std::string hex64(uint64_t v) {
  char buf[19];
  std::snprintf(buf, sizeof buf, "0x%016llx", (unsigned long long)v);
  return buf;
}

bool parseHex64(const std::string &s, uint64_t &v) {
  size_t i = s.rfind("0x", 0) == 0 ? 2 : 0;
  if (i == s.size() || s.size() - i > 16)
    return false;
  v = 0;
  for (; i < s.size(); ++i) {
    char c = s[i];
    int d = c >= '0' && c <= '9'   ? c - '0'
            : c >= 'a' && c <= 'f' ? c - 'a' + 10
            : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                   : -1;
    if (d < 0)
      return false;
    v = v << 4 | (uint64_t)d;
  }
  return true;
}

} // namespace pipemesh::rt
