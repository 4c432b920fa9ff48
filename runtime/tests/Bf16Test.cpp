//===- Bf16Test.cpp - f32 <-> bf16 storage conversions ---------------------===//
//
// Expected values are written out bit by bit from the IEEE layouts (bf16 is
// the upper 16 bits of an f32), independent of the conversion under test.
//
//===----------------------------------------------------------------------===//
#include "pipemesh/runtime/Bf16.h"
#include "pipemesh/runtime/CpuKernels.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

using namespace pipemesh::rt;

namespace {

float fromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

TEST(Bf16, ExactValuesRoundTrip) {
  for (float f : {0.0f, -0.0f, 1.0f, -2.5f, 0.15625f, 65536.0f})
    EXPECT_EQ(bf16ToFloat(floatToBf16(f)), f);
  EXPECT_EQ(floatToBf16(1.0f), 0x3f80);
  EXPECT_EQ(floatToBf16(-2.0f), 0xc000);
}

TEST(Bf16, RoundsToNearestTiesToEven) {
  // 1 + 2^-8 lies halfway between 1 (even mantissa) and 1 + 2^-7: down.
  EXPECT_EQ(floatToBf16(fromBits(0x3f808000)), 0x3f80);
  // 1 + 3 * 2^-8 lies halfway between 1 + 2^-7 (odd) and 1 + 2^-6: up.
  EXPECT_EQ(floatToBf16(fromBits(0x3f818000)), 0x3f82);
  // Just above and below the halfway point.
  EXPECT_EQ(floatToBf16(fromBits(0x3f808001)), 0x3f81);
  EXPECT_EQ(floatToBf16(fromBits(0x3f817fff)), 0x3f81);
  // Negative numbers round by magnitude.
  EXPECT_EQ(floatToBf16(fromBits(0xbf808001)), 0xbf81);
}

TEST(Bf16, OverflowInfinityAndNaN) {
  // The largest finite f32 rounds up past bf16's largest finite value.
  EXPECT_EQ(floatToBf16(std::numeric_limits<float>::max()), 0x7f80);
  EXPECT_EQ(floatToBf16(std::numeric_limits<float>::infinity()), 0x7f80);
  EXPECT_EQ(floatToBf16(-std::numeric_limits<float>::infinity()), 0xff80);
  // A NaN whose payload sits in the low bits only must not become infinity.
  EXPECT_TRUE(std::isnan(bf16ToFloat(floatToBf16(fromBits(0x7f800001)))));
  EXPECT_TRUE(std::isnan(bf16ToFloat(floatToBf16(std::nanf("")))));
}

TEST(Bf16, UnalignedBulkRoundingMatchesTheScalarOne) {
  // Floats at every byte offset from an aligned start, past the threads' grain.
  const int64_t n = (1 << 20) + 37;
  std::vector<float> values(n);
  for (int64_t i = 0; i < n; ++i)
    values[i] = fromBits((uint32_t)(i * 2654435761u)); // every exponent, NaNs among them
  std::vector<uint8_t> bytes(4 * n + 3);
  for (int offset = 0; offset < 4; ++offset) {
    std::memcpy(bytes.data() + offset, values.data(), 4 * n);
    std::vector<uint16_t> got(n);
    cpu::roundBf16Unaligned(bytes.data() + offset, got.data(), n);
    for (int64_t i = 0; i < n; ++i)
      ASSERT_EQ(got[i], floatToBf16(values[i])) << "offset " << offset << " element " << i;
  }
}

TEST(Bf16, BulkConversions) {
  float src[5] = {1.0f, fromBits(0x3f808001), -3.0f, 0.0f, 1e-3f};
  uint16_t h[5];
  float back[5];
  cpu::roundBf16Buffer(src, h, 5);
  cpu::widenBf16Buffer(h, back, 5);
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(h[i], floatToBf16(src[i]));
    EXPECT_LE(std::fabs(back[i] - src[i]), std::fabs(src[i]) * (1.0f / 256));
  }
}

} // namespace
