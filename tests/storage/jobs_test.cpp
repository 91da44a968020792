// Multi-rank jobs: importing per-rank snapshots (manifest, directory, files) as runs linked to a
// job, and the imbalance table, against real 2-rank DDP recordings (gloo, one H200).
#include "storage/db/jobs.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "engine/core/error.h"
#include "storage/db/job_import.h"
#include "storage/db/recording_stats.h"
#include "storage/storage_test_util.h"

namespace fragscope::storage {
namespace {

namespace fs = std::filesystem;

const fs::path kDdp = fs::path(FRAGSCOPE_FIXTURES).parent_path() / "ddp-gloo-2.11-h200";
const fs::path kFixed = kDdp / "ddp_gloo_gpt_fixed";
const fs::path kImbalance = kDdp / "ddp_gloo_gpt_imbalance";

nlohmann::json stats_of(const fs::path& file) {
  std::ifstream in(file);
  return nlohmann::json::parse(in);
}

void write(const fs::path& path, const std::string& text) {
  std::ofstream(path) << text;
}

// fragscope-record's step end times reach the run's summary (the Jobs page aligns ranks by step
// with them); entries that are not times are dropped, not stored.
TEST(Jobs, RecordedStepEndTimesAreKeptInTheSummary) {
  nlohmann::json summary = nlohmann::json::object();
  add_recorded_stats(nlohmann::json::parse(R"({"step_ends_us": [1700000000000000, 1700000000500000,
                                                                  -3, "x", 1700000001000000]})"),
                     summary);
  EXPECT_EQ(summary["step_ends_us"],
            nlohmann::json::parse("[1700000000000000, 1700000000500000, 1700000001000000]"));
  nlohmann::json without = nlohmann::json::object();
  add_recorded_stats(nlohmann::json::parse(R"({"outcome": "ok"})"), without);
  EXPECT_FALSE(without.contains("step_ends_us"));
}

TEST(Jobs, ManifestImportLinksOneRunPerRankWithTheRecordedPeaks) {
  RunStore store(":memory:");
  const JobSource source = job_source_of({(kImbalance / kJobManifestName).string()});
  EXPECT_EQ(source.name, "ddp_gloo_gpt_imbalance");
  ASSERT_EQ(source.ranks.size(), 2u);
  JobImportOptions options;
  options.threads = 2;
  std::vector<std::string> stages;
  options.control.progress = Progress(
      [&](std::string_view stage, std::uint64_t, std::uint64_t) { stages.emplace_back(stage); });
  const JobImportResult result = import_job(store, source, options);
  EXPECT_EQ(stages.size(), 4u);  // two reads, two stores

  const JobRecord job = storage::job(store, result.job);
  EXPECT_EQ(job.name, "ddp_gloo_gpt_imbalance");
  EXPECT_EQ(job.world_size, 2);
  ASSERT_EQ(job.ranks.size(), 2u);
  EXPECT_EQ(store.run(job.ranks[1].run).name, "ddp_gloo_gpt_imbalance rank 1");
  EXPECT_EQ(job_of_run(store, job.ranks[1].run)->second, 1);

  const analysis::JobBalance balance = job_balance(store, job);
  ASSERT_EQ(balance.ranks.size(), 2u);
  for (int r = 0; r < 2; ++r) {
    const nlohmann::json stats =
        stats_of(kImbalance / ("ddp_gloo_gpt_imbalance_rank" + std::to_string(r) + ".stats.json"));
    const nlohmann::json& ms = stats["memory_stats"];
    EXPECT_EQ(balance.ranks[r].peak_allocated, ms["allocated_bytes.all.peak"].get<Bytes>());
    EXPECT_EQ(balance.ranks[r].peak_reserved, ms["reserved_bytes.all.peak"].get<Bytes>());
    const bool recorded_oom = stats["outcome"].get<std::string>().rfind("oom", 0) == 0;
    EXPECT_EQ(balance.ranks[r].oom, recorded_oom) << r;
    if (recorded_oom) {
      EXPECT_EQ(balance.worst_rank, r);  // the rank that ran out, though it is not rank 0
    }
  }
}

