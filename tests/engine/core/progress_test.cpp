#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "engine/core/progress.h"

namespace fragscope {
namespace {

constexpr ProgressStage kStages[] = {{"reading", 1}, {"storing", 3}};

TEST(FractionProgress, StagesMapOntoOneGrowingFractionThatReachesOne) {
  std::vector<double> seen;
  const Progress progress = fraction_progress(kStages, [&](double f) { seen.push_back(f); });
  progress.report("reading", 0, 4);
  progress.report("reading", 2, 4);
  progress.report("reading", 4, 4);
  progress.report("storing", 1, 2);
  progress.report("storing", 2, 2);
  EXPECT_EQ(seen, (std::vector<double>{0.0, 0.125, 0.25, 0.625, 1.0}));
}

TEST(FractionProgress, NeverGoesBackAndIgnoresUnknownStages) {
  std::vector<double> seen;
  const Progress progress = fraction_progress(kStages, [&](double f) { seen.push_back(f); });
  progress.report("storing", 1, 2);
  progress.report("reading", 4, 4);  // an earlier stage: behind what was shown
  progress.report("storing", 1, 2);  // no news
  progress.report("sorting", 5, 5);  // not a stage of this work
  progress.report("storing", 3, 2);  // past the total: capped at the stage's end
  EXPECT_EQ(seen, (std::vector<double>{0.625, 1.0}));
}

TEST(FractionProgress, ReportsFromSeveralThreadsStayMonotonic) {
  std::vector<double> seen;
  const Progress progress = fraction_progress(kStages, [&](double f) { seen.push_back(f); });
  {
    std::vector<std::jthread> workers;
    for (int t = 0; t < 4; ++t)
      workers.emplace_back([&, t] {
        for (std::uint64_t i = 0; i <= 1000; ++i)
          progress.report("storing", (i * 4 + static_cast<std::uint64_t>(t)) / 4, 1000);
      });
  }
  ASSERT_FALSE(seen.empty());
  for (std::size_t i = 1; i < seen.size(); ++i)
    EXPECT_LT(seen[i - 1], seen[i]);
  EXPECT_EQ(seen.back(), 1.0);
}

}  // namespace
}  // namespace fragscope
