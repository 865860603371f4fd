// The host's element copies (tensor_copy.h: gather and scatter in logical and storage order)
// against the element-by-element definition of dtype.hpp, and the per-thread scratch arena.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "checksum.h"
#include "contract.h"
#include "elementwise.h"
#include "fumi/dtype.hpp"
#include "scratch_arena.h"
#include "tensor_copy.h"
#include "test_layouts.h"

namespace fumi {
namespace {

TEST(TensorCopy, GatherMatchesTheElementDefinitionForEveryLayoutAndDtype) {
  for (const fumi_tensor& t : layouts())
    for (fumi_dtype dtype : kDtypes) {
      const std::vector<unsigned char> data = randomBuffer(t, dtype, 7);
      const int64_t n = tensorNumel(t);
      std::vector<double> want(static_cast<size_t>(n)), got(static_cast<size_t>(n), -99.0);
      forEachElement(t, [&](int64_t k, int64_t off) {
        want[static_cast<size_t>(k)] = loadAsDouble(data.data(), off, dtype);
      });
      int64_t dense[FUMI_MAX_DIMS];
      denseStrides(t.ndim, t.shape, dense);
      ASSERT_TRUE(copyElements(t.ndim, t.shape, data.data(), dtype,
                               ElementLayout{t.strides, tensorBase(t)}, got.data(),
                               FUMI_DTYPE_F64, ElementLayout{dense, 0}));
      EXPECT_EQ(got, want) << "ndim " << t.ndim << " dtype " << dtypeName(dtype);
    }
}

TEST(TensorCopy, ScatterRoundsLikeStoreFromDoubleAndLeavesGapsAlone) {
  std::mt19937 gen(3);
  std::uniform_real_distribution<double> dist(-1e3, 1e3);
  for (const fumi_tensor& t : layouts())
    for (fumi_dtype dtype : kDtypes) {
      const int64_t n = tensorNumel(t), span = tensorSpan(t);
      std::vector<double> in(static_cast<size_t>(n));
      for (double& v : in) v = dist(gen);
      const size_t bytes = static_cast<size_t>(span) * static_cast<size_t>(dtypeBytes(dtype));
      std::vector<unsigned char> want(bytes, 0xAB), got(bytes, 0xAB);
      forEachElement(t, [&](int64_t k, int64_t off) {
        storeFromDouble(want.data(), off, in[static_cast<size_t>(k)], dtype);
      });
      int64_t dense[FUMI_MAX_DIMS];
      denseStrides(t.ndim, t.shape, dense);
      ASSERT_TRUE(copyElements(t.ndim, t.shape, in.data(), FUMI_DTYPE_F64, ElementLayout{dense, 0},
                               got.data(), dtype, ElementLayout{t.strides, tensorBase(t)}));
      EXPECT_EQ(got, want) << "ndim " << t.ndim << " dtype " << dtypeName(dtype);
    }
}

TEST(TensorCopy, StorageOrderIsOnePermutationThatFollowsMemory) {
  for (const fumi_tensor& t : layouts()) {
    const int64_t n = tensorNumel(t);
    int64_t order[FUMI_MAX_DIMS];
    storageStrides(t.ndim, t.shape, t.strides, order);
    // A permutation of the logical indices: every dense slot is hit exactly once.
    std::set<int64_t> slots;
    fumi_tensor dense_view = t;
    for (int k = 0; k < t.ndim; ++k) dense_view.strides[k] = order[k];
    forEachElement(dense_view, [&](int64_t, int64_t off) { slots.insert(off); });
    ASSERT_EQ(static_cast<int64_t>(slots.size()), n);
    if (n > 0) {
      EXPECT_EQ(*slots.rbegin(), n - 1);
    }
    // Memory order: slots ascend with the element's address in the tensor.
    std::vector<std::pair<int64_t, int64_t>> by_address;
    forEachElement(t, [&](int64_t k, int64_t off) {
      int64_t slot = 0, rest = k;
      for (int d = t.ndim - 1; d >= 0; --d) {
        slot += (rest % t.shape[d]) * order[d];
        rest /= t.shape[d];
      }
      by_address.emplace_back(off, slot);
    });
    std::sort(by_address.begin(), by_address.end());
    bool positive = true;
    for (int k = 0; k < t.ndim; ++k) positive = positive && t.strides[k] >= 0;
    for (size_t i = 1; positive && i < by_address.size(); ++i)
      EXPECT_LT(by_address[i - 1].second, by_address[i].second);
    // Gather and scatter in storage order round-trip exactly.
    const std::vector<unsigned char> data = randomBuffer(t, FUMI_DTYPE_F32, 11);
    std::vector<double> mid(static_cast<size_t>(n));
    ASSERT_TRUE(copyElements(t.ndim, t.shape, data.data(), FUMI_DTYPE_F32,
                             ElementLayout{t.strides, tensorBase(t)}, mid.data(), FUMI_DTYPE_F64,
                             ElementLayout{order, 0}));
    std::vector<unsigned char> back(data.size(), 0);
    ASSERT_TRUE(copyElements(t.ndim, t.shape, mid.data(), FUMI_DTYPE_F64, ElementLayout{order, 0},
                             back.data(), FUMI_DTYPE_F32, ElementLayout{t.strides, tensorBase(t)}));
    forEachElement(t, [&](int64_t, int64_t off) {
      EXPECT_EQ(std::memcmp(&back[static_cast<size_t>(off) * 4], &data[static_cast<size_t>(off) * 4], 4), 0);
    });
  }
}

TEST(TensorCopy, DenseColumnMajorInStorageOrderIsItsMemory) {
  const fumi_tensor t = makeTensor({16, 9}, {1, 16});
  std::vector<float> data(16 * 9);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<float>(i) * 0.5f;
  int64_t order[FUMI_MAX_DIMS];
  storageStrides(t.ndim, t.shape, t.strides, order);
  std::vector<double> out(data.size());
  ASSERT_TRUE(copyElements(t.ndim, t.shape, data.data(), FUMI_DTYPE_F32,
                           ElementLayout{t.strides, 0}, out.data(), FUMI_DTYPE_F64,
                           ElementLayout{order, 0}));
  for (size_t i = 0; i < data.size(); ++i) EXPECT_EQ(out[i], data[i]);
}

TEST(TensorCopy, EmptyTensorsAndUnknownDtypes) {
  const fumi_tensor t = makeTensor({3, 0, 4}, {0, 4, 1});
  double sentinel = 42.0;
  int64_t dense[FUMI_MAX_DIMS];
  denseStrides(t.ndim, t.shape, dense);
  EXPECT_TRUE(copyElements(t.ndim, t.shape, &sentinel, FUMI_DTYPE_F64, ElementLayout{t.strides, 0},
                           &sentinel, FUMI_DTYPE_F64, ElementLayout{dense, 0}));
  EXPECT_EQ(sentinel, 42.0);
  const fumi_tensor s = makeTensor({2}, {1});
  double in[2] = {1, 2}, out[2] = {0, 0};
  EXPECT_FALSE(copyElements(s.ndim, s.shape, in, FUMI_DTYPE_UNKNOWN, ElementLayout{s.strides, 0},
                            out, FUMI_DTYPE_F64, ElementLayout{s.strides, 0}));
  EXPECT_FALSE(copyElements(s.ndim, s.shape, in, FUMI_DTYPE_F64, ElementLayout{s.strides, 0}, out,
                            FUMI_DTYPE_UNKNOWN, ElementLayout{s.strides, 0}));
}

// Runs `body` with the contraction kernels of every vector width this CPU can run (contract.h:
// 2, 4 and 8 fp64 lanes on an AVX-512 machine), so that each build of them is checked.
template <class F>
void forEachLaneWidth(F&& body) {
  setContractLanesCap(0);
  const int widest = contractLanes();
  for (int lanes = 2; lanes <= widest; lanes *= 2) {
    SCOPED_TRACE("vector lanes " + std::to_string(lanes));
    setContractLanesCap(lanes);
    ASSERT_EQ(contractLanes(), lanes);
    body();
  }
  setContractLanesCap(0);
}

// contractTensor reads any layout and dtype in place: the same sums as contracting a dense
// row-major copy, along every dimension, for vector counts that use every kernel block.
// Each vector width of the kernels (forEachLaneWidth).
TEST(Contract, TensorAlongEveryDimensionMatchesTheDenseContraction) {
  forEachLaneWidth([] {
    for (const fumi_tensor& t : layouts()) {
      if (t.ndim == 0) continue;
      for (fumi_dtype dtype : {FUMI_DTYPE_F64, FUMI_DTYPE_F32, FUMI_DTYPE_F16, FUMI_DTYPE_BF16}) {
        const std::vector<unsigned char> data = randomBuffer(t, dtype, 5);
        std::vector<double> dense(static_cast<size_t>(tensorNumel(t)));
        forEachElement(t, [&](int64_t k, int64_t off) {
          dense[static_cast<size_t>(k)] = loadAsDouble(data.data(), off, dtype);
        });
        for (int32_t dim = 0; dim < t.ndim; ++dim)
          for (int32_t count : {1, 2, 7, 13}) {
            const checksum::Split sp = checksum::splitAround(t.shape, t.ndim, dim);
            std::vector<double> v(static_cast<size_t>(sp.len * count));
            checksum::gaussianVectors(static_cast<uint64_t>(dim * 31 + count), count, sp.len,
                                      v.data());
            const size_t size = static_cast<size_t>(sp.outer * count * sp.inner);
            std::vector<double> want(size), got(size, 7.0), twice(size, 1.0);
            checksum::contract(dense.data(), sp, count, v.data(), want.data(), nullptr);
            ASSERT_TRUE(contractTensor(t, data.data(), dtype, dim, count, v.data(), 1.0, false,
                                       got.data()));
            // alpha and accumulate: twice = 1 + 2 * (the contraction)
            ASSERT_TRUE(contractTensor(t, data.data(), dtype, dim, count, v.data(), 2.0, true,
                                       twice.data()));
            for (size_t i = 0; i < size; ++i) {
              EXPECT_NEAR(got[i], want[i], 1e-12 * (1 + std::fabs(want[i])))
                  << "ndim " << t.ndim << " " << dtypeName(dtype) << " dim " << dim << " at " << i;
              EXPECT_NEAR(twice[i], 1 + 2 * want[i], 1e-12 * (1 + std::fabs(want[i])));
            }
          }
      }
    }
  });
  const fumi_tensor t = makeTensor({2, 3}, {3, 1});
  double x[6] = {}, v[3] = {}, out[6] = {};
  EXPECT_FALSE(contractTensor(t, x, FUMI_DTYPE_F64, 2, 1, v, 1.0, false, out));
  EXPECT_FALSE(contractTensor(t, x, FUMI_DTYPE_UNKNOWN, 0, 1, v, 1.0, false, out));
}

// contractSides: every pair of sides along a tensor's last two dimensions (one pass where a
// unit stride allows it, side by side otherwise) gives contractTensor's sums per side and
// scanTensor's counts, maximum and norm, also with NaN, Inf and fp64 magnitudes beyond 2^400
// in the data (which the single pass hands to the scan's own passes).
TEST(Contract, SidesMatchOneContractionPerSideAndTheScan) {
  forEachLaneWidth([] {
    std::vector<fumi_tensor> ts = layouts();
    ts.push_back(makeTensor({70, 33}, {1, 70}));  // column-major: runs of 8 and 4 plus tails
    ts.push_back(makeTensor({2, 33, 70}, {2400, 72, 1}));  // batched row-major with gaps
    for (const fumi_tensor& t : ts) {
      if (t.ndim < 2) continue;
      const int32_t rows = t.ndim - 2, cols = t.ndim - 1;
      for (fumi_dtype dtype : {FUMI_DTYPE_F64, FUMI_DTYPE_F32, FUMI_DTYPE_F16, FUMI_DTYPE_BF16})
        for (int special = 0; special < 3; ++special) {
          if (special == 2 && dtype != FUMI_DTYPE_F64) continue;
          std::vector<unsigned char> data = randomBuffer(t, dtype, 11);
          if (special > 0) {  // one NaN and one Inf, or one huge value, somewhere inside
            int64_t n = 0;
            forEachElement(t, [&](int64_t k, int64_t off) {
              const double value = special == 2 ? 0x1p700 : (k % 2 == 0 ? NAN : -INFINITY);
              if (k == 3 || k == tensorNumel(t) - 2)
                storeFromDouble(data.data(), off, value, dtype);
              n = k;
            });
            ASSERT_GT(n, 3);
          }
          for (int32_t count : {1, 2, 3, 5, 8})
            for (bool with_scan : {true, false}) {
              std::vector<std::vector<double>> v(2), want(2), got(2);
              std::vector<fumi_side> sides;
              int32_t side_dims[2] = {rows, cols};
              if (count % 2 == 1) std::swap(side_dims[0], side_dims[1]);  // either order
              for (int i = 0; i < 2; ++i) {
                const checksum::Split sp = checksum::splitAround(t.shape, t.ndim, side_dims[i]);
                v[i].resize(static_cast<size_t>(sp.len * count));
                checksum::gaussianVectors(static_cast<uint64_t>(count * 7 + i), count, sp.len,
                                          v[i].data());
                const size_t size = static_cast<size_t>(sp.outer * count * sp.inner);
                want[i].assign(size, 0.0);
                got[i].assign(size, 7.0);
                ASSERT_TRUE(contractTensor(t, data.data(), dtype, side_dims[i], count, v[i].data(),
                                           1.0, false, want[i].data()));
                sides.push_back(fumi_side{sizeof(fumi_side), side_dims[i], count, v[i].data(),
                                          got[i].data(), nullptr});
              }
              fumi_scan scan{}, want_scan{};
              scan.struct_size = want_scan.struct_size = sizeof(fumi_scan);
              ASSERT_TRUE(contractSides(t, data.data(), dtype, 2, sides.data(),
                                        with_scan ? &scan : nullptr));
              for (int i = 0; i < 2; ++i)
                for (size_t k = 0; k < want[i].size(); ++k) {
                  const double w = want[i][k], g = got[i][k];
                  if (std::isnan(w)) EXPECT_TRUE(std::isnan(g));
                  else if (std::isinf(w)) EXPECT_EQ(g, w);
                  else EXPECT_NEAR(g, w, 1e-12 * (1 + std::fabs(w)))
                           << "ndim " << t.ndim << " " << dtypeName(dtype) << " count " << count
                           << " side " << i << " at " << k;
                }
              if (!with_scan) continue;
              ASSERT_EQ(scanTensor(t, data.data(), dtype, &want_scan), FUMI_OK);
              EXPECT_EQ(scan.nan, want_scan.nan);
              EXPECT_EQ(scan.inf, want_scan.inf);
              EXPECT_EQ(scan.max_abs, want_scan.max_abs);
              EXPECT_NEAR(scan.norm, want_scan.norm, 1e-13 * want_scan.norm);
              EXPECT_EQ(scan.nan + scan.inf, special == 1 ? 2u : 0u);
            }
        }
    }
  });
  const fumi_tensor t = makeTensor({2, 3}, {3, 1});
  double x[6] = {}, v[3] = {}, out[6] = {};
  const fumi_side bad{sizeof(fumi_side), 2, 1, v, out, nullptr};
  EXPECT_FALSE(contractSides(t, x, FUMI_DTYPE_F64, 1, &bad, nullptr));
  EXPECT_FALSE(contractSides(t, x, FUMI_DTYPE_UNKNOWN, 0, nullptr, nullptr));
}

TEST(ScratchArena, ReusesMemoryAcrossChecksAndNests) {
  ScratchArena arena;
  const ScratchArena::Mark bottom = arena.mark();
  void* a = arena.take(1000);
  void* b = arena.take(3);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a) % 64, 0u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b) % 64, 0u);
  EXPECT_GE(static_cast<char*>(b) - static_cast<char*>(a), 1000);
  // A nested check's scratch goes back without touching the outer one's.
  const ScratchArena::Mark inner = arena.mark();
  void* c = arena.take(5u << 20);  // beyond the first block
  ASSERT_NE(c, nullptr);
  std::memset(c, 1, 5u << 20);
  arena.rewind(inner);
  EXPECT_EQ(arena.take(3 << 20), c);  // the same block again
  arena.rewind(bottom);
  // One block now holds what the check had live at once (not the 1 + 5 MiB grown block by
  // block), and the same check again takes no new memory and lands where the one before did.
  const size_t capacity = arena.capacity();
  EXPECT_GE(capacity, (5u << 20) + 1000);
  EXPECT_LT(capacity, 6u << 20);
  auto check = [&] {
    void* first = arena.take(1000);
    EXPECT_NE(arena.take(3), nullptr);
    const ScratchArena::Mark nested = arena.mark();
    EXPECT_NE(arena.take(5u << 20), nullptr);
    arena.rewind(nested);
    arena.rewind(bottom);
    return first;
  };
  void* again = check();
  EXPECT_EQ(arena.capacity(), capacity);
  EXPECT_EQ(check(), again);
  EXPECT_EQ(arena.capacity(), capacity);
}

