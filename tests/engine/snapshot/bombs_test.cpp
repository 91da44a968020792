// Memory bombs (issue #18, "Memory expansion"): small pickles whose objects would expand to
// gigabytes. Each must end in an InputError that names the file and the limit, at once, never in
// std::bad_alloc or gigabytes of output. Before the limits these ran out of memory. A shared object
// is counted once per node before anything is expanded, so the error names the field the bomb
// hangs from, not the place deep inside it where the budget's worth of expansion ran out.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>

#include "engine/core/error.h"
#include "engine/snapshot/snapshot.h"

namespace fragscope::snapshot {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

std::string error_of(const std::string& bytes) {
  try {
    read_snapshot_from_memory(
        std::span(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size()),
        "bomb.pickle");
  } catch (const InputError& e) {
    return e.what();
  }
  return "no error";
}

std::string u32(std::uint32_t v) {
  std::string s(4, '\0');
  std::memcpy(s.data(), &v, 4);
  return s;
}

std::string u64(std::uint64_t v) {
  std::string s(8, '\0');
  std::memcpy(s.data(), &v, 8);
  return s;
}

std::string key(const std::string& k) {
  return "\x8c" + std::string(1, static_cast<char>(k.size())) + k;
}

// Level i is a list of 10 references to level i-1: 10 levels are 10^10 leaves in 550 bytes.
std::string laughs(int levels) {
  std::string p =
      "K\x01\x94"
      "0";  // memo 0 = 1
  for (int level = 0; level < levels; ++level) {
    p += "(";
    for (int i = 0; i < 10; ++i)
      p += "j" + u32(static_cast<std::uint32_t>(level));
    p += "l\x94"
         "0";
  }
  return p;
}

TEST(Bombs, SharedObjectsInAllocatorSettingsDoNotExpand) {
  // {'segments': [], 'allocator_settings': {'x': level 9}}
  std::string p = "\x80\x04" + laughs(10) + "}(" + key("segments") + "]" +
                  key("allocator_settings") + "}" + key("x") + "j" + u32(9) + "su.";
  EXPECT_THAT(error_of(p), AllOf(HasSubstr("bomb.pickle"),
                                 HasSubstr("allocator_settings: the pickle's shared objects "
                                           "expand to more than")));
}

TEST(Bombs, TheFuzzersBillionLaughsEndsAtOnce) {
  const auto path =
      std::filesystem::path(FRAGSCOPE_SHARED_FIXTURES) / "hostile" / "hang-info-548b.pickle";
  if (!std::filesystem::exists(path))
    GTEST_SKIP() << path << " is absent";
  try {
    read_snapshot(path);
    ADD_FAILURE() << "no error";
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), HasSubstr("hang-info-548b.pickle"));
  }
}

TEST(Bombs, SharedSegmentsAndBlocksDoNotMultiply) {
  // One block dict referenced 20000 times by one segment, the segment 20000 times: 4*10^8 blocks.
  std::string p = "\x80\x04}(" + key("segments") + "]\x94";  // memo 0 = segments list
  p += "(";
  const std::string zero("K\x00", 2);
  std::string block = "}\x94(" + key("size") + "K\x01" + key("state") + key("inactive") +
                      key("address") + zero + "u";  // memo 3
  std::string segment = "}\x94(" + key("address") + zero + key("total_size") + "K\x01" +
                        key("blocks") + "]\x94(" + block;  // memo 1 = segment, 2 = blocks
  for (int i = 1; i < 20000; ++i)
    segment += "j" + u32(3);
  segment += "eu";
  p += segment;
  for (int i = 1; i < 20000; ++i)
    p += "j" + u32(1);
  p += "eu.";
  EXPECT_THAT(error_of(p), AllOf(HasSubstr("bomb.pickle"),
                                 HasSubstr("segments: the pickle's shared objects expand to more "
                                           "than")));
}

TEST(Bombs, MemoGapsAreBoundedByTheInput) {
  // 50000 PUTs, each 60000 past the last: 3*10^9 memo slots from 350 KB.
  std::string p = "\x80\x04N";
  for (std::uint32_t i = 1; i <= 50000; ++i)
    p += "r" + u32(i * 60000u);
  p += ".";
  EXPECT_THAT(error_of(p), AllOf(HasSubstr("bomb.pickle"), HasSubstr("memo index"),
                                 HasSubstr("bytes read so far")));
  // MEMOIZE after a legitimate gap keeps growing by one slot per byte only.
  std::string memoize = "\x80\x04N" + std::string(200000, '\x94') + ".";
  EXPECT_THAT(error_of(memoize), HasSubstr("top-level object is a None"));
}

TEST(Bombs, HugeStringsAreRefusedBeforeTheyAreRead) {
  // BINUNICODE8 of 1 GiB (what a gzip'd 4 x 1 GiB file declares): refused at its header.
  std::string p = "\x80\x04\x8d" + u64(1ull << 30);
  EXPECT_THAT(error_of(p), AllOf(HasSubstr("bomb.pickle"), HasSubstr("exceeds the limit of")));
  std::string bytes = "\x80\x04\x8e" + u64(1ull << 30);
  EXPECT_THAT(error_of(bytes), HasSubstr("exceeds the limit of"));
}

TEST(Bombs, ManyDistinctStringsHitTheTotalLimit) {
  ReadLimits limits;
  limits.max_text_bytes = 1u << 20;
  std::string p = "\x80\x04(";
  for (int i = 0; i < 100; ++i) {
    std::string text(20000, 'a');
    text += std::to_string(i);
    p += "X" + u32(static_cast<std::uint32_t>(text.size())) + text;
  }
  p += "l.";
  try {
    read_snapshot_from_memory(std::span(reinterpret_cast<const std::uint8_t*>(p.data()), p.size()),
                              "bomb.pickle", limits);
    ADD_FAILURE() << "no error";
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), HasSubstr("distinct str/bytes objects exceed"));
  }
}

TEST(Bombs, TwoHundredThousandEmptyDeviceListsAreRefused) {
  // device_traces = [[], [], ...] 200000 times, 400 KB.
  std::string p = "\x80\x04}(" + key("segments") + "]" + key("device_traces") + "](";
  for (int i = 0; i < 200000; ++i)
    p += "]";
  p += "eu.";
  EXPECT_THAT(error_of(p),
              AllOf(HasSubstr("bomb.pickle"), HasSubstr("200000 device lists"), HasSubstr("1024")));
}

}  // namespace
}  // namespace fragscope::snapshot
