//===- HalfTest.cpp - f32 -> f16 rounding for --export-onnx ----------------===//
//
// Expected values come from the IEEE binary16 layout, decoded here with ldexp
// independently of the header: every finite half survives the round trip,
// every midpoint between neighbours rounds to the even one, overflow and
// subnormals land where IEEE puts them.
//
//===----------------------------------------------------------------------===//
#include "pipemesh/runtime/Half.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

using namespace pipemesh::rt;

namespace {

/// The value of half bit pattern `h` (finite ones only).
double decode(uint16_t h) {
  int e = (h >> 10) & 0x1f, m = h & 0x3ff;
  double v = e == 0 ? std::ldexp((double)m, -24) : std::ldexp(1024.0 + m, e - 25);
  return (h & 0x8000) ? -v : v;
}

TEST(Half, EveryFiniteHalfRoundTrips) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    if (((h >> 10) & 0x1f) == 0x1f)
      continue; // infinities and NaNs
    ASSERT_EQ(floatToHalf((float)decode((uint16_t)h)), h) << std::hex << h;
    ASSERT_EQ((double)halfToFloat((uint16_t)h), decode((uint16_t)h)) << std::hex << h;
  }
}

TEST(Half, MidpointsRoundToEven) {
  // Between each positive finite half and the next: the midpoint is exact in
  // f32 and goes to the neighbour whose mantissa is even; a hair either side
  // goes to the nearer one.
  for (uint32_t h = 0; h < 0x7bff; ++h) {
    double lo = decode((uint16_t)h), hi = decode((uint16_t)(h + 1)), mid = (lo + hi) / 2;
    uint16_t even = (h & 1) ? (uint16_t)(h + 1) : (uint16_t)h;
    ASSERT_EQ(floatToHalf((float)mid), even) << std::hex << h;
    ASSERT_EQ(floatToHalf(std::nextafter((float)mid, 0.0f)), h) << std::hex << h;
    ASSERT_EQ(floatToHalf(std::nextafter((float)mid, 1e9f)), h + 1) << std::hex << h;
    ASSERT_EQ(floatToHalf(-(float)mid), 0x8000 | even) << std::hex << h;
  }
}

TEST(Half, OverflowInfinityNaNAndUnderflow) {
  EXPECT_EQ(floatToHalf(65504.0f), 0x7bff);         // the largest half
  EXPECT_EQ(floatToHalf(65519.99f), 0x7bff);        // below the midpoint to 65536
  EXPECT_EQ(floatToHalf(65520.0f), 0x7c00);         // the midpoint: to infinity (even)
  EXPECT_EQ(floatToHalf(1e10f), 0x7c00);
  EXPECT_EQ(floatToHalf(-1e10f), 0xfc00);
  EXPECT_EQ(floatToHalf(std::numeric_limits<float>::infinity()), 0x7c00);
  uint16_t nan = floatToHalf(std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(nan & 0x7c00, 0x7c00);
  EXPECT_NE(nan & 0x3ff, 0);
  EXPECT_TRUE(std::isnan(halfToFloat(nan)));
  EXPECT_EQ(floatToHalf(std::ldexp(1.0f, -25)), 0x0000);       // half the smallest: to 0 (even)
  EXPECT_EQ(floatToHalf(std::ldexp(1.5f, -25)), 0x0001);       // nearer the smallest
  EXPECT_EQ(floatToHalf(std::ldexp(1.0f, -30)), 0x0000);
  EXPECT_EQ(floatToHalf(-0.0f), 0x8000);
}

} // namespace
