// scratch_arena.h — the host scratch that checks allocate (fumi_host_api.alloc/alloc_like): one
// arena per thread, reused from check to check, so a check costs no fresh pages (page faults and
// the kernel's zeroing cost more than a GEMM's checks themselves: docs/benchmarks.md part 2).
// Checks on one thread nest at most as calls inside calls, so a mark taken when a check starts
// and rewound when it ends frees exactly its allocations. The contents of scratch are unspecified
// (plugin.h). What stays allocated between checks is bounded: the largest check's use, in one
// block, at most the `keep` bytes rewind() is given (the policy's scratch budget: a check within
// the budget pays fresh pages twice at most, once while the arena grows block by block and once
// for the part of the one block that replaces them which the largest had not), and trim() gives
// back what checks that come seldom would keep for nothing (the engine's call, scratchToKeep()).
// Blocks are mapped pages of their own, so what is freed leaves the process's resident set at
// once.
#pragma once

#include <cmath>
#include <cstddef>
#include <exception>
#include <vector>

namespace fumi {

class ScratchArena {
 public:
  static constexpr size_t kKeptBytes = size_t{64} << 20;  // rewind()'s default
  struct Mark {
    size_t block = 0, used = 0;
  };

  // The calling thread's arena.
  static ScratchArena& local();

  ScratchArena() = default;
  ScratchArena(const ScratchArena&) = delete;
  ScratchArena& operator=(const ScratchArena&) = delete;
  ~ScratchArena();

  Mark mark() const { return Mark{current_, blocks_.empty() ? 0 : blocks_[current_].used}; }
  // `bytes` (64-byte aligned), or nullptr when memory is exhausted.
  void* take(size_t bytes);
  // Frees everything taken since `m`; at the bottom, the newest blocks up to `keep` bytes stay
  // for the next check and the others go back to the system.
  void rewind(Mark m, size_t keep = kKeptBytes);
  // When nothing is in use: the newest blocks up to `keep` bytes stay, the others are freed.
  void trim(size_t keep);
  size_t capacity() const;

 private:
  struct Block {
    char* data;
    size_t size, used;
  };
  void consolidate(size_t keep_bytes);

  std::vector<Block> blocks_;
  size_t current_ = 0;
  size_t peak_ = 0;  // the most bytes live at once since the arena was last at its bottom
};

// Host staging of device memory for one primitive (a read, a staged write): bytes from the
// thread's arena, reused from check to check (no fresh, zero-filled pages per read, as a
// std::vector had), given back when the Stage goes if nothing was taken after them; otherwise
// they stay until the enclosing check's rewind. The bytes are uninitialised.
class Stage {
 public:
  Stage() = default;
  Stage(const Stage&) = delete;
  Stage& operator=(const Stage&) = delete;
  ~Stage();
  // `bytes` for this stage (one take per Stage), or nullptr when memory is exhausted.
  void* take(size_t bytes);

 private:
  ScratchArena::Mark before_, after_;
  bool taken_ = false;
};

// The scratch budget left to the host's own fp64 work for the check running on this thread:
// the operand copies of `reference` evaluations and `checksum` projections (reference.cpp,
// conv_projection.cpp, the adapters' host copies of device tensors) are not arena allocations,
// but they count against the policy's scratch budget like the plugins' own. A ScratchLimit
// sets what is left for one host call; chargeScratch(bytes) takes from it and throws NoScratch
// past it (the host call then answers FUMI_NO_SCRATCH: the check is skipped with the
// budget's warning). Outside a ScratchLimit nothing is charged.
struct NoScratch : std::exception {
  NoScratch() = default;
  explicit NoScratch(size_t request) : asked(request) {}
  const char* what() const noexcept override { return "scratch budget exhausted"; }
  size_t asked = 0;  // the request refused
};
class ScratchLimit {
 public:
  explicit ScratchLimit(size_t bytes);
  ~ScratchLimit();
  ScratchLimit(const ScratchLimit&) = delete;
  ScratchLimit& operator=(const ScratchLimit&) = delete;
  size_t charged() const;  // bytes charged under this limit

 private:
  size_t outer_left_;
  bool outer_active_;
  size_t limit_;
};
void chargeScratch(size_t bytes);

// The share of a thread's recent time that its checks took, recent seconds weighing most (an
// exponential window of kDutyWindow seconds). A thread's first check (or the first after a long
// pause) counts as idle, and the window then starts with a window of idle time.
constexpr double kDutyWindow = 2.0;
class CheckDuty {
 public:
  // A call's checks ran from `started` to `ended` (monotonic seconds); the share after them.
  double checked(double started, double ended) {
    const double share = add(started - previous_end_, ended - started);
    previous_end_ = ended;
    return share;
  }
  // The same, told as the time since the previous checks ended (infinite: none before).
  double add(double gap, double took);

 private:
  double busy_ = 0, all_ = 0;  // all_ is 0 until the first check, at least kDutyWindow after
  double previous_end_ = -INFINITY;
};

// How much of a thread's arena to keep after a call's checks: all the scratch budget allows
// while checks take at least kDenseChecks of the thread's recent time (`duty`, CheckDuty: a
// check every call, or every call of a forward pass: fresh pages per check would cost more than
// many checks themselves), else kIdleScratch (sampled checks, and the last of them: hundreds of
// MiB kept for a check that may never come). A window rather than the last gap: the first
// check of each forward pass comes after the backward's gap, and keeping only kIdleScratch
// there had the largest checks of every step map and fault their pages afresh.
constexpr double kDenseChecks = 0.1;
constexpr size_t kIdleScratch = size_t{16} << 20;
size_t scratchToKeep(double duty, size_t budget);
// What chargeScratch may still take on this thread (SIZE_MAX outside a ScratchLimit).
size_t scratchLeft();

}  // namespace fumi
