//===- Half.h - IEEE float16 on the host -------------------------*- C++ -*-===//
//
// For writing float16 initializers back (--export-onnx of a model exported in
// half precision). Rounding f32 -> f16 is to nearest, ties to even, as numpy's
// and PyTorch's casts do: values from 65520 up become infinity, those below
// 2^-14 become subnormals; NaNs stay NaNs. Widening is exact.
//
//===----------------------------------------------------------------------===//
#ifndef PIPEMESH_RUNTIME_HALF_H
#define PIPEMESH_RUNTIME_HALF_H

#include <cmath>
#include <cstdint>
#include <cstring>

namespace pipemesh::rt {

inline uint16_t floatToHalf(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
  uint32_t bits = x & 0x7fffffffu;
  if (bits >= 0x7f800000u) // infinity, or a NaN (kept quiet)
    return sign | 0x7c00u | (bits > 0x7f800000u ? 0x200u : 0u);
  if (bits >= 0x477ff000u) // 65520 and up: past the largest half, 65504
    return sign | 0x7c00u;
  if (bits < 0x38800000u) { // below 2^-14: a multiple of 2^-24, rounded
    float magnitude;
    std::memcpy(&magnitude, &bits, 4);
    // Exact scaling; nearbyint rounds ties to even. 1024 is the smallest normal.
    return sign | (uint16_t)std::nearbyint(magnitude * 16777216.0f);
  }
  uint32_t half = ((bits >> 23) - 127 + 15) << 10 | ((bits >> 13) & 0x3ffu);
  uint32_t rest = bits & 0x1fffu; // the 13 mantissa bits dropped
  if (rest > 0x1000u || (rest == 0x1000u && (half & 1u)))
    ++half; // a carry into the exponent is the next binade, as it should be
  return sign | (uint16_t)half;
}

inline float halfToFloat(uint16_t h) {
  int exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ff;
  float magnitude = exponent == 0    ? std::ldexp((float)mantissa, -24)
                    : exponent == 31 ? (mantissa ? NAN : INFINITY)
                                     : std::ldexp((float)(1024 + mantissa), exponent - 25);
  return (h & 0x8000) ? -magnitude : magnitude;
}

} // namespace pipemesh::rt

#endif // PIPEMESH_RUNTIME_HALF_H