TEST(ScratchArena, KeepsABoundedAmountBetweenChecks) {
  ScratchArena arena;
  const ScratchArena::Mark bottom = arena.mark();
  ASSERT_NE(arena.take(1000), nullptr);
  ASSERT_NE(arena.take(ScratchArena::kKeptBytes), nullptr);
  ASSERT_NE(arena.take(ScratchArena::kKeptBytes), nullptr);
  EXPECT_GT(arena.capacity(), 2 * ScratchArena::kKeptBytes);
  arena.rewind(bottom);
  EXPECT_LE(arena.capacity(), ScratchArena::kKeptBytes);
  EXPECT_NE(arena.take(10), nullptr);
  // The engine keeps what the scratch budget allows, in one block: the same check again maps
  // nothing new.
  ASSERT_NE(arena.take(100u << 20), nullptr);
  arena.rewind(bottom, 256u << 20);
  const size_t kept = arena.capacity();
  EXPECT_GE(kept, (100u << 20) + 10);
  EXPECT_NE(arena.take(10), nullptr);
  ASSERT_NE(arena.take(100u << 20), nullptr);
  EXPECT_EQ(arena.capacity(), kept);
  arena.rewind(bottom, 256u << 20);
  EXPECT_EQ(arena.capacity(), kept);
  arena.rewind(bottom, 0);
  EXPECT_EQ(arena.capacity(), 0u);
}

