//===- Checksum.cpp - FNV-1a 64 ------------------------------------------===//
#include "pipemesh/runtime/Checksum.h"

#include <cstdio>

namespace pipemesh::rt {

uint64_t fnv1a64(const void *data, size_t n, uint64_t h) {
  const uint8_t *p = static_cast<const uint8_t *>(data);
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 0x100000001b3ull;
  }
  return h;
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
