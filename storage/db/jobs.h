#pragma once
// Multi-rank jobs: a DDP / FSDP / ZeRO training run is one run per rank, linked to a job, so that
// the ranks can be looked at side by side and the rank that ran out of memory found.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/analysis/job_balance.h"
#include "storage/db/run_store.h"

namespace fragscope::storage {

struct JobTag {};
using JobId = StrongId<JobTag, std::int64_t>;

struct JobRank {
  int rank = 0;
  std::optional<int> local_rank;
  RunId run{};
  friend bool operator==(const JobRank&, const JobRank&) = default;
};

struct JobRecord {
  JobId id{};
  std::string name;
  int world_size = 0;  // as the job declared it; may exceed ranks.size() when ranks are missing
  std::string origin;  // where it came from (manifest, directory or files)
  std::string created_at;
  std::vector<JobRank> ranks;  // by rank
};

// Creates an empty job. A job of that name already existing is an InputError naming it.
JobId create_job(RunStore& store, const std::string& name, int world_size,
                 const std::string& origin);
// Links a stored run to the job as `rank`; a rank the job already has is an InputError.
void add_job_rank(RunStore& store, JobId job, const JobRank& rank);
std::vector<JobRecord> list_jobs(RunStore& store);
std::optional<JobRecord> find_job(RunStore& store, const std::string& name);
// Throws DatabaseError naming the id when there is no such job.
JobRecord job(RunStore& store, JobId id);
// The job a run belongs to, and its rank there.
std::optional<std::pair<JobRecord, int>> job_of_run(RunStore& store, RunId run);
// Removes the job; with `with_runs`, its ranks' runs too (one transaction).
void delete_job(RunStore& store, JobId id, bool with_runs);

// Each rank's peaks, fragmentation and OOMs from its stored run (the series pyramid, the run's
// status and OOM reports: no event is decoded), and the worst rank. The one computation behind
// `fragscope-cli job` and the GUI's job page.
analysis::JobBalance job_balance(RunStore& store, const JobRecord& job);

}  // namespace fragscope::storage
