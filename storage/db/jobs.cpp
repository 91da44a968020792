#include "storage/db/jobs.h"

#include <algorithm>

#include "engine/core/error.h"

namespace fragscope::storage {
namespace {

constexpr const char* kNow = "strftime('%Y-%m-%dT%H:%M:%SZ', 'now')";

std::vector<JobRank> ranks_of(Database& db, JobId job) {
  auto query =
      db.prepare("SELECT rank, local_rank, run_id FROM job_ranks WHERE job_id = ? ORDER BY rank");
  query.bind_int(1, job.value);
  std::vector<JobRank> ranks;
  while (query.step()) {
    JobRank rank;
    rank.rank = static_cast<int>(query.column_int(0));
    if (!query.column_is_null(1))
      rank.local_rank = static_cast<int>(query.column_int(1));
    rank.run = RunId{query.column_int(2)};
    ranks.push_back(rank);
  }
  return ranks;
}

std::vector<JobRecord> select_jobs(Database& db, const std::string& where,
                                   const std::function<void(Statement&)>& bind) {
  auto query = db.prepare("SELECT id, name, world_size, origin, created_at FROM jobs " + where +
                          " ORDER BY id");
  bind(query);
  std::vector<JobRecord> jobs;
  while (query.step()) {
    JobRecord job;
    job.id = JobId{query.column_int(0)};
    job.name = query.column_text(1);
    job.world_size = static_cast<int>(query.column_int(2));
    job.origin = query.column_text(3);
    job.created_at = query.column_text(4);
    jobs.push_back(std::move(job));
  }
  for (JobRecord& job : jobs)
    job.ranks = ranks_of(db, job.id);
  return jobs;
}

}  // namespace

JobId create_job(RunStore& store, const std::string& name, int world_size,
                 const std::string& origin) {
  if (name.empty())
    throw InputError("a job needs a name");
  if (find_job(store, name))
    throw InputError("job \"" + name + "\" already exists in " + store.database().path() +
                     " (delete it first, or import under another --job name)");
  auto insert = store.database().prepare(std::string("INSERT INTO jobs(name, world_size, origin, "
                                                     "created_at) VALUES (?, ?, ?, ") +
                                         kNow + ")");
  insert.bind_text(1, name).bind_int(2, world_size).bind_text(3, origin);
  insert.run();
  return JobId{store.database().last_insert_rowid()};
}

void add_job_rank(RunStore& store, JobId job, const JobRank& rank) {
  Database& db = store.database();
  {
    auto existing = db.prepare("SELECT run_id FROM job_ranks WHERE job_id = ? AND rank = ?");
    existing.bind_int(1, job.value).bind_int(2, rank.rank);
    if (existing.step())
      throw InputError("job " + std::to_string(job.value) + " already has rank " +
                       std::to_string(rank.rank) + " (run " +
                       std::to_string(existing.column_int(0)) + ")");
  }
  auto insert =
      db.prepare("INSERT INTO job_ranks(job_id, rank, local_rank, run_id) VALUES (?, ?, ?, ?)");
  insert.bind_int(1, job.value).bind_int(2, rank.rank);
  if (rank.local_rank)
    insert.bind_int(3, *rank.local_rank);
  else
    insert.bind_null(3);
  insert.bind_int(4, rank.run.value);
  insert.run();
}

std::vector<JobRecord> list_jobs(RunStore& store) {
  return select_jobs(store.database(), "", [](Statement&) {});
}

std::optional<JobRecord> find_job(RunStore& store, const std::string& name) {
  auto jobs =
      select_jobs(store.database(), "WHERE name = ?", [&](Statement& s) { s.bind_text(1, name); });
  if (jobs.empty())
    return std::nullopt;
  return std::move(jobs.front());
}

JobRecord job(RunStore& store, JobId id) {
  auto jobs =
      select_jobs(store.database(), "WHERE id = ?", [&](Statement& s) { s.bind_int(1, id.value); });
  if (jobs.empty())
    throw DatabaseError(store.database().path() + ": no job with id " + std::to_string(id.value));
  return std::move(jobs.front());
}

std::optional<std::pair<JobRecord, int>> job_of_run(RunStore& store, RunId run) {
  auto query = store.database().prepare("SELECT job_id, rank FROM job_ranks WHERE run_id = ?");
  query.bind_int(1, run.value);
  if (!query.step())
    return std::nullopt;
  const JobId id{query.column_int(0)};
  const int rank = static_cast<int>(query.column_int(1));
  return std::make_pair(job(store, id), rank);
}

void delete_job(RunStore& store, JobId id, bool with_runs) {
  Database& db = store.database();
  const JobRecord record = job(store, id);
  Transaction transaction(db);
  if (with_runs) {
    auto erase_run = db.prepare("DELETE FROM runs WHERE id = ?");
    for (const JobRank& rank : record.ranks) {
      erase_run.bind_int(1, rank.run.value);
      erase_run.run();
      erase_run.reset();
    }
  }
  auto erase = db.prepare("DELETE FROM jobs WHERE id = ?");
  erase.bind_int(1, id.value);
  erase.run();
  transaction.commit();
}

analysis::JobBalance job_balance(RunStore& store, const JobRecord& job) {
  std::vector<analysis::RankMemory> ranks;
  for (const JobRank& rank : job.ranks) {
    const RunRecord run = store.run(rank.run);
    analysis::RankMemory memory;
    memory.rank = rank.rank;
    memory.run_id = rank.run.value;
    for (const TimelineBucket& bucket : store.timeline(rank.run, 1)) {
      memory.peak_allocated =
          std::max(memory.peak_allocated, static_cast<Bytes>(bucket.max.allocated));
      memory.peak_reserved =
          std::max(memory.peak_reserved, static_cast<Bytes>(bucket.max.reserved));
      memory.peak_active = std::max(memory.peak_active, static_cast<Bytes>(bucket.max.active));
    }
    memory.ooms = store.oom_reports(rank.run).size();
    memory.oom = run.status == RunStatus::oom || memory.ooms > 0;
    ranks.push_back(memory);
  }
  return analysis::balance_job(job.name, std::move(ranks));
}

}  // namespace fragscope::storage