TEST(Jobs, DirectoryWithoutManifestTakesRanksFromFileNames) {
  test::TempDir dir;
  // rank 1 listed first by name order ("a_" < "b_"): the rank in the name decides.
  fs::copy_file(kFixed / "ddp_gloo_gpt_fixed_rank1.pickle.gz", dir.path() / "a_rank1.pickle.gz");
  fs::copy_file(kFixed / "ddp_gloo_gpt_fixed_rank0.pickle.gz", dir.path() / "b_rank0.pickle.gz");
  const JobSource source = job_source_of({dir.path().string()});
  ASSERT_EQ(source.ranks.size(), 2u);
  EXPECT_EQ(source.ranks[0].rank, 0);
  EXPECT_EQ(fs::path(source.ranks[0].snapshot).filename(), "b_rank0.pickle.gz");
  RunStore store(":memory:");
  EXPECT_THROW(import_job(store, source, {}), InputError);  // no name: neither manifest nor --job
  JobImportOptions options;
  options.job_name = "dir job";
  const JobImportResult result = import_job(store, source, options);
  EXPECT_EQ(storage::job(store, result.job).ranks.size(), 2u);
}

TEST(Jobs, FilesWithoutRanksInTheirNamesFollowTheGivenOrder) {
  const JobSource source = job_source_of(
      {(kDdp / "ddp_gloo_gpt_fixed" / "ddp_gloo_gpt_fixed_rank1.pickle.gz").string(),
       (kDdp / "ddp_gloo_gpt_fixed" / "ddp_gloo_gpt_fixed_rank0.pickle.gz").string()});
  EXPECT_EQ(source.ranks[0].rank, 0);  // named: by name
  test::TempDir dir;
  fs::copy_file(kFixed / "ddp_gloo_gpt_fixed_rank1.pickle.gz", dir.path() / "x.pickle.gz");
  fs::copy_file(kFixed / "ddp_gloo_gpt_fixed_rank0.pickle.gz", dir.path() / "y.pickle.gz");
  const JobSource ordered = job_source_of({dir.file("y.pickle.gz"), dir.file("x.pickle.gz")});
  EXPECT_EQ(fs::path(ordered.ranks[0].snapshot).filename(), "y.pickle.gz");
  EXPECT_EQ(ordered.ranks[1].rank, 1);
}

TEST(Jobs, MixedOrDuplicateRanksAreInputErrors) {
  test::TempDir dir;
  fs::copy_file(kFixed / "ddp_gloo_gpt_fixed_rank0.pickle.gz", dir.path() / "r_rank0.pickle.gz");
  fs::copy_file(kFixed / "ddp_gloo_gpt_fixed_rank1.pickle.gz", dir.path() / "other.pickle.gz");
  EXPECT_THROW(job_source_of({dir.file("r_rank0.pickle.gz"), dir.file("other.pickle.gz")}),
               InputError);
  EXPECT_THROW(job_source_of({dir.file("r_rank0.pickle.gz"), dir.file("r_rank0.pickle.gz")}),
               InputError);
}

TEST(Jobs, ABadManifestNamesTheFieldAndWritesNothing) {
  test::TempDir dir;
  write(dir.path() / "m.json",
        R"({"format": "fragscope-job/1", "job": "x", "ranks": [{"rank": 0}]})");
  try {
    job_source_of({dir.file("m.json")});
    FAIL() << "expected an InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("ranks[0]: missing \"snapshot\""), std::string::npos)
        << e.what();
  }
  write(dir.path() / "n.json", R"({"job": "x", "ranks": []})");
  EXPECT_THROW(job_source_of({dir.file("n.json")}), InputError);
  // A later format with unknown fields is read for what it holds; a missing snapshot file fails
  // before anything is written.
  write(dir.path() / "later.json",
        R"({"format": "fragscope-job/2", "job": "later", "world_size": 2, "launcher": "torchrun",
            "ranks": [{"rank": 0, "snapshot": ")" +
            (kFixed / "ddp_gloo_gpt_fixed_rank0.pickle.gz").string() +
            R"(", "extra": 1}, {"rank": 1, "snapshot": "missing_rank1.pickle"}]})");
  const JobSource later = job_source_of({dir.file("later.json")});
  EXPECT_EQ(later.world_size, 2);
  RunStore store(":memory:");
  EXPECT_THROW(import_job(store, later, {}), InputError);
  EXPECT_EQ(store.run_count(), 0);
  EXPECT_TRUE(list_jobs(store).empty());
}

