//===- Bf16.h - bfloat16 storage on the host ---------------------*- C++ -*-===//
//
// bf16 is the upper half of an IEEE f32. Rounding f32 -> bf16 is to nearest,
// ties to even (what PyTorch's .to(torch.bfloat16) and CUDA's
// __float2bfloat16 do); NaNs stay NaNs. Widening is exact. Whole buffers:
// cpu::widenBf16Buffer / roundBf16Buffer (CpuKernels.h).
//
//===----------------------------------------------------------------------===//
#ifndef PIPEMESH_RUNTIME_BF16_H
#define PIPEMESH_RUNTIME_BF16_H

#include <cstdint>
#include <cstring>

namespace pipemesh::rt {

inline uint16_t floatToBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu))
    return (uint16_t)((u >> 16) | 0x40); // quiet NaN, whatever its payload
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

inline float bf16ToFloat(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

} // namespace pipemesh::rt

#endif // PIPEMESH_RUNTIME_BF16_H
