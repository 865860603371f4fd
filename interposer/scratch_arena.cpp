// scratch_arena.cpp — ScratchArena (scratch_arena.h).
#include "scratch_arena.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>

namespace fumi {

namespace {
constexpr size_t kAlign = 64;
constexpr size_t kMinBlock = size_t{1} << 20;
}  // namespace

ScratchArena& ScratchArena::local() {
  thread_local ScratchArena arena;
  return arena;
}

namespace {
// Blocks are whole mappings (page-aligned, so 64-byte aligned): munmap returns them to the
// system at once, where free() may keep a block below malloc's mmap threshold in its heap.
char* mapBlock(size_t size) {
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? nullptr : static_cast<char*>(p);
}
}  // namespace

ScratchArena::~ScratchArena() {
  for (Block& b : blocks_) munmap(b.data, b.size);
}

void* ScratchArena::take(size_t bytes) {
  if (bytes > SIZE_MAX - kAlign) return nullptr;
  bytes = (std::max<size_t>(bytes, 1) + kAlign - 1) & ~(kAlign - 1);
  // The current block, else the next one with room (blocks after the current one are empty).
  while (current_ + 1 < blocks_.size() && blocks_[current_].size - blocks_[current_].used < bytes)
    ++current_;
  if (blocks_.empty() || blocks_[current_].size - blocks_[current_].used < bytes) {
    // A new block, growing geometrically so a steady stream of checks settles on a few blocks.
    const size_t last = blocks_.empty() ? 0 : blocks_.back().size;
    const size_t size = std::max({bytes, kMinBlock, 2 * last});
    char* p = mapBlock(size);
    if (!p) return nullptr;
    blocks_.push_back(Block{p, size, 0});
    current_ = blocks_.size() - 1;
  }
  Block& b = blocks_[current_];
  void* p = b.data + b.used;
  b.used += bytes;
  size_t live = 0;  // what one block would hold now: the live bytes of every block so far
  for (size_t i = 0; i <= current_; ++i) live += blocks_[i].used;
  peak_ = std::max(peak_, live);
  return p;
}

void ScratchArena::rewind(Mark m, size_t keep_bytes) {
  if (blocks_.empty()) return;
  for (size_t i = m.block + 1; i < blocks_.size(); ++i) blocks_[i].used = 0;
  blocks_[m.block].used = m.used;
  current_ = m.block;
  if (m.block == 0 && m.used == 0) {
    consolidate(keep_bytes);
    peak_ = 0;
  }
  trim(keep_bytes);
}

// Growing block by block leaves the sum of a geometric series (1, 2, 4 ... 32 MiB for a check
// that needed 36): the largest block, grown in place of its mapping to the check's peak where it
// is smaller (its resident pages stay), serves the same check from one block; the rest goes.
void ScratchArena::consolidate(size_t keep_bytes) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t want = (peak_ + page - 1) / page * page;
  if (blocks_.size() < 2 || want > keep_bytes) return;
  size_t largest = 0;
  for (size_t i = 1; i < blocks_.size(); ++i)
    if (blocks_[i].size > blocks_[largest].size) largest = i;
  Block one = blocks_[largest];
  if (one.size < want) {
    void* p = mremap(one.data, one.size, want, MREMAP_MAYMOVE);
    if (p == MAP_FAILED) return;  // the blocks as they are
    one = Block{static_cast<char*>(p), want, 0};
  }
  for (size_t i = 0; i < blocks_.size(); ++i)
    if (i != largest) munmap(blocks_[i].data, blocks_[i].size);
  blocks_.assign(1, one);
  current_ = 0;
}

void ScratchArena::trim(size_t keep_bytes) {
  if (blocks_.empty() || current_ != 0 || blocks_[0].used != 0 || capacity() <= keep_bytes)
    return;
  // Nothing is in use: keep the newest (largest) blocks up to keep_bytes, free the rest.
  size_t kept = 0;
  std::vector<Block> keep;
  for (size_t i = blocks_.size(); i-- > 0;) {
    if (kept + blocks_[i].size <= keep_bytes) {
      kept += blocks_[i].size;
      keep.push_back(blocks_[i]);
    } else {
      munmap(blocks_[i].data, blocks_[i].size);
    }
  }
  std::reverse(keep.begin(), keep.end());
  blocks_.swap(keep);
  current_ = 0;
}

size_t ScratchArena::capacity() const {
  size_t total = 0;
  for (const Block& b : blocks_) total += b.size;
  return total;
}

void* Stage::take(size_t bytes) {
  ScratchArena& arena = ScratchArena::local();
  before_ = arena.mark();
  void* p = arena.take(bytes);
  after_ = arena.mark();
  taken_ = p != nullptr;
  return p;
}

Stage::~Stage() {
  if (!taken_) return;
  ScratchArena& arena = ScratchArena::local();
  const ScratchArena::Mark now = arena.mark();
  if (now.block == after_.block && now.used == after_.used) arena.rewind(before_);
}

namespace {
// What the innermost ScratchLimit of this thread has left (when one is active).
thread_local size_t t_scratch_left = 0;
thread_local bool t_scratch_active = false;
}  // namespace

// A limit inside another (a host call made while one runs) gets no more than the outer's.
ScratchLimit::ScratchLimit(size_t bytes)
    : outer_left_(t_scratch_left),
      outer_active_(t_scratch_active),
      limit_(t_scratch_active ? std::min(bytes, t_scratch_left) : bytes) {
  t_scratch_left = limit_;
  t_scratch_active = true;
}

ScratchLimit::~ScratchLimit() {
  const size_t used = charged();
  t_scratch_active = outer_active_;
  t_scratch_left = outer_active_ ? outer_left_ - std::min(outer_left_, used) : 0;
}

size_t ScratchLimit::charged() const { return limit_ - t_scratch_left; }

size_t scratchLeft() { return t_scratch_active ? t_scratch_left : SIZE_MAX; }

void chargeScratch(size_t bytes) {
  if (!t_scratch_active) return;
  if (bytes > t_scratch_left) throw NoScratch(bytes);
  t_scratch_left -= bytes;
}

double CheckDuty::add(double gap, double took) {
  took = std::max(took, 0.0);
  if (all_ == 0 || !(gap < kDutyWindow * 50)) {  // first, or long after: idle, and the window
    busy_ = took;                                  // starts with a window of idle time
    all_ = kDutyWindow + took;
    return 0.0;
  }
  const double span = std::max(gap, 0.0) + took;
  const double kept = std::exp(-span / kDutyWindow);
  busy_ = busy_ * kept + took;
  all_ = all_ * kept + span;
  return all_ > 0 ? busy_ / all_ : 0.0;
}

size_t scratchToKeep(double duty, size_t budget) {
  return duty >= kDenseChecks ? budget : std::min(budget, kIdleScratch);
}

}  // namespace fumi
