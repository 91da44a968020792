#pragma once
// Importing the per-rank snapshots of one multi-rank job (DDP, FSDP, ZeRO) as one run per rank
// linked to a job. Sources: the job manifest fragscope-record writes (fragscope-job.json), a
// directory (its manifest, else its snapshot files), or a list of snapshot files. Shared by
// `fragscope-cli import --job` and the GUI's File > Open of several files.
#include <optional>
#include <string>
#include <vector>

#include "engine/core/cancel.h"
#include "storage/db/jobs.h"
#include "storage/db/snapshot_import.h"

namespace fragscope::storage {

inline constexpr const char* kJobManifestName = "fragscope-job.json";

struct RankFile {
  int rank = 0;
  std::optional<int> local_rank;
  std::string snapshot;  // paths as the caller can open them
  std::string stats;     // NAME.stats.json; empty: the companion file when there is one
  std::string env;       // NAME.env.json; empty: the companion file when there is one
};

struct JobSource {
  std::string name;    // from the manifest; empty for plain files
  int world_size = 0;  // 0: the number of ranks found
  std::string origin;  // what was read: the manifest, the directory or "files"
  std::vector<RankFile> ranks;
};

// Reads a fragscope-job manifest ({"format": "fragscope-job/1", "job", "world_size", "ranks":
// [{"rank", "local_rank", "snapshot", "stats", "summary", "env"}, ...]}; paths relative to the
// manifest). Unknown fields and later format versions are read for what they hold; a missing
// or mistyped required field is an InputError naming the file and the field.
JobSource read_job_manifest(const std::string& path);

// What `paths` name: one manifest, one directory (its manifest, else every snapshot file in
// it), or snapshot files. A file's rank comes from "rank<N>" in its name (rank3, rank_3,
// rank-3); when no name carries one, ranks follow the order given (a directory: name order).
// Names that mix both, or a rank given twice, are an InputError.
JobSource job_source_of(const std::vector<std::string>& paths);

// True when `paths` name a job rather than unrelated snapshots: a manifest, or two or more files
// that all carry a rank in their names (what File > Open imports as one job).
bool looks_like_job(const std::vector<std::string>& paths);
// A name for a job that has none in `store`: the manifest's, else the first snapshot's file name
// without its rank ("train_rank0.pickle.gz" -> "train"), with " (2)", " (3)"... when taken.
std::string unused_job_name(RunStore& store, const JobSource& source);

struct JobImportOptions {
  std::string job_name;  // empty: the manifest's job name, else an InputError
  unsigned threads = 0;  // snapshots read at once; 0 = hardware concurrency
  WorkControl control;   // polled between ranks; progress "reading" and "storing" by rank
};

struct RankImport {
  int rank = 0;
  std::string snapshot;
  ImportResult result;
};

struct JobImportResult {
  JobId job{};
  std::vector<RankImport> ranks;
};

// Reads every rank's snapshot (in parallel) before writing anything, then stores each rank as
// an imported run named "<job> rank <N>" and links it to a new job. On any error or cancel,
// nothing of the job stays in the database.
JobImportResult import_job(RunStore& store, const JobSource& source,
                           const JobImportOptions& options);

}  // namespace fragscope::storage