// Pages of the process's resident set (/proc/self/statm), in bytes.
size_t residentBytes() {
  size_t pages = 0, resident = 0;
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (f) {
    if (std::fscanf(f, "%zu %zu", &pages, &resident) != 2) resident = 0;
    std::fclose(f);
  }
  return resident * static_cast<size_t>(sysconf(_SC_PAGESIZE));
}

// Checks that grow the arena leave one block of what the largest needed at once, not every
// block it grew by: the others leave the process's resident set.
TEST(ScratchArena, GrownBlocksBecomeOneOfTheChecksPeak) {
  constexpr size_t kMiB = size_t{1} << 20, kKeep = 256 * kMiB;
  ScratchArena arena;
  const ScratchArena::Mark bottom = arena.mark();
  auto check = [&](std::initializer_list<size_t> mib) {
    for (size_t m : mib) {
      void* p = arena.take(m * kMiB);
      ASSERT_NE(p, nullptr);
      std::memset(p, 1, m * kMiB);
    }
  };
  check({4, 8});  // a 4 MiB block, then an 8 MiB one: one block of 12 after the check
  arena.rewind(bottom, kKeep);
  EXPECT_GE(arena.capacity(), 12 * kMiB);
  EXPECT_LT(arena.capacity(), 13 * kMiB);
  check({20});  // past those 12: a block of its own
  const size_t resident = residentBytes();
  arena.rewind(bottom, kKeep);
  const size_t one = arena.capacity();
  EXPECT_GE(one, 20 * kMiB);
  EXPECT_LT(one, 32 * kMiB);  // grown block by block, 12 + 20 MiB (and more) would stay
  EXPECT_GE(resident - residentBytes(), 6 * kMiB);  // the 12 MiB block (8 of it touched) left
  check({4, 8});  // smaller checks, and the largest again: nothing new
  arena.rewind(bottom, kKeep);
  check({20});
  arena.rewind(bottom, kKeep);
  EXPECT_EQ(arena.capacity(), one);
  // A check beyond what may be kept is not gathered into one block.
  check({20, 8});
  const size_t beyond = arena.capacity();
  arena.rewind(bottom, 24 * kMiB);
  EXPECT_LE(arena.capacity(), 24 * kMiB);  // trimmed to what may stay, as before
  EXPECT_LT(arena.capacity(), beyond);
}

