// test_device_kernels.cpp — the bodies of fumi's CUDA kernels (interposer/cuda/device_kernels.h,
// the source nvcc compiles) run over their launch grids on the host, against the host's own
// contraction and scan (contract.h, elementwise.h): every layout a check meets, every dtype
// the kernels read, contractions along every dimension with one group of vectors and with
// several, NaN/Inf, sizes 0 and 1.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <functional>
#include <numeric>
#include <random>
#include <limits>
#include <vector>

#include "contract.h"
#include "cuda/device_compare.h"
#include "cuda/device_kernels.h"
#include "elementwise.h"
#include "fumi/dtype.hpp"
#include "metrics.h"
#include "reference.h"
#include "tensor_copy.h"
#include "test_layouts.h"

namespace fumi {
namespace {

namespace kn = cuda::kern;

constexpr fumi_dtype kKernelDtypes[] = {FUMI_DTYPE_F64, FUMI_DTYPE_F32, FUMI_DTYPE_F16,
                                        FUMI_DTYPE_BF16};

bool hasNegativeStride(const fumi_tensor& t) {
  for (int32_t i = 0; i < t.ndim; ++i)
    if (t.strides[i] < 0) return true;
  return false;
}

// deviceContract's launches (device_launch.cpp), the grid run on the host.
bool contractOnGrid(const fumi_tensor& t, const void* data, fumi_dtype dtype, int32_t dim,
                    int32_t count, const double* vectors, double* out) {
  kn::ContractParams p;
  if (!kn::planContract(t.ndim, t.shape, t.strides, dim, p)) return false;
  std::vector<double> partial(
      static_cast<size_t>(p.chunks * p.lanes * p.outputs * kn::kMaxVectors));
  p.data = data;
  p.dtype = dtype;
  p.total = count;
  p.partial = partial.data();
  p.out = out;
  return kn::launchContraction(p, vectors, [](bool first, unsigned gx, unsigned gy,
                                               const kn::ContractParams& q) {
    if (first)
      kn::runGridOnHost(gx, gy, [&](int64_t i, int64_t y) { kn::contractPartialBody(q, i, y); });
    else
      kn::runGridOnHost(gx, gy, [&](int64_t i, int64_t) { kn::contractReduceBody(q, i); });
    return true;
  });
}

// Reductions' launches (device_launch.cpp, reduceOnDevice) on the host, `count` passes one
// after the other: their fields.
std::vector<double> reduceOnGrid(const fumi_tensor& t, kn::ReduceParams* passes, int count) {
  std::vector<double> partial(static_cast<size_t>(kn::kReduceThreads * kn::kFields)),
      results(static_cast<size_t>(kn::kReduceThreads / kn::kFanIn * kn::kFields)),
      fields(static_cast<size_t>(count * kn::kFields));
  EXPECT_TRUE(kn::launchReductions(
      t.ndim, t.shape, t.strides, tensorNumel(t), passes, count, partial.data(), results.data(),
      fields.data(), [](int stage, unsigned gx, unsigned gy, const kn::ReduceParams& q) {
        kn::runGridOnHost(gx, gy, [&](int64_t i, int64_t) {
          if (stage == 0) kn::reducePartialBody(q, i);
          else kn::reduceCombineBody(q, i);
        });
        return true;
      }));
  return fields;
}
std::vector<double> reduceOnGrid(const fumi_tensor& t, kn::ReduceParams& p) {
  return reduceOnGrid(t, &p, 1);
}

// deviceScan on the host.
fumi_scan scanOnGrid(const fumi_tensor& t, const void* data, fumi_dtype dtype) {
  kn::ReduceParams p;
  p.op = kn::kScan;
  p.a = data;
  p.a_dtype = dtype;
  p.max_mask = kn::kScanMax;
  const std::vector<double> f = reduceOnGrid(t, p);
  fumi_scan s{};
  s.nan = static_cast<uint64_t>(f[0]);
  s.inf = static_cast<uint64_t>(f[1]);
  s.max_abs = f[2];
  s.norm = std::sqrt(f[3]);
  return s;
}

TEST(DeviceKernels, HalfAndBfloatLoadsMatchTheHostsConversions) {
  for (uint32_t bits = 0; bits < 0x10000; ++bits) {
    const auto h = static_cast<uint16_t>(bits);
    const double f16 = loadAsDouble(&h, 0, FUMI_DTYPE_F16);
    const double bf16 = loadAsDouble(&h, 0, FUMI_DTYPE_BF16);
    const double k16 = kn::load(&h, kn::kF16, 0), kb16 = kn::load(&h, kn::kBF16, 0);
    EXPECT_TRUE(f16 == k16 || (f16 != f16 && k16 != k16)) << std::hex << bits;
    EXPECT_TRUE(bf16 == kb16 || (bf16 != bf16 && kb16 != kb16)) << std::hex << bits;
  }
}

TEST(DeviceKernels, ContractionsEqualTheHostsOnEveryLayoutAndDtype) {
  int checked = 0;
  for (const fumi_tensor& layout : layouts()) {
    for (fumi_dtype dtype : kKernelDtypes) {
      fumi_tensor t = layout;
      t.dtype = dtype;
      const std::vector<unsigned char> buf =
          randomBuffer(t, dtype, 7u + static_cast<uint32_t>(checked));
      // Element 0 at data (the kernels' views have no negative strides: the launcher declines).
      const void* data = buf.data() + tensorBase(t) * dtypeBytes(dtype);
      for (int32_t dim = 0; dim < t.ndim; ++dim) {
        kn::ContractParams plan;
        if (hasNegativeStride(t)) {
          EXPECT_FALSE(kn::planContract(t.ndim, t.shape, t.strides, dim, plan));
          continue;
        }
        for (int32_t count : {3, 11}) {  // one group of vectors; two (8 + 3)
          const int64_t len = t.shape[dim];
          std::vector<double> v(static_cast<size_t>(count * len));
          for (size_t i = 0; i < v.size(); ++i) v[i] = std::sin(1.0 + static_cast<double>(i));
          const size_t outs =
              static_cast<size_t>(tensorNumel(t) / std::max<int64_t>(len, 1) * count);
          std::vector<double> want(outs, -1.0), got(outs, -2.0);
          ASSERT_TRUE(
              contractTensor(t, data, dtype, dim, count, v.data(), 1.0, false, want.data()));
          ASSERT_TRUE(contractOnGrid(t, data, dtype, dim, count, v.data(), got.data()));
          for (size_t i = 0; i < outs; ++i)
            EXPECT_NEAR(got[i], want[i], 1e-12 * (1 + std::fabs(want[i])))
                << "layout " << t.ndim << "-d dim " << dim << " dtype " << dtype << " i " << i;
          ++checked;
        }
      }
    }
  }
  EXPECT_GT(checked, 100);
}

TEST(DeviceKernels, LongContractionsSplitIntoChunksAddUp) {
  // A matrix with few outputs and a long contracted axis: many chunks of the axis.
  const fumi_tensor t = makeTensor({3, 100000}, {1, 3});
  kn::ContractParams plan;
  ASSERT_TRUE(kn::planContract(t.ndim, t.shape, t.strides, 1, plan));
  EXPECT_GT(plan.chunks, 1000);
  std::vector<float> x(300000);
  for (size_t i = 0; i < x.size(); ++i)
    x[i] = static_cast<float>(std::cos(0.1 * static_cast<double>(i)));
  std::vector<double> v(100000, 0.5), want(3), got(3);
  fumi_tensor ft = t;
  ft.dtype = FUMI_DTYPE_F32;
  ASSERT_TRUE(
      contractTensor(ft, x.data(), FUMI_DTYPE_F32, 1, 1, v.data(), 1.0, false, want.data()));
  ASSERT_TRUE(contractOnGrid(ft, x.data(), FUMI_DTYPE_F32, 1, 1, v.data(), got.data()));
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(got[i], want[i], 1e-9 * (1 + std::fabs(want[i])));
  // The same elements as three columns of unit stride (a column-major matrix's row side): a
  // warp's lanes per output, reading consecutive elements, in chunks.
  fumi_tensor cols = makeTensor({100000, 3}, {1, 100000});
  cols.dtype = FUMI_DTYPE_F32;
  ASSERT_TRUE(kn::planContract(cols.ndim, cols.shape, cols.strides, 0, plan));
  EXPECT_EQ(plan.lanes, kn::kLanes);
  EXPECT_GT(plan.chunks, 10);
  ASSERT_TRUE(
      contractTensor(cols, x.data(), FUMI_DTYPE_F32, 0, 1, v.data(), 1.0, false, want.data()));
  ASSERT_TRUE(contractOnGrid(cols, x.data(), FUMI_DTYPE_F32, 0, 1, v.data(), got.data()));
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(got[i], want[i], 1e-9 * (1 + std::fabs(want[i])));
  // A strided contracted axis whose outputs are adjacent (the first case) keeps one lane.
  ASSERT_TRUE(kn::planContract(t.ndim, t.shape, t.strides, 1, plan));
  EXPECT_EQ(plan.lanes, 1);
}

// deviceConvolve's launches (device_launch.cpp) on the host.
std::vector<double> convolveOnGrid(int32_t direction, const fumi_tensor& dev,
                                   const fumi_tensor& host, const fumi_tensor& out,
                                   const ConvSpec& s) {
  kn::ConvParams p;
  p.direction = direction;
  EXPECT_TRUE(kn::planConv(s.spatial, dev.shape, dev.strides, host.shape, out.shape, s.stride,
                           s.pad, s.dilation, p));
  std::vector<double> partial(static_cast<size_t>(p.chunks * p.outputs)),
      got(static_cast<size_t>(p.outputs));
  p.dev = dev.data;
  p.dev_dtype = dev.dtype;
  p.host = static_cast<const double*>(host.data);
  p.partial = partial.data();
  p.out = got.data();
  kn::launchConv(p, [](bool first, unsigned gx, unsigned gy, const kn::ConvParams& q) {
    kn::runGridOnHost(gx, gy, [&](int64_t i, int64_t y) {
      if (first) kn::convPartialBody(q, i, y);
      else kn::convReduceBody(q, i);
    });
    return true;
  });
  return got;
}

TEST(DeviceKernels, ConvolutionsEqualTheHostsReferenceInEveryDirection) {
  // The three directions of a groups-1 cross-correlation against fumi's host reference
  // (reference.h, convReference: compensated sums), 1 to 3 spatial dimensions, strides,
  // padding, dilation, every dtype the kernels read, the device operand dense, channels-last
  // or with gaps; backward filter with enough images to be split into chunks.
  using Dir = ConvSpec::Direction;
  int checked = 0;
  const int64_t n = 2, c = 3, q = 2;
  for (int spatial = 1; spatial <= 3; ++spatial)
    for (const auto& [stride, pad, dil] : {std::array<int, 3>{1, 0, 1}, {2, 1, 1}, {1, 2, 2},
                                           {3, 1, 2}})
      for (int dir = 0; dir < 3; ++dir)
        for (fumi_dtype dtype : kKernelDtypes)
          for (int layout = 0; layout < 3; ++layout) {
            ConvSpec s;
            s.spatial = spatial;
            s.flip = false;
            s.direction = static_cast<Dir>(dir);
            std::vector<int64_t> in{n, c}, filter{q, c}, out{n, q};
            const int64_t in_sizes[3] = {7, 6, 5}, f_sizes[3] = {3, 2, 2};
            for (int d = 0; d < spatial; ++d) {
              s.stride[d] = stride;
              s.pad[d] = pad;
              s.dilation[d] = dil;
              in.push_back(in_sizes[d]);
              filter.push_back(f_sizes[d]);
              out.push_back((in_sizes[d] + 2 * pad - dil * (f_sizes[d] - 1) - 1) / stride + 1);
            }
            // The operands in the roles of x (N, C, in), w (Q, C, f) and y (N, Q, out); the
            // device one is x (forward, backward filter) or y (backward data).
            const int device = dir == 1 ? 2 : 0, output = dir == 0 ? 2 : dir == 1 ? 0 : 1;
            std::vector<fumi_tensor> ts;
            std::vector<std::vector<unsigned char>> bufs;
            std::vector<std::vector<double>> dense;
            for (int i = 0; i < 3; ++i) {
              const std::vector<int64_t>& shape = i == 0 ? in : i == 1 ? filter : out;
              dense.emplace_back(static_cast<size_t>(
                  std::accumulate(shape.begin(), shape.end(), int64_t{1}, std::multiplies<>())));
              fumi_tensor t = hostTensor("t", shape, dense.back().data());
              if (i == device) {
                if (layout == 1) {  // channels-last
                  int64_t step = shape[1];
                  t.strides[1] = 1;
                  for (int d = static_cast<int>(shape.size()) - 1; d >= 2; --d) {
                    t.strides[d] = step;
                    step *= shape[static_cast<size_t>(d)];
                  }
                  t.strides[0] = step;
                } else if (layout == 2) {  // gaps after every dimension
                  int64_t step = 1;
                  for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
                    t.strides[d] = step;
                    step = step * shape[static_cast<size_t>(d)] + 1;
                  }
                }
                t.dtype = dtype;
                bufs.push_back(randomBuffer(t, dtype, 11u + static_cast<uint32_t>(checked)));
                t.data = bufs.back().data();
              } else if (i != output) {
                std::mt19937 gen(5u + static_cast<uint32_t>(checked));
                std::uniform_real_distribution<double> u(-2.0, 2.0);
                for (double& v : dense.back()) v = u(gen);
              }
              ts.push_back(t);
            }
            s.x = 0;
            s.w = 1;
            s.y = 2;
            const int host = dir == 2 ? 2 : 1;
            std::vector<double> want(dense[static_cast<size_t>(output)].size());
            ASSERT_EQ(convReference(ts, s, output, want.data()), FUMI_OK);
            const std::vector<double> got = convolveOnGrid(
                dir, ts[static_cast<size_t>(device)], ts[static_cast<size_t>(host)],
                ts[static_cast<size_t>(output)], s);
            ASSERT_EQ(got.size(), want.size());
            double scale = 0;
            for (double w : want) scale = std::max(scale, std::fabs(w));
            for (size_t i = 0; i < got.size(); ++i)
              ASSERT_NEAR(got[i], want[i], 1e-13 * (1 + scale))
                  << "spatial " << spatial << " dir " << dir << " dtype " << dtype << " layout "
                  << layout << " stride " << stride << " pad " << pad << " dil " << dil;
            ++checked;
          }
  EXPECT_EQ(checked, 3 * 4 * 3 * 4 * 3);
  // Backward filter over many images: split into chunks, added in order.
  kn::ConvParams p;
  p.direction = 2;
  const int64_t dev_shape[3] = {4096, 2, 3}, dev_strides[3] = {6, 3, 1}, host_shape[3] = {4096, 1, 3},
                out_shape[3] = {1, 2, 1};
  const int32_t one[1] = {1}, zero[1] = {0};
  ASSERT_TRUE(kn::planConv(1, dev_shape, dev_strides, host_shape, out_shape, one, zero, one, p));
  EXPECT_GT(p.chunks, 1);
  EXPECT_FALSE(kn::planConv(1, dev_shape, dev_strides, out_shape, out_shape, one, zero, one, p));
}

TEST(DeviceKernels, ScansEqualTheHostsWithNanInfAndEmptyTensors) {
  std::vector<fumi_tensor> cases = layouts();
  cases.push_back(makeTensor({0, 5}, {5, 1}));
  cases.push_back(makeTensor({1}, {1}));
  cases.push_back(makeTensor({300, 700}, {1, 300}));  // more elements than the grid's threads
  cases.push_back(makeTensor({1100, 1000}, {1000, 1}));  // four combining launches
  int checked = 0;
  for (const fumi_tensor& layout : cases) {
    if (hasNegativeStride(layout)) continue;
    for (fumi_dtype dtype : kKernelDtypes) {
      fumi_tensor t = layout;
      t.dtype = dtype;
      for (int plant = 0; plant < 2; ++plant) {
        std::vector<unsigned char> buf =
            randomBuffer(t, dtype, 11u + static_cast<uint32_t>(checked));
        const int64_t n = tensorNumel(t);
        if (plant && n > 2) {  // a NaN, an Inf and a -Inf among the logical elements
          const double bad[] = {std::nan(""), std::numeric_limits<double>::infinity(),
                                -std::numeric_limits<double>::infinity()};
          for (int b = 0; b < 3; ++b) {
            int64_t off = 0, e = (n / 3) * b;
            for (int32_t d = t.ndim - 1; d >= 0; --d) {
              off += (e % t.shape[d]) * t.strides[d];
              e /= t.shape[d];
            }
            storeFromDouble(buf.data(), off, bad[b], dtype);
          }
        }
        fumi_scan want{};
        want.struct_size = sizeof want;
        ASSERT_EQ(scanTensor(t, buf.data(), dtype, &want), FUMI_OK);
        const fumi_scan got = scanOnGrid(t, buf.data(), dtype);
        SCOPED_TRACE(testing::Message() << "case " << checked << " ndim " << t.ndim << " n " << n
                                        << " dtype " << dtype << " plant " << plant);
        EXPECT_EQ(got.nan, want.nan);
        EXPECT_EQ(got.inf, want.inf);
        EXPECT_EQ(got.max_abs, want.max_abs);
        EXPECT_NEAR(got.norm, want.norm, 1e-12 * want.norm);
        if (plant && n > 2) {  // more where the layout reads an element twice
          EXPECT_GE(got.nan + got.inf, 3u);
        }
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 50);
}

// Inputs converted for a wider rerun (highprec: COPY), magnitudes (ABS) and perturbed inputs
// (perturb: PERTURB, the host's draws numbered in storage order), into every dtype from every
// dtype, every layout, NaN, -0, Inf, subnormal and rounding cases among the values: the host's
// mapTensor, bit for bit, and the same `changed` counts.
TEST(DeviceKernels, MapsEqualTheHostsBitForBit) {
  int checked = 0;
  for (const fumi_tensor& layout : layouts()) {
    if (hasNegativeStride(layout)) continue;
    for (fumi_dtype src : kKernelDtypes)
      for (fumi_dtype dst : kKernelDtypes)
        for (fumi_map_kind kind : {FUMI_MAP_COPY, FUMI_MAP_ABS, FUMI_MAP_PERTURB}) {
          fumi_tensor t = layout;
          t.dtype = src;
          std::vector<unsigned char> in =
              randomBuffer(t, src, 5u + static_cast<uint32_t>(checked));
          const int64_t span = tensorSpan(t) + 1;
          const double special[] = {-0.0, std::nan(""), -std::numeric_limits<double>::infinity(),
                                    1e-300, 3.0000001, 65519.0, 1e-7};
          for (int64_t i = 0; i < span && i < 7; ++i)
            storeFromDouble(in.data(), i * 3 % span, special[i], src);
          std::vector<unsigned char> want(static_cast<size_t>(span) * 8, 0xAB), got = want;
          const fumi_map_spec spec{sizeof(fumi_map_spec), kind,
                                   kind == FUMI_MAP_PERTURB ? 0x1p-6 : 0.0, 1234567, 89, 0};
          uint64_t want_changed = 0;
          ASSERT_EQ(mapTensor(t, in.data(), src, want.data(), dst, spec, &want_changed), FUMI_OK);
          kn::ReduceParams p;
          p.op = kn::kMap;
          p.a = in.data();
          p.a_dtype = src;
          p.map_kind = kind;
          p.dst = got.data();
          p.dst_dtype = dst;
          if (kind == FUMI_MAP_PERTURB) {  // as deviceMap plans it
            int64_t storage[FUMI_MAX_DIMS];
            storageStrides(t.ndim, t.shape, t.strides, storage);
            // A layout whose elements share memory is left to the host (test below).
            if (!kn::planPerturb(t.ndim, t.shape, t.strides, storage, p)) continue;
            p.shift = spec.shift;
            p.seed = spec.seed;
            p.first = spec.first;
          }
          const std::vector<double> f = reduceOnGrid(t, p);
          SCOPED_TRACE(testing::Message() << "layout " << t.ndim << "-d " << src << " -> " << dst
                                          << " kind " << kind);
          EXPECT_EQ(static_cast<uint64_t>(f[0]), want_changed);
          EXPECT_EQ(got, want);
          if (kind == FUMI_MAP_PERTURB && src == dst && tensorNumel(t) > 8) {
            EXPECT_GT(want_changed, 0u);  // the noise moved elements
          }
          ++checked;
        }
  }
  EXPECT_GT(checked, 300);
}

// Perturbing a view whose elements share memory would store different noise into one place
// from several threads: planned only where no two elements meet.
TEST(DeviceKernels, PerturbPlansOnlyLayoutsWithoutSharedElements) {
  const auto plans = [](const fumi_tensor& t) {
    int64_t storage[FUMI_MAX_DIMS];
    storageStrides(t.ndim, t.shape, t.strides, storage);
    kn::ReduceParams p;
    return kn::planPerturb(t.ndim, t.shape, t.strides, storage, p);
  };
  EXPECT_TRUE(plans(makeTensor({5, 7}, {7, 1})));
  EXPECT_TRUE(plans(makeTensor({37, 45}, {1, 51})));            // column-major, ld > m
  EXPECT_TRUE(plans(makeTensor({3, 10, 12}, {140, 1, 11})));    // batches with gaps
  EXPECT_TRUE(plans(makeTensor({1, 8, 1, 3}, {99, 3, 7, 1})));  // size-1 dimensions
  EXPECT_FALSE(plans(makeTensor({3, 10, 12}, {130, 1, 11})));   // batch 1's first column
  EXPECT_FALSE(plans(makeTensor({4, 6}, {0, 1})));              // a broadcast batch
  EXPECT_FALSE(plans(makeTensor({6, 4}, {-4, 1})));             // negative stride
}

// Two outputs compared as highprec, determinism and perturb do, every dtype pair the kernels
// read, every layout: the host's comparison (compareTensor) field for field.
// compareWithKernels' two passes over their grids (the second's scales derived from the first's
// fields where they are) against the host's compareTensor.
void expectComparisonsAgree(const fumi_tensor& t, const void* a, fumi_dtype da, const void* b,
                            fumi_dtype db, uint32_t metrics) {
  const fumi_compare_spec spec =
      metrics::compareSpec(1e-3, 1e-2, db, metrics::underflowBelow(FUMI_DTYPE_F16), metrics);
  fumi_comparison want{}, got{};
  want.struct_size = got.struct_size = sizeof want;
  ASSERT_EQ(compareTensor(t, a, da, b, db, spec, &want), FUMI_OK);
  ASSERT_EQ(cuda::compareWithKernels(
                a, da, b, db, spec,
                [&](cuda::kern::ReduceParams* passes, int count, double* f) {
                  const std::vector<double> r = reduceOnGrid(t, passes, count);
                  std::copy(r.begin(), r.end(), f);
                  return true;
                },
                &got),
            FUMI_OK);
  EXPECT_EQ(got.nonfinite, want.nonfinite);
  EXPECT_EQ(got.mismatches, want.mismatches);
  EXPECT_EQ(got.underflow, want.underflow);
  EXPECT_EQ(got.max_abs_diff, want.max_abs_diff);
  // Maxima of the same quotients: equal; sums in another order: within rounding.
  for (auto [g, w] : {std::pair{got.fumi_ratio, want.fumi_ratio},
                      {got.fumi_ratio_unguarded, want.fumi_ratio_unguarded},
                      {got.max_rel, want.max_rel}, {got.ulp, want.ulp}})
    EXPECT_TRUE(g == w || (g != g && w != w)) << g << " " << w;
  for (auto [g, w] : {std::pair{got.normwise, want.normwise},
                      {got.norm_ratio, want.norm_ratio}})
    EXPECT_TRUE(g == w || std::fabs(g - w) <= 1e-12 * std::fabs(w) || (g != g && w != w))
        << g << " " << w;
}

TEST(DeviceKernels, ComparisonsEqualTheHostsOnEveryLayoutAndDtypePair) {
  const double inf = std::numeric_limits<double>::infinity();
  int checked = 0;
  for (const fumi_tensor& layout : layouts()) {
    if (hasNegativeStride(layout)) continue;
    for (fumi_dtype da : kKernelDtypes)
      for (fumi_dtype db : kKernelDtypes)
        for (int variant = 0; variant < 3; ++variant) {
          fumi_tensor t = layout;
          t.dtype = da;
          std::vector<unsigned char> a = randomBuffer(t, da, 3u + static_cast<uint32_t>(checked));
          std::vector<unsigned char> b(a.size());
          const int64_t span = tensorSpan(t) + 1;
          // b: a perturbed (variant 0), equal (1, where the dtypes agree), or with zeros,
          // tiny values, a NaN and an Inf (2).
          for (int64_t i = 0; i < span; ++i) {
            double v = loadAsDouble(a.data(), i, da) * (1 + 1e-3 * std::sin(double(i)));
            if (variant == 1) v = loadAsDouble(a.data(), i, da);
            if (variant == 2) v = i % 5 == 0 ? 0.0 : i % 7 == 0 ? 1e-6 * v : v;
            storeFromDouble(b.data(), i, v, db);
          }
          if (variant == 2 && span > 3) {
            storeFromDouble(b.data(), 1, std::nan(""), db);
            storeFromDouble(a.data(), 2, inf, da);
          }
          for (uint32_t metrics : {0u, uint32_t{FUMI_COMPARE_RATIO}}) {
            SCOPED_TRACE(testing::Message() << "layout " << t.ndim << "-d " << da << "/" << db
                                            << " variant " << variant << " metrics " << metrics);
            expectComparisonsAgree(t, a.data(), da, b.data(), db, metrics);
            ++checked;
          }
        }
  }
  EXPECT_GT(checked, 500);
}

// A million elements: the first kernel's results combined four times over, for both passes; a
// NaN among them, and values spanning 2^+-30. b near a, or far from it (max|a|, max|b| and
// max|a + b| / 2 apart, and the worst ratio at the guard: the second pass's guards and scales,
// derived on the device from the first pass's maxima, each matter).
TEST(DeviceKernels, LargeComparisonsCombineInStagesAndAgree) {
  EXPECT_EQ(kn::reduceThreads(1100 * 1000), 269 * kn::kThreads);  // 34 432 -> 1076 -> 34 -> 2
  EXPECT_EQ(kn::reduceThreads(kn::kReduceThreads * kn::kPerThread * 3), kn::kReduceThreads);
  EXPECT_EQ(kn::reduceThreads(0), kn::kThreads);
  EXPECT_EQ(kn::reduceThreads(kn::kPerThread * kn::kThreads + 1), 2 * kn::kThreads);
  for (auto [da, db] :
       {std::pair{FUMI_DTYPE_F32, FUMI_DTYPE_F32}, {FUMI_DTYPE_BF16, FUMI_DTYPE_F64}})
    for (bool far : {false, true}) {
      fumi_tensor t = makeTensor({1100, 1000}, {1000, 1});
      t.dtype = da;
      std::vector<unsigned char> a = randomBuffer(t, da, 5u), b(a.size() / dtypeBytes(da) * 8);
      for (int64_t i = 0; i < tensorNumel(t); ++i) {
        const double v = loadAsDouble(a.data(), i, da) * std::ldexp(1.0, int(i % 61) - 30);
        // Far: FuMi's ratio largest where |a + b| is smallest above its guard (an absolute
        // shift), beside elements five times a.
        const double w = !far ? v * (1 + 1e-4 * std::cos(double(i))) : i % 3 ? 5 * v : v + 1e8;
        storeFromDouble(a.data(), i, v, da);
        storeFromDouble(b.data(), i, i == 777777 ? std::nan("") : w, db);
      }
      SCOPED_TRACE(testing::Message() << da << "/" << db << " far " << far);
      for (uint32_t metrics : {0u, uint32_t{FUMI_COMPARE_RATIO | FUMI_COMPARE_NORMS}})
        expectComparisonsAgree(t, a.data(), da, b.data(), db, metrics);
    }
}

}  // namespace
}  // namespace fumi
