// The imbalance table of a multi-rank job: worst rank, ordering, JSON contract.
#include "engine/analysis/job_balance.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "engine/core/error.h"

namespace fragscope::analysis {
namespace {

RankMemory rank(int r, Bytes allocated, Bytes reserved, bool oom = false) {
  RankMemory m;
  m.rank = r;
  m.run_id = 100 + r;
  m.peak_allocated = allocated;
  m.peak_reserved = reserved;
  m.peak_active = allocated;
  m.oom = oom;
  m.ooms = oom ? 1 : 0;
  return m;
}

TEST(JobBalance, WorstRankIsTheHighestReservedPeakWhenNoneRanOut) {
  const JobBalance b = balance_job("j", {rank(2, 50, 90), rank(0, 60, 80), rank(1, 40, 100)});
  ASSERT_EQ(b.ranks.size(), 3u);
  EXPECT_EQ(b.ranks[0].rank, 0);  // ordered by rank
  EXPECT_EQ(b.ranks[2].rank, 2);
  EXPECT_EQ(b.worst_rank, 1);
  EXPECT_DOUBLE_EQ(b.reserved_imbalance, 100.0 / 90.0);
  EXPECT_DOUBLE_EQ(b.allocated_imbalance, 60.0 / 50.0);
}

TEST(JobBalance, ARankThatRanOutIsWorseThanOneThatReservedMore) {
  const JobBalance b = balance_job("j", {rank(0, 60, 200), rank(1, 90, 100, true)});
  EXPECT_EQ(b.worst_rank, 1);
}

TEST(JobBalance, TiesGoToTheHigherAllocatedPeakThenTheLowerRank) {
  EXPECT_EQ(balance_job("j", {rank(0, 10, 100), rank(1, 20, 100)}).worst_rank, 1);
  EXPECT_EQ(balance_job("j", {rank(1, 10, 100), rank(0, 10, 100)}).worst_rank, 0);
}

TEST(JobBalance, FragmentationIsTheShareOfTheReservedPeakNeverActiveAtOnce) {
  RankMemory m = rank(0, 75, 100);
  EXPECT_DOUBLE_EQ(m.fragmentation(), 0.25);
  m.peak_reserved = 0;
  EXPECT_DOUBLE_EQ(m.fragmentation(), 0.0);
}

TEST(JobBalance, JsonHasExactlyTheDocumentedKeys) {
  const nlohmann::json j = to_json(balance_job("train", {rank(0, 75, 100), rank(1, 80, 90, true)}));
  EXPECT_EQ(j.size(), 3u);
  EXPECT_EQ(j["job"], "train");
  EXPECT_EQ(j["worst_rank"], 1);
  ASSERT_EQ(j["ranks"].size(), 2u);
  const nlohmann::json& r0 = j["ranks"][0];
  EXPECT_EQ(r0.size(), 6u);
  EXPECT_EQ(r0["rank"], 0);
  EXPECT_EQ(r0["run_id"], 100);
  EXPECT_EQ(r0["peak_allocated"], 75);
  EXPECT_EQ(r0["peak_reserved"], 100);
  EXPECT_DOUBLE_EQ(r0["fragmentation"].get<double>(), 0.25);
  EXPECT_EQ(r0["oom"], false);
  EXPECT_EQ(j["ranks"][1]["oom"], true);
}

TEST(JobBalance, AnEmptyJobHasNoWorstRank) {
  const JobBalance b = balance_job("empty", {});
  EXPECT_FALSE(b.worst_rank);
  EXPECT_TRUE(to_json(b)["worst_rank"].is_null());
}

TEST(JobBalance, ARankGivenTwiceIsAnInputError) {
  EXPECT_THROW(balance_job("j", {rank(0, 1, 1), rank(0, 2, 2)}), InputError);
}

TEST(JobBalance, TextMarksTheWorstRank) {
  const std::string text = to_text(balance_job("j", {rank(0, 10, 20), rank(1, 10, 30)}));
  EXPECT_NE(text.find("* 1"), std::string::npos) << text;
  EXPECT_NE(text.find("worst rank"), std::string::npos) << text;
}

}  // namespace
}  // namespace fragscope::analysis
