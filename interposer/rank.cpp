// rank.cpp — the launchers' rank variables, in priority order: torchrun's own (RANK is the
// torch global rank even when torchrun runs under Slurm or MPI), then Slurm, then MPI.
#include "rank.h"

#include <cstdlib>

namespace fumi {

namespace {

struct RankVars {
  const char* rank;
  const char* local_rank;
  const char* world_size;
};

constexpr RankVars kLaunchers[] = {
    {"RANK", "LOCAL_RANK", "WORLD_SIZE"},                                            // torchrun
    {"SLURM_PROCID", "SLURM_LOCALID", "SLURM_NTASKS"},                               // Slurm
    {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_SIZE"},  // Open MPI
    {"PMI_RANK", "MPI_LOCALRANKID", "PMI_SIZE"},                                     // MPICH, Intel MPI
    {"MV2_COMM_WORLD_RANK", "MV2_COMM_WORLD_LOCAL_RANK", "MV2_COMM_WORLD_SIZE"},     // MVAPICH
    {"PMIX_RANK", nullptr, nullptr},                                                 // PMIx
};

// A non-negative decimal integer, or nothing (unset, empty, junk).
std::optional<int64_t> parseRank(const char* s) {
  if (!s || !*s) return std::nullopt;
  int64_t v = 0;
  for (const char* p = s; *p; ++p) {
    if (*p < '0' || *p > '9' || v > (int64_t{1} << 40)) return std::nullopt;
    v = v * 10 + (*p - '0');
  }
  return v;
}

const char* systemGetenv(const char* name) { return std::getenv(name); }

}  // namespace

RankInfo readRankInfo(const char* (*get)(const char*)) {
  RankInfo info;
  for (const RankVars& l : kLaunchers) {
    std::optional<int64_t> r = parseRank(get(l.rank));
    if (!r) continue;
    info.rank = r;
    info.source = l.rank;
    if (l.local_rank) info.local_rank = parseRank(get(l.local_rank));
    if (l.world_size) info.world_size = parseRank(get(l.world_size));
    break;
  }
  return info;
}

const RankInfo& rankInfo() {
  static const RankInfo info = readRankInfo(systemGetenv);
  return info;
}

}  // namespace fumi
