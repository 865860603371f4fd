// rank.h — which rank of a distributed job this process is, read once from the launcher's
// environment (torchrun, Slurm, Open MPI, MPICH/Intel MPI, MVAPICH, PMIx). The table of
// variables is in rank.cpp; docs/policy.md#ranks lists it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace fumi {

struct RankInfo {
  std::optional<int64_t> rank;        // global rank; empty outside a distributed launch
  std::optional<int64_t> local_rank;  // rank on this node
  std::optional<int64_t> world_size;
  std::string source;                 // the variable the rank came from ("RANK", ...)
};

// Read from the environment on the first call (the launcher sets it before the program runs).
const RankInfo& rankInfo();
// The same from an explicit getenv-like function (tests).
RankInfo readRankInfo(const char* (*get)(const char*));

}  // namespace fumi