TEST(ScratchArena, TrimsOnlyWhatNoCheckUsesAndGivesItBackToTheSystem) {
  ScratchArena arena;
  const ScratchArena::Mark bottom = arena.mark();
  ASSERT_NE(arena.take(1000), nullptr);
  void* big = arena.take(size_t{96} << 20);
  ASSERT_NE(big, nullptr);
  std::memset(big, 1, size_t{96} << 20);
  const size_t with = arena.capacity();
  arena.trim(0);  // in use: nothing happens
  EXPECT_EQ(arena.capacity(), with);
  arena.rewind(bottom, SIZE_MAX);
  EXPECT_GE(arena.capacity(), (size_t{96} << 20) + 1000);  // kept, in one block
  EXPECT_LE(arena.capacity(), with);
  const size_t resident = residentBytes();
  arena.trim(size_t{16} << 20);
  EXPECT_LE(arena.capacity(), size_t{16} << 20);
  EXPECT_GE(resident - residentBytes(), size_t{90} << 20);  // the pages left the process
}

// Checks that take a tenth of the thread's recent time or more keep what the budget allows;
// rarer ones keep kIdleScratch at most.
TEST(ScratchArena, KeepsScratchWhileChecksComeOften) {
  const size_t budget = size_t{256} << 20;
  EXPECT_EQ(scratchToKeep(0.5, budget), budget);
  EXPECT_EQ(scratchToKeep(kDenseChecks, budget), budget);
  EXPECT_EQ(scratchToKeep(0.05, budget), kIdleScratch);
  EXPECT_EQ(scratchToKeep(1.0, size_t{1} << 20), size_t{1} << 20);  // never above the budget
  // Run `count` calls whose checks take `took` seconds each, `gap` apart; the last share.
  auto stream = [](CheckDuty& d, int count, double gap, double took) {
    double share = 0;
    for (int i = 0; i < count; ++i) share = d.add(gap, took);
    return share;
  };
  CheckDuty first;
  EXPECT_LT(first.add(INFINITY, 0.05), kDenseChecks);  // the thread's first: idle
  CheckDuty back_to_back;
  back_to_back.add(INFINITY, 0.001);
  EXPECT_LT(stream(back_to_back, 10, 0.0, 0.001), kDenseChecks);  // 10 ms: not yet
  EXPECT_GE(stream(back_to_back, 1000, 0.0, 0.001), kDenseChecks);  // a second of them
  EXPECT_GE(stream(back_to_back, 10000, 0.0, 0.001), 0.9);  // the idle start forgotten
  CheckDuty fifth, twentieth;
  EXPECT_NEAR(stream(fifth, 5000, 0.004, 0.001), 0.2, 0.01);  // settles on the share
  EXPECT_NEAR(stream(twentieth, 5000, 0.019, 0.001), 0.05, 0.01);
  // Training steps: a forward pass checked on every call (60 checks of 3 ms, 1 ms apart), then
  // the backward pass's 300 ms without checks. The first check of each forward pass comes
  // 300 ms after the last: dense all the same (the last gap alone said idle there).
  CheckDuty steps;
  for (int step = 0; step < 20; ++step) {
    const double share = steps.add(0.3, 0.003);
    if (step >= 3) {
      EXPECT_GE(share, kDenseChecks) << "step " << step;
    }
    stream(steps, 59, 0.001, 0.003);
  }
  // Then checks stop for ten seconds: the next one finds the thread idle.
  EXPECT_LT(steps.add(10.0, 0.003), kDenseChecks);
  EXPECT_LT(steps.add(INFINITY, 0.003), kDenseChecks);
}

