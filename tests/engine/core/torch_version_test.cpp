#include "engine/core/torch_version.h"
#include "engine/core/cancel.h"

#include <gtest/gtest.h>

namespace fragscope {
namespace {

TEST(TorchVersion, ParsesReleaseAndBuildStrings) {
  EXPECT_EQ(TorchVersion::parse("2.5"), (TorchVersion{2, 5}));
  EXPECT_EQ(TorchVersion::parse("2.5.1"), (TorchVersion{2, 5}));
  EXPECT_EQ(TorchVersion::parse("2.11.0+cu130"), (TorchVersion{2, 11}));
  EXPECT_EQ(TorchVersion::parse("2.6.0a0+git1234"), (TorchVersion{2, 6}));
  EXPECT_FALSE(TorchVersion::parse("2"));
  EXPECT_FALSE(TorchVersion::parse("two.five"));
  EXPECT_FALSE(TorchVersion::parse("2.x"));
  EXPECT_FALSE(TorchVersion::parse(""));
}

TEST(TorchVersion, OrdersByMinorNumerically) {
  EXPECT_LT((TorchVersion{2, 9}), (TorchVersion{2, 10}));
  EXPECT_EQ((TorchVersion{2, 10}).to_string(), "2.10");
  const auto versions = known_torch_versions();
  ASSERT_EQ(versions.size(), 12u);
  EXPECT_EQ(versions.front(), kOldestTorch);
  EXPECT_EQ(versions.back(), kLatestTorch);
}

TEST(CancelToken, CopiesShareOneFlag) {
  const CancelToken none;
  EXPECT_FALSE(none.cancelled());
  none.cancel();  // a default token cannot be cancelled
  EXPECT_NO_THROW(none.throw_if_cancelled());

  const auto token = CancelToken::make();
  const CancelToken copy = token;
  EXPECT_FALSE(copy.cancelled());
  token.cancel();
  EXPECT_TRUE(copy.cancelled());
  EXPECT_THROW(copy.throw_if_cancelled(), Cancelled);
}

TEST(Progress, ForwardsToItsCallback) {
  std::uint64_t seen = 0;
  const Progress progress([&](std::string_view stage, std::uint64_t done, std::uint64_t total) {
    EXPECT_EQ(stage, "reading");
    EXPECT_EQ(total, 10u);
    seen = done;
  });
  progress.report("reading", 7, 10);
  EXPECT_EQ(seen, 7u);
  Progress{}.report("ignored", 1, 1);  // an empty Progress reports nowhere
}

}  // namespace
}  // namespace fragscope
