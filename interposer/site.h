// site.h — one OpSite per intercepted operation (one per hook-table row; framework adapters
// intern more at run time). It holds the counters and the compiled policy decision that the
// hot path reads: a relaxed counter increment plus one acquire load decide "not sampled".
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "fumi/plugin.h"

namespace fumi {

class OpDecision;

struct OpStats {
  uint64_t checked = 0;
  uint64_t skipped = 0;
  uint64_t violations = 0;
  std::map<std::string, double> worst;  // "check.metric" -> largest value seen
};

struct OpSite {
  OpSite(const char* op_name, const char* backend_name, fumi_dtype op_dtype);
  OpSite(const OpSite&) = delete;
  OpSite& operator=(const OpSite&) = delete;

  // Hot path. Plain atomics, no locks or allocation: this runs on every intercepted call.
  // `index` receives the call's 0-based index among all calls of this op in the process.
  OpDecision* onCall(uint64_t& index) {
    index = calls.fetch_add(1, std::memory_order_relaxed);
    return decision.load(std::memory_order_acquire);
  }

  // Hot fields on cache lines of their own: `calls` is written by every call of every thread;
  // `decision` is read by every call and written once (or when the policy is exhausted).
  alignas(64) std::atomic<uint64_t> calls{0};
  alignas(64) std::atomic<OpDecision*> decision{nullptr};
  alignas(64) const char* name;
  const char* backend;
  fumi_dtype dtype;
  OpSite* next = nullptr;  // registry list

  std::mutex stats_mu;
  OpStats stats;  // guarded by stats_mu (slow path only)

  void addStats(uint64_t checked, uint64_t skipped);
  void recordMetric(const std::string& key, double value, bool violated);
  OpStats statsSnapshot();
};

// All sites: static ones register at load time, interned ones when first seen.
OpSite* firstSite();
// A site for an op known only at run time (e.g. "aten::addmm"); created once, never freed.
OpSite& internSite(const std::string& name, const char* backend, fumi_dtype dtype);

}  // namespace fumi