// The host's own copies inside a reference or a projection are charged against what the
// check's scratch budget has left: past it, NoScratch (the host call answers FUMI_NO_SCRATCH); a
// limit inside another gets no more than the outer has left, and what it charged counts there;
// outside any limit nothing is charged.
TEST(ScratchLimit, ChargesTheHostsCopiesAgainstTheBudgetLeft) {
  chargeScratch(size_t{1} << 40);  // no limit: never throws
  {
    ScratchLimit outer(100);
    chargeScratch(60);
    EXPECT_EQ(outer.charged(), 60u);
    EXPECT_THROW(chargeScratch(41), NoScratch);
    {
      ScratchLimit inner(1000);  // 40 left outside
      EXPECT_THROW(chargeScratch(41), NoScratch);
      chargeScratch(30);
      EXPECT_EQ(inner.charged(), 30u);
    }
    EXPECT_EQ(outer.charged(), 90u);
    chargeScratch(10);
    EXPECT_THROW(chargeScratch(1), NoScratch);
  }
  chargeScratch(size_t{1} << 40);  // the limit is gone with its scope
}

// Stages (device reads staged on the host) take from the thread's arena and give their bytes
// back when they go, last first; one that something else took after keeps its bytes until the
// enclosing rewind, so nothing taken later is ever freed under its owner.
TEST(Stage, GivesItsBytesBackOnlyFromTheTop) {
  ScratchArena& arena = ScratchArena::local();
  const ScratchArena::Mark outer = arena.mark();
  const auto same = [](ScratchArena::Mark a, ScratchArena::Mark b) {
    return a.block == b.block && a.used == b.used;
  };
  {
    Stage a, b;
    char* pa = static_cast<char*>(a.take(4096));
    char* pb = static_cast<char*>(b.take(4096));
    ASSERT_NE(pa, nullptr);
    ASSERT_NE(pb, nullptr);
    EXPECT_GE(pb, pa + 4096);
  }  // b, then a: both at the top when they go
  EXPECT_TRUE(same(arena.mark(), outer));
  void* later = nullptr;
  {
    Stage s;
    void* ps = s.take(4096);
    ASSERT_NE(ps, nullptr);
    later = arena.take(100);  // a check's scratch, taken while the stage is held
    ASSERT_NE(later, nullptr);
  }
  const ScratchArena::Mark after = arena.mark();
  EXPECT_FALSE(same(after, outer));  // the stage did not rewind under `later`
  EXPECT_NE(arena.take(8), later);
  arena.rewind(outer);
  EXPECT_TRUE(same(arena.mark(), outer));
  {
    Stage s;
    void* again = s.take(4096);  // the same bytes as the first stage: no fresh pages
    EXPECT_NE(again, nullptr);
  }
  EXPECT_TRUE(same(arena.mark(), outer));
}

}  // namespace
}  // namespace fumi
