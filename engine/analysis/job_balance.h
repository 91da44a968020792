#pragma once
// Imbalance between the ranks of a multi-rank job: which rank needs the most memory, which ran
// out, and by how much the ranks differ. Ranks of a data-parallel job run the same program, so a
// difference comes from their data (longer sequences on one rank), from rank-specific work (rank
// 0 logging, checkpointing) or from sharding remainders; the rank that fails first is the one to
// look at, and it is not always rank 0.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "engine/core/units.h"

namespace fragscope::analysis {

struct RankMemory {
  int rank = 0;
  std::int64_t run_id = 0;
  Bytes peak_allocated = 0;
  Bytes peak_reserved = 0;
  Bytes peak_active = 0;  // allocated + freed blocks awaiting stream events
  std::size_t ooms = 0;   // OOMs the run recorded (0 when it ran through)
  bool oom = false;       // the run ended in, or recorded, an OOM

  // GMLake's fragmentation (metrics.h): 1 - peak_active / peak_reserved, the share of the
  // reserved peak that was never in use at once; 0 when nothing was reserved.
  double fragmentation() const;
};

struct JobBalance {
  std::string job;
  std::vector<RankMemory> ranks;  // by rank
  // The rank to look at first: among the ranks that ran out of memory, the one with the highest
  // reserved peak; when none did, the rank with the highest reserved peak (then allocated peak,
  // then the lowest rank). nullopt only for a job without ranks.
  std::optional<int> worst_rank;
  // Highest over mean reserved peak (1 = balanced); 0 without ranks.
  double reserved_imbalance = 0;
  double allocated_imbalance = 0;
};

// Orders `ranks` by rank and finds the worst one. Two entries for one rank are an InputError.
JobBalance balance_job(std::string job, std::vector<RankMemory> ranks);

// {"job", "ranks": [{"rank", "run_id", "peak_allocated", "peak_reserved", "fragmentation",
// "oom"}, ...], "worst_rank"} (worst_rank null for a job without ranks).
nlohmann::json to_json(const JobBalance& balance);
// The imbalance table as text, the worst rank marked.
std::string to_text(const JobBalance& balance);

}  // namespace fragscope::analysis
