#include "engine/core/trace.h"

#include <gtest/gtest.h>

#include "engine/core/hex.h"
#include "engine/core/request.h"
#include "engine/core/units.h"

namespace fragscope {
namespace {

using namespace literals;

TEST(TraceAction, NamesRoundTripForEveryAction) {
  for (int i = 0; i < kTraceActionCount; ++i) {
    const auto action = static_cast<TraceAction>(i);
    auto parsed = trace_action_from_string(to_string(action));
    ASSERT_TRUE(parsed.has_value()) << to_string(action);
    EXPECT_EQ(*parsed, action);
  }
  EXPECT_FALSE(trace_action_from_string("annotate").has_value());
  EXPECT_EQ(to_string(TraceAction::free_completed), "free_completed");
}

// 40 bytes an entry (a real 1.2M-entry trace is 48 MB of them; it was 57.6 MB with the action
// stored first), still made action first.
TEST(TraceEvent, IsFortyBytesAndMadeActionFirst) {
  EXPECT_EQ(sizeof(TraceEvent), 40u);
  const TraceEvent e{TraceAction::oom, 1, 2, StreamId{3}, 4, FrameStackId{5}};
  EXPECT_EQ(e.action, TraceAction::oom);
  EXPECT_EQ(e.addr, 1u);
  EXPECT_EQ(e.size, 2u);
  EXPECT_EQ(e.stream, StreamId{3});
  EXPECT_EQ(e.time_us, 4);
  EXPECT_EQ(e.frames, FrameStackId{5});
  EXPECT_EQ((TraceEvent{TraceAction::free_requested, 7}),
            (TraceEvent{TraceAction::free_requested, 7, 0, StreamId{0}, 0, FrameStackId{}}));
}

TEST(ByteLiterals, MatchPowersOfTwo) {
  EXPECT_EQ(20_MiB, 20971520u);
  EXPECT_EQ(512_B, 512u);
  EXPECT_EQ(2_GiB, 2147483648u);
}

TEST(Category, HasStableNames) {
  EXPECT_EQ(to_string(Category::optimizer_state), "optimizer_state");
  EXPECT_EQ(to_string(Category::activation), "activation");
}

TEST(HexAddress, IsLowerCaseHexWithThePrefix) {
  EXPECT_EQ(hex_address(0), "0x0");
  EXPECT_EQ(hex_address(0x7f00000a2c00), "0x7f00000a2c00");
  EXPECT_EQ(hex_address(~std::uint64_t{0}), "0xffffffffffffffff");
}

}  // namespace
}  // namespace fragscope