// The manifest is a user's file: a FIFO blocked in open(), deep nesting overflowed the stack and
// 1e400 escaped as an internal error. Each is an InputError naming the manifest.
TEST(Jobs, HostileManifestsAreRefusedNamingTheFile) {
  test::TempDir dir;
  const auto error_of = [](const std::string& path) -> std::string {
    try {
      (void)read_job_manifest(path);
    } catch (const InputError& e) {
      return e.what();
    }
    return "(no error)";
  };
  const std::string fifo = dir.file("fragscope-job.json");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_NE(error_of(fifo).find("fragscope-job.json: the job manifest is a FIFO"),
            std::string::npos)
      << error_of(fifo);
  write(dir.path() / "deep.json", std::string(100000, '{') + std::string(100000, '}'));
  EXPECT_NE(
      error_of(dir.file("deep.json")).find("deep.json: line 1, column 65: JSON nested deeper"),
      std::string::npos)
      << error_of(dir.file("deep.json"));
  write(dir.path() / "huge.json", R"({"format": "fragscope-job/1", "world_size": 1e400})");
  EXPECT_NE(error_of(dir.file("huge.json")).find("the number 1e400 is out of range"),
            std::string::npos)
      << error_of(dir.file("huge.json"));
}

TEST(Jobs, AJobNameIsUniqueAndDeletingKeepsOrRemovesTheRuns) {
  RunStore store(":memory:");
  JobSource source = job_source_of({(kFixed / kJobManifestName).string()});
  const JobImportResult first = import_job(store, source, {});
  EXPECT_THROW(import_job(store, source, {}), InputError);
  EXPECT_EQ(store.run_count(), 2);  // the refused import wrote nothing
  delete_job(store, first.job, /*with_runs=*/false);
  EXPECT_EQ(store.run_count(), 2);
  EXPECT_TRUE(list_jobs(store).empty());
  const JobImportResult second = import_job(store, source, {});
  delete_job(store, second.job, /*with_runs=*/true);
  EXPECT_EQ(store.run_count(), 2);
}

TEST(Jobs, CancelledImportLeavesNothing) {
  RunStore store(":memory:");
  JobImportOptions options;
  options.control.cancel = CancelToken::make();
  options.control.cancel.cancel();
  EXPECT_THROW(import_job(store, job_source_of({(kFixed / kJobManifestName).string()}), options),
               Cancelled);
  EXPECT_EQ(store.run_count(), 0);
}

}  // namespace
}  // namespace fragscope::storage

namespace fragscope::storage {
namespace {

TEST(Jobs, WhatFileOpenTakesForAJobAndTheNameItGivesIt) {
  EXPECT_TRUE(looks_like_job({"a/fragscope-job.json"}));
  EXPECT_TRUE(looks_like_job({"t_rank0.pickle", "t_rank1.pickle"}));
  EXPECT_FALSE(looks_like_job({"t_rank0.pickle"}));
  EXPECT_FALSE(looks_like_job({"a.pickle", "b_rank1.pickle"}));
  RunStore store(":memory:");
  JobSource files = job_source_of({(kFixed / "ddp_gloo_gpt_fixed_rank0.pickle.gz").string(),
                                   (kFixed / "ddp_gloo_gpt_fixed_rank1.pickle.gz").string()});
  EXPECT_EQ(unused_job_name(store, files), "ddp_gloo_gpt_fixed");
  JobImportOptions options;
  options.job_name = unused_job_name(store, files);
  import_job(store, files, options);
  EXPECT_EQ(unused_job_name(store, files), "ddp_gloo_gpt_fixed (2)");
}

}  // namespace
}  // namespace fragscope::storage
