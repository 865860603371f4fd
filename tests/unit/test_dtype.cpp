// Conversions between storage dtypes and fp64, and strided traversal of operands (the layout
// rules that gather/scatter and every BLAS decode depend on).
#include <cmath>
#include <vector>

#include <gtest/gtest.h>

#include "fumi/dtype.hpp"

namespace fumi {
namespace {

TEST(Dtype, TableRows) {
  EXPECT_STREQ(dtypeName(FUMI_DTYPE_BF16), "bf16");
  EXPECT_EQ(dtypeBytes(FUMI_DTYPE_F16), 2);
  EXPECT_EQ(dtypeInfo(FUMI_DTYPE_F32)->mantissa_bits, 23);
  EXPECT_DOUBLE_EQ(dtypeInfo(FUMI_DTYPE_F32)->tolerance, 1e-4);
  EXPECT_EQ(dtypeInfo(FUMI_DTYPE_UNKNOWN), nullptr);
}

TEST(Dtype, HalfConversions) {
  EXPECT_EQ(floatToHalf(1.0f), 0x3c00);
  EXPECT_EQ(floatToHalf(-2.0f), 0xc000);
  EXPECT_EQ(floatToHalf(65504.0f), 0x7bff);
  EXPECT_EQ(floatToHalf(65520.0f), 0x7c00);           // rounds up to Inf
  EXPECT_EQ(floatToHalf(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(floatToHalf(std::ldexp(1.0f, -26)), 0x0000);  // below half of it: zero
  // 1 + 2^-11 is halfway between 1 and 1 + 2^-10: ties to even (1.0).
  EXPECT_EQ(floatToHalf(1.0f + std::ldexp(1.0f, -11)), 0x3c00);
  EXPECT_EQ(floatToHalf(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
  EXPECT_TRUE(std::isnan(halfToFloat(floatToHalf(NAN))));
  for (uint32_t h = 0; h < 0x7c00; h += 7) EXPECT_EQ(floatToHalf(halfToFloat(h)), h);
}

TEST(Dtype, Bf16AndTf32Rounding) {
  EXPECT_EQ(floatToBf16(1.0f), 0x3f80);
  EXPECT_EQ(bf16ToFloat(0x3f80), 1.0f);
  EXPECT_EQ(floatToBf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);  // tie to even
  EXPECT_EQ(floatToBf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);
  float tf = 0;
  storeFromDouble(&tf, 0, 1.0 + std::ldexp(1.0, -12), FUMI_DTYPE_TF32);
  EXPECT_EQ(tf, 1.0f);  // below TF32's 10-bit resolution
  storeFromDouble(&tf, 0, 1.0 + std::ldexp(1.0, -10), FUMI_DTYPE_TF32);
  EXPECT_EQ(tf, 1.0f + std::ldexp(1.0f, -10));
}

fumi_tensor tensor2d(int64_t r, int64_t c, int64_t sr, int64_t sc) {
  fumi_tensor t{};
  t.ndim = 2;
  t.shape[0] = r;
  t.shape[1] = c;
  t.strides[0] = sr;
  t.strides[1] = sc;
  return t;
}

TEST(Layout, ColumnMajorWithLeadingDimension) {
  // A 2x3 op(A) stored column-major with lda 4: element (i,j) at i + 4j.
  const fumi_tensor t = tensor2d(2, 3, 1, 4);
  std::vector<int64_t> offsets;
  forEachElement(t, [&](int64_t k, int64_t off) {
    EXPECT_EQ(k, static_cast<int64_t>(offsets.size()));
    offsets.push_back(off);
  });
  EXPECT_EQ(offsets, (std::vector<int64_t>{0, 4, 8, 1, 5, 9}));
  EXPECT_EQ(tensorSpan(t), 10);
  EXPECT_EQ(tensorNumel(t), 6);
}

TEST(Layout, NegativeIncrementStartsAtTheHighEnd) {
  // BLAS x with n=3, incx=-2: x points at storage start, element 0 lives at offset 4.
  fumi_tensor t{};
  t.ndim = 1;
  t.shape[0] = 3;
  t.strides[0] = -2;
  std::vector<int64_t> offsets;
  forEachElement(t, [&](int64_t, int64_t off) { offsets.push_back(off); });
  EXPECT_EQ(offsets, (std::vector<int64_t>{4, 2, 0}));
  EXPECT_EQ(tensorSpan(t), 5);
}

TEST(Layout, ThreeDimensionsAndEmpty) {
  fumi_tensor t{};
  t.ndim = 3;
  t.shape[0] = 2;
  t.shape[1] = 2;
  t.shape[2] = 2;
  t.strides[0] = 100;
  t.strides[1] = 10;
  t.strides[2] = 1;
  std::vector<int64_t> offsets;
  forEachElement(t, [&](int64_t, int64_t off) { offsets.push_back(off); });
  EXPECT_EQ(offsets, (std::vector<int64_t>{0, 1, 10, 11, 100, 101, 110, 111}));
  t.shape[1] = 0;
  int visits = 0;
  forEachElement(t, [&](int64_t, int64_t) { ++visits; });
  EXPECT_EQ(visits, 0);
  EXPECT_EQ(tensorSpan(t), 0);
}

}  // namespace
}  // namespace fumi
