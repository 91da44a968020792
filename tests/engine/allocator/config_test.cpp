// AllocatorConfig::parse against PyTorch 2.11's rules and error texts (torch-allocator-spec §8,
// §1.3 tables, golden vector G9) and the snapshot allocator_settings bridge (§10.2).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>

#include "engine/allocator/config.h"
#include "engine/snapshot/snapshot.h"

namespace fragscope::alloc {
namespace {

using Table = std::array<std::uint64_t, kRoundupIntervals>;

// The exact error text parse() gives, or "" if it parses.
std::string parse_error(std::string_view text) {
  try {
    AllocatorConfig::parse(text);
  } catch (const AllocatorConfigError& error) {
    return error.what();
  }
  return "";
}

bool is_malformed(std::string_view text) {
  try {
    AllocatorConfig::parse(text);
  } catch (const MalformedAllocatorConfig&) {
    return true;
  } catch (const AllocatorConfigError&) {
    return false;
  }
  return false;
}

TEST(AllocatorConfigParse, EmptyStringGivesPyTorchDefaults) {
  const AllocatorConfig config = AllocatorConfig::parse("");
  EXPECT_EQ(config, AllocatorConfig{});
  EXPECT_EQ(config.max_split_size, kUnlimited);
  EXPECT_EQ(config.large_segment_size, 20 * kMiB);
  EXPECT_EQ(config.max_non_split_rounding_size, 20 * kMiB);
  EXPECT_EQ(config.roundup_power2_divisions, Table{});
  EXPECT_FALSE(config.expandable_segments);
  EXPECT_EQ(config.pinned_num_register_threads, 1u);
  EXPECT_FALSE(config.per_process_memory_fraction.has_value());
}

TEST(AllocatorConfigParse, WhitespaceIsDroppedEverywhere) {
  const AllocatorConfig config = AllocatorConfig::parse(" max_split_size_mb : 64 ");
  EXPECT_EQ(config.max_split_size, 64 * kMiB);
  EXPECT_EQ(config.raw, " max_split_size_mb : 64 ");
  EXPECT_EQ(AllocatorConfig::parse("expandable_segments:\tTr ue").expandable_segments, true);
}

TEST(AllocatorConfigParse, UnknownKey) {
  EXPECT_EQ(parse_error("foo:1"), "Unrecognized key 'foo' in CUDA allocator config.");
  EXPECT_EQ(parse_error("max_split_size_mb:100,foo:bar"),
            "Unrecognized key 'foo' in CUDA allocator config.");
  // The legacy spelling with '=' is one token with no value after it: the load-time scan trips
  // over it (abort), while a runtime settings change reports it as an unknown key.
  EXPECT_TRUE(is_malformed("max_split_size_mb=100"));
  AllocatorConfig config;
  try {
    config.apply("max_split_size_mb=100");
    FAIL() << "expected an error";
  } catch (const AllocatorConfigError& error) {
    EXPECT_STREQ(error.what(),
                 "Unrecognized key 'max_split_size_mb=100' in CUDA allocator config.");
  }
}

TEST(AllocatorConfigParse, MaxSplitSizeMustReachLargeSegmentSize) {
  EXPECT_EQ(parse_error("max_split_size_mb:19"),
            "CachingAllocator option max_split_size_mb too small, must be >= 20");
  EXPECT_EQ(AllocatorConfig::parse("max_split_size_mb:20").max_split_size, 20 * kMiB);
  EXPECT_EQ(AllocatorConfig::parse("max_split_size_mb:100").max_split_size, 100 * kMiB);
  // large_segment_size_mb is read first wherever it appears, and raises the bound.
  EXPECT_EQ(parse_error("max_split_size_mb:20,large_segment_size_mb:32"),
            "CachingAllocator option max_split_size_mb too small, must be >= 32");
  EXPECT_EQ(AllocatorConfig::parse("max_split_size_mb:32,large_segment_size_mb:32").max_split_size,
            32 * kMiB);
  // Values beyond SIZE_MAX / 1 MiB are capped there.
  EXPECT_EQ(AllocatorConfig::parse("max_split_size_mb:18446744073709551615").max_split_size,
            (kUnlimited / kMiB) * kMiB);
}

TEST(AllocatorConfigParse, LargeSegmentSize) {
  EXPECT_EQ(parse_error("large_segment_size_mb:10"),
            "CachingAllocator option large_segment_size_mb must be > 10 MB");
  const AllocatorConfig config = AllocatorConfig::parse("large_segment_size_mb:32");
  EXPECT_EQ(config.large_segment_size, 32 * kMiB);
  // max_non_split_rounding_size follows large_segment_size unless set.
  EXPECT_EQ(config.max_non_split_rounding_size, 32 * kMiB);
  EXPECT_EQ(AllocatorConfig::parse("large_segment_size_mb:11").large_segment_size, 11 * kMiB);
}

TEST(AllocatorConfigParse, MaxNonSplitRounding) {
  EXPECT_EQ(parse_error("max_non_split_rounding_mb:19"),
            "CachingAllocator option max_non_split_rounding_mb too small, must be >= 20");
  EXPECT_EQ(AllocatorConfig::parse("max_non_split_rounding_mb:64").max_non_split_rounding_size,
            64 * kMiB);
  EXPECT_EQ(parse_error("large_segment_size_mb:40,max_non_split_rounding_mb:30"),
            "CachingAllocator option max_non_split_rounding_mb too small, must be >= 40");
}

TEST(AllocatorConfigParse, GarbageCollectionThreshold) {
  const std::string invalid = "garbage_collect_threshold is invalid, set it in (0.0, 1.0)";
  EXPECT_EQ(parse_error("garbage_collection_threshold:1.0"), invalid);
  EXPECT_EQ(parse_error("garbage_collection_threshold:0"), invalid);
  EXPECT_EQ(parse_error("garbage_collection_threshold:-0.5"), invalid);
  EXPECT_EQ(parse_error("garbage_collection_threshold:nan"), invalid);
  EXPECT_DOUBLE_EQ(
      AllocatorConfig::parse("garbage_collection_threshold:0.9").garbage_collection_threshold, 0.9);
}

TEST(AllocatorConfigParse, Booleans) {
  EXPECT_EQ(parse_error("expandable_segments:true"),
            "Expected 'True' or 'False' at index 2 in ConfigTokenizer but got 'true'");
  EXPECT_EQ(parse_error("max_split_size_mb:100,expandable_segments:1"),
            "Expected 'True' or 'False' at index 6 in ConfigTokenizer but got '1'");
  EXPECT_EQ(parse_error("pinned_use_background_threads:yes"),
            "Expected 'True' or 'False' at index 2 in ConfigTokenizer but got 'yes'");
  const AllocatorConfig config = AllocatorConfig::parse(
      "expandable_segments:True,pinned_use_background_threads:True,release_lock_on_cudamalloc:"
      "True,pinned_use_cuda_host_register:True,graph_capture_record_stream_reuse:True");
  EXPECT_TRUE(config.expandable_segments);
  EXPECT_TRUE(config.pinned_use_background_threads);
  EXPECT_TRUE(config.release_lock_on_cudamalloc);
  EXPECT_TRUE(config.pinned_use_cuda_host_register);
  EXPECT_TRUE(config.graph_capture_record_stream_reuse);
  // ROCm spellings are accepted on CUDA builds too.
  EXPECT_TRUE(AllocatorConfig::parse("release_lock_on_hipmalloc:True").release_lock_on_cudamalloc);
  EXPECT_TRUE(
      AllocatorConfig::parse("pinned_use_hip_host_register:True").pinned_use_cuda_host_register);
  EXPECT_FALSE(AllocatorConfig::parse("expandable_segments:False").expandable_segments);
}

TEST(AllocatorConfigParse, RoundupSingleValueFillsEveryInterval) {
  Table fours;
  fours.fill(4);
  EXPECT_EQ(AllocatorConfig::parse("roundup_power2_divisions:4").roundup_power2_divisions, fours);
  EXPECT_EQ(parse_error("roundup_power2_divisions:3"),
            "For roundups, the divisions has to be power of 2 ");
  EXPECT_EQ(parse_error("roundup_power2_divisions:0"),
            "For roundups, the divisions has to be power of 2 ");
}

TEST(AllocatorConfigParse, RoundupListDocsExample) {
  // §1.3: indices 0..8 -> 1, 9 -> 2, 10 -> 4, 11..15 -> 8.
  const Table expected{1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 4, 8, 8, 8, 8, 8};
  EXPECT_EQ(AllocatorConfig::parse("roundup_power2_divisions:[256:1,512:2,1024:4,>:8]")
                .roundup_power2_divisions,
            expected);
}

TEST(AllocatorConfigParse, RoundupListSecondExample) {
  // §1.3: {1:8,...,128:8,256:16,512:1,1024:0,2048:8,4096:2,...,32768:2}.
  const Table expected{8, 8, 8, 8, 8, 8, 8, 8, 16, 1, 0, 8, 2, 2, 2, 2};
  EXPECT_EQ(AllocatorConfig::parse("roundup_power2_divisions:[128:8,256:16,512:1,2048:8,>:2]")
                .roundup_power2_divisions,
            expected);
}

TEST(AllocatorConfigParse, RoundupListEdges) {
  // `>` alone fills from index 1: nothing was listed, so index 0 keeps 0.
  EXPECT_EQ(AllocatorConfig::parse("roundup_power2_divisions:[>:4]").roundup_power2_divisions,
            (Table{0, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4}));
  // Intervals past 32 GiB clamp to the last index; the first entry also fills below it.
  EXPECT_EQ(AllocatorConfig::parse("roundup_power2_divisions:[65536:2]").roundup_power2_divisions,
            (Table{2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2}));
  // 0 disables an interval inside a list.
  EXPECT_EQ(
      AllocatorConfig::parse("roundup_power2_divisions:[1:4,2:0,4:4]").roundup_power2_divisions,
      (Table{4, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}));
  EXPECT_EQ(parse_error("roundup_power2_divisions:[256:3]"),
            "For roundups, the divisions has to be power of 2 or 0 to disable roundup ");
  EXPECT_EQ(parse_error("roundup_power2_divisions:[300:2]"),
            "For roundups, the intervals have to be power of 2 ");
  EXPECT_EQ(parse_error("roundup_power2_divisions:[0:2]"),
            "For roundups, the intervals have to be power of 2 ");
}

TEST(AllocatorConfigParse, EveryParseResetsThreeOptions) {
  AllocatorConfig config = AllocatorConfig::parse(
      "max_split_size_mb:100,roundup_power2_divisions:4,garbage_collection_threshold:0.5,"
      "expandable_segments:True,per_process_memory_fraction:0.5");
  config.apply("release_lock_on_cudamalloc:True");
  EXPECT_EQ(config.max_split_size, kUnlimited);
  EXPECT_EQ(config.roundup_power2_divisions, Table{});
  EXPECT_EQ(config.garbage_collection_threshold, 0.0);
  // The rest keeps its earlier value.
  EXPECT_TRUE(config.expandable_segments);
  EXPECT_EQ(config.per_process_memory_fraction, 0.5);
  EXPECT_TRUE(config.release_lock_on_cudamalloc);
  EXPECT_EQ(config.raw, "release_lock_on_cudamalloc:True");
}

TEST(AllocatorConfigParse, FailedApplyLeavesConfigUnchanged) {
  AllocatorConfig config = AllocatorConfig::parse("max_split_size_mb:100");
  const AllocatorConfig before = config;
  EXPECT_THROW(config.apply("expandable_segments:True,max_split_size_mb:5"), AllocatorConfigError);
  EXPECT_EQ(config, before);
}

TEST(AllocatorConfigParse, Backend) {
  EXPECT_EQ(parse_error("backend:foo"),
            "Unknown allocator backend, options are native and cudaMallocAsync");
  EXPECT_EQ(AllocatorConfig::parse("backend:native").backend, Backend::native);
  const AllocatorConfig async = AllocatorConfig::parse("backend:cudaMallocAsync");
  EXPECT_EQ(async.backend, Backend::cuda_malloc_async);
  EXPECT_EQ(async.warnings, "");
  // The load-time scan takes the first backend; a second, different one trips the runtime check.
  EXPECT_EQ(parse_error("backend:native,backend:cudaMallocAsync"),
            "Allocator backend parsed at runtime != allocator backend parsed at load time, "
            "cudaMallocAsync != native");
  // A runtime settings change cannot switch the backend.
  AllocatorConfig native;
  EXPECT_THROW(native.apply("backend:cudaMallocAsync"), AllocatorConfigError);
}

TEST(AllocatorConfigParse, AsyncBackendWarning) {
  const AllocatorConfig config =
      AllocatorConfig::parse("backend:cudaMallocAsync,release_lock_on_cudamalloc:True");
  EXPECT_EQ(config.warnings,
            "backend:cudaMallocAsync ignores max_split_size_mb,roundup_power2_divisions, and "
            "garbage_collect_threshold.");
}

TEST(AllocatorConfigParse, CudaSpecificValidation) {
  EXPECT_EQ(parse_error("per_process_memory_fraction:1.5"),
            "per_process_memory_fraction is invalid, set it in [0.0, 1.0]");
  EXPECT_EQ(AllocatorConfig::parse("per_process_memory_fraction:0.5").per_process_memory_fraction,
            0.5);
  EXPECT_EQ(parse_error("pinned_num_register_threads:3"),
            "Number of register threads has to be power of 2, got 3");
  EXPECT_EQ(parse_error("pinned_num_register_threads:256"),
            "Number of register threads should be less than or equal to 128, got 256");
  EXPECT_EQ(AllocatorConfig::parse("pinned_num_register_threads:128").pinned_num_register_threads,
            128u);
  EXPECT_EQ(parse_error("pinned_reserve_segment_size_mb:0"),
            "Pinned reserve segment size has to be greater than 0");
  EXPECT_EQ(
      AllocatorConfig::parse("pinned_reserve_segment_size_mb:64").pinned_reserve_segment_size_mb,
      64u);
}

TEST(AllocatorConfigParse, NumbersFollowStoullAndStod) {
  // Like std::stoull, trailing text after the digits is ignored.
  EXPECT_EQ(AllocatorConfig::parse("max_split_size_mb:100MB").max_split_size, 100 * kMiB);
  const std::string error = parse_error("max_split_size_mb:abc");
  EXPECT_NE(error.find("'max_split_size_mb' at index 2"), std::string::npos) << error;
  EXPECT_NE(error.find("got 'abc'"), std::string::npos) << error;
  EXPECT_FALSE(is_malformed("max_split_size_mb:abc"));
  EXPECT_NE(parse_error("garbage_collection_threshold:x").find("stod"), std::string::npos);
  EXPECT_NE(parse_error("max_split_size_mb:99999999999999999999").find("out_of_range"),
            std::string::npos);
}

TEST(AllocatorConfigParse, SeparatorsAreLocatedNotCompared) {
  // PyTorch's checkToken only bounds-checks the ':' and ',' positions.
  EXPECT_EQ(AllocatorConfig::parse("max_split_size_mb,100").max_split_size, 100 * kMiB);
  // A trailing comma is tolerated.
  EXPECT_EQ(AllocatorConfig::parse("max_split_size_mb:100,").max_split_size, 100 * kMiB);
}

TEST(AllocatorConfigParse, MalformedStringsAbortPyTorchAndAreReportedHere) {
  for (const char* text : {"max_split_size_mb:100,,", "max_split_size_mb:", "max_split_size_mb",
                           "roundup_power2_divisions:[256:1,>:2", ",", ":"}) {
    SCOPED_TRACE(text);
    EXPECT_TRUE(is_malformed(text));
    const std::string error = parse_error(text);
    EXPECT_NE(error.find("abort"), std::string::npos) << error;
    EXPECT_NE(error.find(text), std::string::npos) << error;
  }
  EXPECT_NE(parse_error("roundup_power2_divisions:[256:1").find("Expected closing bracket ']'"),
            std::string::npos);
  // Set at runtime there is no load-time scan: the walk meets ',' as a key.
  AllocatorConfig config;
  EXPECT_THROW(
      {
        try {
          config.apply("max_split_size_mb:100,,");
        } catch (const AllocatorConfigError& error) {
          EXPECT_STREQ(error.what(), "Unrecognized key ',' in CUDA allocator config.");
          throw;
        }
      },
      AllocatorConfigError);
  // A key without a value still trips the tokenizer's bounds assert.
  try {
    config.apply("max_split_size_mb:");
    FAIL() << "expected an error";
  } catch (const MalformedAllocatorConfig& error) {
    EXPECT_NE(std::string(error.what()).find("INTERNAL ASSERT"), std::string::npos);
  }
}

TEST(AllocatorConfigEnvironment, FirstSetVariableWins) {
  const auto from = [](std::map<std::string, std::string> env) {
    return config_from_environment([env](std::string_view name) -> std::optional<std::string> {
      const auto it = env.find(std::string(name));
      return it == env.end() ? std::nullopt : std::optional<std::string>(it->second);
    });
  };
  EXPECT_EQ(from({}), AllocatorConfig{});
  // The legacy name wins over the generic one (§8.1: 100 MiB, not 200).
  const AllocatorConfig both = from({{"PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:100"},
                                     {"PYTORCH_ALLOC_CONF", "max_split_size_mb:200"}});
  EXPECT_EQ(both.max_split_size, 100 * kMiB);
  EXPECT_EQ(both.raw, "max_split_size_mb:100");
  EXPECT_EQ(from({{"PYTORCH_ALLOC_CONF", "expandable_segments:True"}}),
            AllocatorConfig::parse("expandable_segments:True"));
  // On CUDA builds the HIP name reaches only the common reader; PYTORCH_ALLOC_CONF supplies the
  // CUDA-specific keys.
  const AllocatorConfig hip = from({{"PYTORCH_HIP_ALLOC_CONF", "max_split_size_mb:64"},
                                    {"PYTORCH_ALLOC_CONF", "release_lock_on_cudamalloc:True"}});
  EXPECT_EQ(hip.max_split_size, 64 * kMiB);
  EXPECT_TRUE(hip.release_lock_on_cudamalloc);
  EXPECT_EQ(hip.raw, "max_split_size_mb:64");
  EXPECT_THROW(from({{"PYTORCH_ALLOC_CONF", "foo:1"}}), AllocatorConfigError);
  EXPECT_THROW(from({{"PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:100,,"}}),
               MalformedAllocatorConfig);
}

TEST(AllocatorConfigCanonicalString, DefaultsGiveEmptyString) {
  EXPECT_EQ(to_alloc_conf_string(AllocatorConfig{}), "");
}

TEST(AllocatorConfigCanonicalString, DocsExampleIsItsOwnCanonicalForm) {
  const AllocatorConfig config =
      AllocatorConfig::parse("roundup_power2_divisions:[256:1,512:2,1024:4,>:8]");
  EXPECT_EQ(to_alloc_conf_string(config), "roundup_power2_divisions:[256:1,512:2,1024:4,>:8]");
  EXPECT_EQ(to_alloc_conf_string(AllocatorConfig::parse(" max_split_size_mb : 64 ")),
            "max_split_size_mb:64");
}

TEST(AllocatorConfigCanonicalString, ReparsesToTheSameConfig) {
  for (const char* text : {
           "max_split_size_mb:64,roundup_power2_divisions:4",
           "expandable_segments:True",
           "roundup_power2_divisions:[128:8,256:16,512:1,2048:8,>:2]",
           "roundup_power2_divisions:[>:4]",
           "roundup_power2_divisions:[1:4,2:0,4:4]",
           "roundup_power2_divisions:[1:2,16:0,>:8]",
           "roundup_power2_divisions:[64:4,128:2]",
           "large_segment_size_mb:32,max_split_size_mb:40,max_non_split_rounding_mb:64",
           "garbage_collection_threshold:0.123456789,per_process_memory_fraction:0.3",
           "backend:cudaMallocAsync,pinned_num_register_threads:8,"
           "pinned_reserve_segment_size_mb:16",
           "release_lock_on_cudamalloc:True,pinned_use_cuda_host_register:True,"
           "graph_capture_record_stream_reuse:True,pinned_use_background_threads:True",
           "max_split_size_mb:18446744073709551615",
       }) {
    SCOPED_TRACE(text);
    AllocatorConfig original = AllocatorConfig::parse(text);
    const std::string canonical = to_alloc_conf_string(original);
    AllocatorConfig reparsed = AllocatorConfig::parse(canonical);
    EXPECT_EQ(to_alloc_conf_string(reparsed), canonical);
    original.raw = reparsed.raw = "";
    original.warnings = reparsed.warnings = "";
    EXPECT_EQ(reparsed, original) << canonical;
  }
}

// Random key:value strings, some of them mutated: parse() either succeeds or throws
// AllocatorConfigError (never anything else), and whatever parses survives the canonical string.
TEST(AllocatorConfigParse, RandomStringsFailCleanlyOrRoundTrip) {
  static const std::vector<std::string> kKeys{"max_split_size_mb",
                                              "roundup_power2_divisions",
                                              "large_segment_size_mb",
                                              "expandable_segments",
                                              "garbage_collection_threshold",
                                              "max_non_split_rounding_mb",
                                              "per_process_memory_fraction",
                                              "pinned_num_register_threads",
                                              "backend",
                                              "foo"};
  static const std::vector<std::string> kValues{"True",   "False",
                                                "0",      "1",
                                                "2",      "4",
                                                "20",     "32",
                                                "64",     "256",
                                                "0.5",    "1.5",
                                                "-1",     "cudaMallocAsync",
                                                "native", "[256:1,512:2,>:8]",
                                                "[>:4]",  "[64:2,128:0]",
                                                "[3:2]",  "[1:"};
  static const std::vector<std::string> kNoise{",", ":", "[", "]", " ", ",,", "x"};
  std::mt19937 random(7);
  const auto pick = [&](const std::vector<std::string>& from) {
    return from[random() % from.size()];
  };
  int parsed = 0;
  for (int round = 0; round < 3000; ++round) {
    std::string text;
    const int pairs = 1 + static_cast<int>(random() % 3);
    // One draw per statement: the order in which operands of + or a call's arguments are
    // evaluated is unspecified, and GCC and clang differ, which made the strings
    // compiler-dependent.
    for (int i = 0; i < pairs; ++i) {
      const std::string key = pick(kKeys);
      const std::string value = pick(kValues);
      text += (i ? "," : "") + key + ":" + value;
    }
    if (random() % 3 == 0) {  // corrupt: insert noise somewhere
      const std::size_t at = random() % (text.size() + 1);
      text.insert(at, pick(kNoise));
    }
    if (random() % 5 == 0 && !text.empty())  // or cut a character out
      text.erase(random() % text.size(), 1);
    SCOPED_TRACE(text);
    try {
      AllocatorConfig config = AllocatorConfig::parse(text);
      const std::string canonical = to_alloc_conf_string(config);
      AllocatorConfig reparsed = AllocatorConfig::parse(canonical);
      config.raw = reparsed.raw = "";
      config.warnings = reparsed.warnings = "";
      EXPECT_EQ(reparsed, config) << canonical;
      if (!canonical.empty())
        ++parsed;
    } catch (const AllocatorConfigError&) {
    }
  }
  // The generator does reach non-default configs (92 of the 3000 strings with this seed).
  EXPECT_GT(parsed, 50);
}

TEST(AllocatorConfigCanonicalString, UnrepresentableConfigIsAnError) {
  AllocatorConfig config;
  config.max_split_size = 100 * kMiB + 1;
  EXPECT_THROW(to_alloc_conf_string(config), AllocatorConfigError);
  config = AllocatorConfig{};
  config.roundup_power2_divisions[3] = 3;
  EXPECT_THROW(to_alloc_conf_string(config), AllocatorConfigError);
}

// The allocator_settings dict of random_split64_round4.pickle.gz, as PyTorch 2.11 wrote it.
nlohmann::json split64_round4_settings() {
  return nlohmann::json::parse(R"({
    "PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:64,roundup_power2_divisions:4",
    "max_split_size": 67108864, "garbage_collection_threshold": 0.0,
    "expandable_segments": false, "pinned_num_register_threads": 1,
    "release_lock_on_cudamalloc": false, "pinned_use_cuda_host_register": false,
    "graph_capture_record_stream_reuse": false,
    "roundup_power2_divisions": {"1": 4, "2": 4, "4": 4, "8": 4, "16": 4, "32": 4, "64": 4,
      "128": 4, "256": 4, "512": 4, "1024": 4, "2048": 4, "4096": 4, "8192": 4, "16384": 4,
      "32768": 4}})");
}

TEST(AllocatorSettings, SnapshotDictGivesTheParsedConfig) {
  const AllocatorConfig config = config_from_allocator_settings(split64_round4_settings());
  EXPECT_EQ(config, AllocatorConfig::parse("max_split_size_mb:64,roundup_power2_divisions:4"));
}

TEST(AllocatorSettings, RecordedValuesOverrideTheRawString) {
  nlohmann::json settings = split64_round4_settings();
  settings["PYTORCH_CUDA_ALLOC_CONF"] = "";
  settings["max_split_size"] = -1;
  settings["expandable_segments"] = true;
  settings["roundup_power2_divisions"]["512"] = 2;
  const AllocatorConfig config = config_from_allocator_settings(settings);
  EXPECT_EQ(config.max_split_size, kUnlimited);
  EXPECT_TRUE(config.expandable_segments);
  EXPECT_EQ(config.roundup_power2_divisions,
            (Table{4, 4, 4, 4, 4, 4, 4, 4, 4, 2, 4, 4, 4, 4, 4, 4}));
}

TEST(AllocatorSettings, BadDictsNameTheKey) {
  const auto error_of = [](const nlohmann::json& settings) -> std::string {
    try {
      config_from_allocator_settings(settings);
    } catch (const AllocatorConfigError& error) {
      return error.what();
    }
    return "";
  };
  nlohmann::json mistyped = split64_round4_settings();
  mistyped["max_split_size"] = "64";
  EXPECT_NE(error_of(mistyped).find("'max_split_size' must be an integer"), std::string::npos);
  nlohmann::json bad_interval = split64_round4_settings();
  bad_interval["roundup_power2_divisions"]["32768"] = -2;
  EXPECT_NE(error_of(bad_interval).find("interval \"32768\""), std::string::npos);
  EXPECT_NE(error_of(nlohmann::json::array()).find("expected a dict"), std::string::npos);
}

// Each release recorded the keys it had: what is missing takes its default (the same in every
// release), unknown keys are ignored, and both are said.
TEST(AllocatorSettings, MissingKeysTakeTheirDefaultsAndAreNamed) {
  nlohmann::json settings = split64_round4_settings();
  settings.erase("graph_capture_record_stream_reuse");  // 2.3-2.8
  settings.erase("expandable_segments");
  settings["roundup_power2_divisions"].erase("32768");
  settings["throw_on_cudamalloc_oom"] = true;
  const RecordedAllocatorConfig read = read_allocator_settings(&settings);
  EXPECT_TRUE(read.recorded);
  EXPECT_EQ(read.defaulted_keys,
            (std::vector<std::string>{"expandable_segments", "graph_capture_record_stream_reuse"}));
  EXPECT_EQ(read.missing_keys, read.defaulted_keys);  // 2.11 had both
  EXPECT_EQ(read_allocator_settings(&settings, TorchVersion{2, 8}).missing_keys,
            std::vector<std::string>{"expandable_segments"});  // 2.8 had no graph_capture_...
  EXPECT_EQ(read.ignored_keys, std::vector<std::string>{"throw_on_cudamalloc_oom"});
  EXPECT_FALSE(read.config.expandable_segments);
  EXPECT_FALSE(read.config.graph_capture_record_stream_reuse);
  EXPECT_EQ(read.config.max_split_size, 64 * kMiB);
  EXPECT_EQ(read.config.roundup_power2_divisions[14], 4u);
  EXPECT_EQ(read.config.roundup_power2_divisions[15], 4u);  // from the raw string
  EXPECT_NE(read.note().find("graph_capture_record_stream_reuse"), std::string::npos);
  EXPECT_NE(read.note().find("throw_on_cudamalloc_oom"), std::string::npos);

  // Only the raw string (a dict some tool trimmed): everything else from it.
  const nlohmann::json raw_only = {{"PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True"}};
  EXPECT_TRUE(config_from_allocator_settings(raw_only).expandable_segments);
  // No raw string (20 real files lack it): the recorded values alone.
  nlohmann::json no_raw = split64_round4_settings();
  no_raw.erase("PYTORCH_CUDA_ALLOC_CONF");
  EXPECT_EQ(config_from_allocator_settings(no_raw).max_split_size, 64 * kMiB);
}

TEST(AllocatorSettings, AbsentSettingsAreUnknownAndAssumeTheDefaults) {
  const RecordedAllocatorConfig read = read_allocator_settings(nullptr);
  EXPECT_FALSE(read.recorded);
  EXPECT_EQ(read.config, AllocatorConfig{});
  EXPECT_NE(read.note().find("defaults are assumed"), std::string::npos);
}

TEST(AllocatorSettings, ARawStringOlderReleasesAcceptedIsNotFatal) {
  nlohmann::json settings = split64_round4_settings();
  settings["PYTORCH_CUDA_ALLOC_CONF"] = "max_split_size_mb:5";  // 2.11 refuses: too small
  const RecordedAllocatorConfig read = read_allocator_settings(&settings);
  EXPECT_NE(read.raw_string_error.find("too small"), std::string::npos);
  EXPECT_EQ(read.config.max_split_size, 64 * kMiB);  // the recorded effective value
  EXPECT_EQ(read.config.raw, "max_split_size_mb:5");
}

// Every real recording: its PYTORCH_CUDA_ALLOC_CONF parses to the max_split_size PyTorch
// reported in memory_stats() (-1 = unlimited).
TEST(AllocatorConfigFixtures, AllocConfMatchesRecordedMaxSplitSize) {
  int fixtures = 0;
  for (const auto& entry : std::filesystem::directory_iterator(FRAGSCOPE_FIXTURES)) {
    const std::string name = entry.path().filename().string();
    if (!name.ends_with(".stats.json"))
      continue;
    SCOPED_TRACE(name);
    std::ifstream in(entry.path());
    const nlohmann::json recording = nlohmann::json::parse(in);
    const AllocatorConfig config =
        AllocatorConfig::parse(recording.at("alloc_conf").get<std::string>());
    const std::int64_t recorded = recording.at("memory_stats").at("max_split_size");
    EXPECT_EQ(
        config.max_split_size == kUnlimited ? -1 : static_cast<std::int64_t>(config.max_split_size),
        recorded);
    ++fixtures;
  }
  EXPECT_EQ(fixtures, 8);
}

// The recordings run with a non-default PYTORCH_CUDA_ALLOC_CONF, plus one default: the
// allocator_settings PyTorch wrote into the snapshot give the same config as parsing the string
// the process ran with. (The other default-config pickles add nothing but seconds of reading.)
TEST(AllocatorConfigFixtures, SnapshotSettingsMatchTheProcessEnvironment) {
  for (const char* stem : {"random_split64_round4", "gpt_varlen_expandable", "gpt_oom_cap"}) {
    SCOPED_TRACE(stem);
    const std::filesystem::path fixtures(FRAGSCOPE_FIXTURES);
    std::ifstream in(fixtures / (std::string(stem) + ".stats.json"));
    const std::string alloc_conf = nlohmann::json::parse(in).at("alloc_conf");
    const snapshot::Snapshot recorded =
        snapshot::read_snapshot(fixtures / (std::string(stem) + ".pickle.gz"));
    const AllocatorConfig from_settings =
        config_from_allocator_settings(recorded.allocator_settings);
    EXPECT_EQ(from_settings, AllocatorConfig::parse(alloc_conf));
    EXPECT_EQ(from_settings.raw, alloc_conf);
  }
}

}  // namespace
}  // namespace fragscope::alloc
