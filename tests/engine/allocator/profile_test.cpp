// Release profiles (torch-allocator-spec §14): each difference between PyTorch releases that the
// profile carries changes what the parser, the model or the OOM text does under that release.
#include <gtest/gtest.h>

#include <string>

#include "engine/allocator/caching_allocator.h"
#include "engine/allocator/device.h"
#include "engine/allocator/profile.h"
#include "engine/allocator/sizes.h"
#include "engine/replay/replay.h"
#include "engine/snapshot/snapshot.h"

namespace fragscope::alloc {
namespace {

AllocatorProfile release(int minor) {
  return allocator_profile(TorchVersion{2, minor});
}

std::string parse_error(std::string_view text, int minor) {
  try {
    parse_alloc_conf(text, release(minor));
  } catch (const AllocatorConfigError& error) {
    return error.what();
  }
  return "";
}

TEST(AllocatorProfile, DefaultsAreTheNewestRelease) {
  EXPECT_EQ(allocator_profile(kLatestTorch), AllocatorProfile{});
  EXPECT_EQ(release(11).version, (TorchVersion{2, 11}));
  // Releases outside what the model knows take the nearest profile.
  EXPECT_EQ(allocator_profile(TorchVersion{2, 14}).version, kLatestTorch);
  EXPECT_EQ(allocator_profile(TorchVersion{1, 13}).version, kOldestTorch);
}

TEST(AllocatorProfile, OptionsExistFromTheirRelease) {
  EXPECT_EQ(parse_error("expandable_segments:True", 0),
            "Unrecognized CachingAllocator option: expandable_segments");
  EXPECT_EQ(parse_error("expandable_segments:True", 1), "");
  EXPECT_EQ(parse_error("max_non_split_rounding_mb:40", 5),
            "Unrecognized CachingAllocator option: max_non_split_rounding_mb");
  EXPECT_EQ(parse_error("max_non_split_rounding_mb:40", 6), "");
  EXPECT_EQ(parse_error("large_segment_size_mb:40", 8),
            "Unrecognized CachingAllocator option: large_segment_size_mb");
  EXPECT_EQ(parse_error("large_segment_size_mb:40", 9), "");
  EXPECT_EQ(parse_error("graph_capture_record_stream_reuse:True", 8),
            "Unrecognized CachingAllocator option: graph_capture_record_stream_reuse");
  // 2.9 moved to the shared config parser and its message.
  EXPECT_EQ(parse_error("foo:1", 9), "Unrecognized key 'foo' in CUDA allocator config.");
  EXPECT_EQ(parse_error("foo:1", 11), "Unrecognized key 'foo' in CUDA allocator config.");
  EXPECT_EQ(parse_error("foo:1", 3), "Unrecognized CachingAllocator option: foo");
}

TEST(AllocatorProfile, MaxSplitSizeBoundOf2_0) {
  EXPECT_EQ(parse_error("max_split_size_mb:20", 0),
            "CachingAllocator option max_split_size_mb too small, must be > 20");
  EXPECT_EQ(parse_alloc_conf("max_split_size_mb:21", release(0)).max_split_size, 21 * kMiB);
  EXPECT_EQ(parse_alloc_conf("max_split_size_mb:20", release(11)).max_split_size, 20 * kMiB);
}

TEST(AllocatorProfile, RoundupGreaterThanOverwroteTheLastListedIntervalUntil2_8) {
  const std::string text = "roundup_power2_divisions:[256:1,512:2,>:4]";
  const auto now = parse_alloc_conf(text, release(11)).roundup_power2_divisions;
  const auto then = parse_alloc_conf(text, release(5)).roundup_power2_divisions;
  EXPECT_EQ(now[8], 1u);   // 256 MiB
  EXPECT_EQ(now[9], 2u);   // 512 MiB keeps its value
  EXPECT_EQ(now[10], 4u);  // > fills from the next interval
  EXPECT_EQ(then[8], 1u);
  EXPECT_EQ(then[9], 4u);  // 2.1 .. 2.8: overwritten by `>`
  EXPECT_EQ(then[10], 4u);
  EXPECT_EQ(parse_alloc_conf(text, release(9)).roundup_power2_divisions, now);
}

// PyTorch 2.0's round_size (c10/cuda/CUDACachingAllocator.cpp at 2.0): the guard was
// `divisions > 0 && size > 512 * divisions`, and roundup_power2_next_division returned the size
// itself for one division, so roundup_power2_divisions:1 made blocks of the request's exact size.
TEST(AllocatorProfile, OneRoundupDivisionLeftTheSizeUnroundedIn2_0) {
  const AllocatorConfig config = AllocatorConfig::parse("roundup_power2_divisions:1");
  EXPECT_EQ(round_size(1000, config, release(0).one_division_leaves_size_unrounded), 1000u);
  EXPECT_EQ(round_size(1000, config, release(1).one_division_leaves_size_unrounded), 1024u);
  EXPECT_EQ(round_size(1000, config), 1024u);
  // At most 512 bytes: 512 either way; other division counts round as later releases do.
  EXPECT_EQ(round_size(300, config, true), 512u);
  const AllocatorConfig four = AllocatorConfig::parse("roundup_power2_divisions:4");
  EXPECT_EQ(round_size(1200, four, true), round_size(1200, four));

  for (const int minor : {0, 11}) {
    SimulatedDevice device(kUnlimited, 80 * kGiB);
    CachingAllocator allocator(config, device);
    allocator.set_profile(release(minor));
    const MallocResult first = allocator.malloc(1000, StreamId{0});
    const MallocResult second = allocator.malloc(1000, StreamId{0});
    ASSERT_TRUE(first.ok() && second.ok());
    // The second block starts right after the first: 1000 bytes under 2.0, 1024 later.
    EXPECT_EQ(second.address - first.address, minor == 0 ? 1000u : 1024u) << "2." << minor;
    std::string why;
    EXPECT_TRUE(allocator.is_valid(&why)) << why;
  }
}

TEST(AllocatorProfile, MemoryFractionOneKeepsALimitUntil2_10) {
  SimulatedDevice device(kUnlimited, 80 * kGiB);
  AllocatorConfig config;
  config.per_process_memory_fraction = 1.0;
  CachingAllocator newest(config, device);
  EXPECT_FALSE(newest.allowed_memory().has_value());
  CachingAllocator older(config, device);
  older.set_profile(release(10));
  EXPECT_EQ(older.allowed_memory(), 80 * kGiB);
  older.set_profile(release(11));
  EXPECT_FALSE(older.allowed_memory().has_value());
}

std::string oom_text(int minor) {
  SimulatedDevice device(64 * kMiB, 80 * kGiB);
  CachingAllocator allocator(AllocatorConfig{}, device);
  allocator.set_profile(release(minor));
  const MallocResult result = allocator.malloc(100 * kMiB, StreamId{0});
  EXPECT_FALSE(result.ok());
  return result.oom ? result.oom->message : std::string();
}

TEST(AllocatorProfile, OutOfMemoryTextOfEachRelease) {
  const std::string v2_0 = oom_text(0);
  EXPECT_TRUE(
      v2_0.starts_with("CUDA out of memory. Tried to allocate 100.00 MiB (GPU 0; 80.00 GiB "
                       "total capacity; 0 bytes already allocated;"))
      << v2_0;
  EXPECT_TRUE(
      v2_0.ends_with("reserved in total by PyTorch) If reserved memory is >> allocated "
                     "memory try setting max_split_size_mb to avoid fragmentation.  See "
                     "documentation for Memory Management and PYTORCH_CUDA_ALLOC_CONF"))
      << v2_0;
  const std::string v2_1 = oom_text(1);
  EXPECT_NE(v2_1.find("GPU 0 has a total capacty of 80.00 GiB"), std::string::npos) << v2_1;
  EXPECT_NE(v2_1.find("try setting max_split_size_mb"), std::string::npos) << v2_1;
  const std::string v2_5 = oom_text(5);
  EXPECT_NE(v2_5.find("total capacity of"), std::string::npos) << v2_5;
  EXPECT_TRUE(
      v2_5.ends_with(" (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"))
      << v2_5;
  const std::string v2_11 = oom_text(11);
  EXPECT_TRUE(
      v2_11.ends_with("(https://docs.pytorch.org/docs/stable/notes/"
                      "cuda.html#optimizing-memory-usage-with-pytorch-cuda-alloc-conf)"))
      << v2_11;
}

TEST(AllocatorProfile, ReplayFollowsTheSnapshotsRelease) {
  const snapshot::Snapshot snap = snapshot::read_snapshot(
      std::string(FRAGSCOPE_FIXTURES) + "/../snapshot-variants/v2_5_annotations.pickle");
  const replay::ReplayResult result = replay::replay_snapshot(snap);
  EXPECT_EQ(result.profile.version, snap.torch_version.profile());
  EXPECT_LT(result.profile.version, kLatestTorch);
  replay::ReplayOptions options;
  options.torch_version = kLatestTorch;  // "the same trace under 2.11's allocator"
  EXPECT_EQ(replay::replay_snapshot(snap, options).profile, AllocatorProfile{});
}

}  // namespace
}  // namespace fragscope::alloc
