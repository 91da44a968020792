// Hostile and broken inputs: every one must be a clear InputError, never a crash, a hang or an
// executed opcode.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <zlib.h>

#include <fstream>
#include <random>

#include "engine/core/error.h"
#include "engine/snapshot/snapshot_test_util.h"

namespace fragscope::snapshot::test {
namespace {

std::string error_of(const std::string& bytes, const ReadLimits& limits = {}) {
  try {
    read_snapshot_from_memory(
        std::span(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size()), "evil.pickle",
        limits);
  } catch (const InputError& e) {
    return e.what();
  }
  return "no error";
}

std::string gunzip_fixture(const std::string& name) {
  gzFile f = gzopen(fixture_path(name).c_str(), "rb");
  std::string out;
  char buf[65536];
  int n;
  while ((n = gzread(f, buf, sizeof buf)) > 0)
    out.append(buf, static_cast<std::size_t>(n));
  gzclose(f);
  return out;
}

std::string file_bytes(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

using ::testing::HasSubstr;

TEST(Hostile, GlobalOsSystemIsRefusedByName) {
  // pickle.dumps of os.system("echo pwned") via __reduce__, protocol 0 style GLOBAL.
  std::string evil = std::string("\x80\x02") +
                     "cos\nsystem\nq\x00X\x0a\x00\x00\x00echo pwnedq\x01\x85q\x02Rq\x03.";
  std::string err = error_of(evil);
  EXPECT_THAT(err, HasSubstr("evil.pickle"));
  EXPECT_THAT(err, HasSubstr("refusing opcode GLOBAL"));
  EXPECT_THAT(err, HasSubstr("byte offset 2"));
}

TEST(Hostile, StackGlobalAndReduceAreRefused) {
  std::string stack_global = std::string("\x80\x04\x8c\x02os\x94\x8c\x06system\x94\x93\x94.", 20);
  EXPECT_THAT(error_of(stack_global), HasSubstr("STACK_GLOBAL"));
  std::string reduce = std::string("\x80\x04N)R.", 6);
  EXPECT_THAT(error_of(reduce), HasSubstr("refusing opcode REDUCE"));
  EXPECT_THAT(error_of(reduce), HasSubstr("byte offset 4"));
  for (char op : {'b', 'i', 'o', 'P', 'Q'})
    EXPECT_THAT(error_of(std::string("\x80\x04") + op + "."), HasSubstr("refusing opcode"));
  for (unsigned char op : {0x81, 0x82, 0x83, 0x84, 0x92, 0x97, 0x98})
    EXPECT_THAT(error_of(std::string("\x80\x04") + static_cast<char>(op) + "."),
                HasSubstr("refusing opcode"));
}

TEST(Hostile, NotAPickleAndBadProtocols) {
  EXPECT_THAT(error_of(""), HasSubstr("empty input"));
  EXPECT_THAT(error_of("hello"), HasSubstr("expected the PROTO opcode 0x80"));
  EXPECT_THAT(error_of("\x80\x09N."), HasSubstr("unsupported pickle protocol 9"));
  EXPECT_THAT(error_of(std::string("\x80\x04\xff.", 4)),
              HasSubstr("unsupported pickle opcode 0xff"));
}

TEST(Hostile, WrongSchemaNamesWhatWasExpected) {
  EXPECT_THAT(error_of("\x80\x04K\x05."), HasSubstr("top-level object is a int"));
  EXPECT_THAT(error_of("\x80\x04}."), HasSubstr("no 'segments' key"));
  // {'segments': [], 'device_traces': [[{'action': 'alloc', 'addr': 1}]]}
  std::string missing_size = std::string(
      "\x80\x04}(\x8c\x08segments]\x8c\x0d"
      "device_traces]]}(\x8c\x06"
      "action\x8c\x05"
      "alloc\x8c\x04"
      "addrK\x01u"
      "aau.");
  std::string err = error_of(missing_size);
  EXPECT_THAT(err, HasSubstr("missing key 'size'"));
  EXPECT_THAT(err, HasSubstr("byte offset"));
  std::string bad_action = std::string(
      "\x80\x04}(\x8c\x08segments]\x8c\x0d"
      "device_traces]]}(\x8c\x06"
      "action\x8c\x04"
      "boomu"
      "aau.");
  // An action of a newer release is not an allocator event: skipped and said, never fatal.
  const Snapshot skipped = read_snapshot_from_memory(
      std::span(reinterpret_cast<const std::uint8_t*>(bad_action.data()), bad_action.size()),
      "newer.pickle");
  EXPECT_TRUE(skipped.device_traces.at(0).empty());
  ASSERT_EQ(skipped.warnings.size(), 1u);
  EXPECT_THAT(skipped.warnings[0], HasSubstr("action 'boom'"));
  std::string segments_not_list = "\x80\x04}(\x8c\x08segmentsK\x01u.";
  EXPECT_THAT(error_of(segments_not_list), HasSubstr("'segments' must be a list"));
}

TEST(Hostile, ANonStringActionIsNamedWithItsPlace) {
  // {'segments': [], 'device_traces': [[{'action': 5}]]}: the message once said "found list".
  const std::string int_action = std::string(
      "\x80\x04}(\x8c\x08segments]\x8c\x0d"
      "device_traces]]}(\x8c\x06"
      "actionK\x05u"
      "aau.");
  std::string err = error_of(int_action);
  EXPECT_THAT(err,
              HasSubstr("device_traces[0][0]: 'action' must be a str (e.g. 'alloc'), found int"));
  EXPECT_THAT(err, ::testing::Not(HasSubstr("found list")));
  // A valid entry first, then one whose action is a float.
  const std::string float_action = std::string(
      "\x80\x04}(\x8c\x08segments]\x8c\x0d"
      "device_traces]]}(\x8c\x06"
      "action\x8c\x05"
      "alloc\x8c\x04"
      "addrK\x40\x8c\x04"
      "sizeK\x40u"
      "a}(\x8c\x06"
      "actionG\x3f\xf1\x11\x11\x11\x11\x11\x11u"  // no NUL byte: std::string(const char*)
      "aau.");
  err = error_of(float_action);
  EXPECT_THAT(err, HasSubstr("'action' must be a str (e.g. 'alloc'), found float"));
  // A dict without an action among plain items.
  const std::string no_action = std::string(
      "\x80\x04}(\x8c\x08segments]\x8c\x0d"
      "device_traces]]}(\x8c\x04"
      "addrK\x01u"
      "aau.");
  EXPECT_THAT(error_of(no_action),
              HasSubstr("device_traces[0][0]: a trace entry dict needs an 'action' key"));
}

TEST(Hostile, NestingMemoAndSizeBombsHitLimits) {
  std::string deep = "\x80\x04";
  for (int i = 0; i < 100000; ++i)
    deep += ']';
  for (int i = 0; i < 99999; ++i)
    deep += 'a';
  deep += '.';
  EXPECT_THAT(error_of(deep), HasSubstr("nested deeper than"));
  EXPECT_THAT(error_of(std::string("\x80\x04Nr\xff\xff\xff\x7f.", 8)), HasSubstr("memo index"));
  EXPECT_THAT(error_of(std::string("\x80\x04h\x05.", 4)), HasSubstr("never stored"));
  EXPECT_THAT(error_of(std::string("\x80\x04X\xff\xff\xff\xff", 7)),
              HasSubstr("exceeds the limit"));
  EXPECT_THAT(error_of(std::string("\x80\x04X\x00\x00\x01\x00"
                                   "abc",
                                   10)),
              HasSubstr("input ends inside a string"));
  // A self-referencing list: reading it as the segments list must not recurse forever.
  std::string cycle = std::string(
      "\x80\x04}(\x8c\x08segments]\x94h\x01"
      "au.",
      18);
  EXPECT_NE(error_of(cycle), "no error");
  ReadLimits tight;
  tight.max_stack = 100;
  std::string wide = "\x80\x04(";
  for (int i = 0; i < 200; ++i)
    wide += 'N';
  EXPECT_THAT(error_of(wide, tight), HasSubstr("stack exceeds the limit"));
}

TEST(Hostile, TruncatedInputsAtEveryKindOfBoundary) {
  std::string plain = gunzip_fixture("gpt_oom_cap");
  for (std::size_t cut : {std::size_t{1}, std::size_t{2}, std::size_t{3}, plain.size() / 3,
                          plain.size() / 2 + 7, plain.size() - 1}) {
    std::string err = error_of(plain.substr(0, cut));
    EXPECT_THAT(err, HasSubstr("evil.pickle: pickle byte offset")) << "cut at " << cut;
  }
  std::string gz = file_bytes(fixture_path("gpt_oom_cap"));
  EXPECT_THAT(error_of(gz.substr(0, gz.size() / 2)), HasSubstr("truncated gzip stream"));
  std::string corrupt = gz;
  for (std::size_t i = 100; i < 200; ++i)
    corrupt[i] = static_cast<char>(corrupt[i] ^ 0x5a);
  EXPECT_NE(error_of(corrupt), "no error");
}

TEST(Hostile, RandomBytesNeverCrash) {
  std::mt19937_64 rng(12345);
  std::string plain = gunzip_fixture("gpt_oom_cap");
  for (int round = 0; round < 300; ++round) {
    std::string bytes;
    if (round % 3 == 0) {
      bytes = "\x80\x04";
      std::size_t n = rng() % 400;
      for (std::size_t i = 0; i < n; ++i)
        bytes.push_back(static_cast<char>(rng()));
    } else {
      // A real snapshot with a few bytes flipped: deep inside valid structure.
      bytes = plain.substr(0, 20000 + rng() % 20000);
      for (int k = 0; k < 4; ++k)
        bytes[2 + rng() % (bytes.size() - 2)] = static_cast<char>(rng());
    }
    EXPECT_NE(error_of(bytes), "no error") << "round " << round;
  }
}

TEST(Hostile, MissingFileIsAClearError) {
  try {
    read_snapshot("/nonexistent/snap.pickle");
    FAIL() << "expected an InputError";
  } catch (const InputError& e) {
    EXPECT_THAT(std::string(e.what()), HasSubstr("/nonexistent/snap.pickle: cannot open"));
  }
}

TEST(Reader, PlainAndGzipGiveTheSameSnapshot) {
  std::string plain = gunzip_fixture("streams_default");
  Snapshot a = read_snapshot_from_memory(
      std::span(reinterpret_cast<const std::uint8_t*>(plain.data()), plain.size()), "plain");
  EXPECT_TRUE(a == fixture("streams_default"));
}

TEST(Reader, LegacyTwoZeroLayout) {
  // PyTorch 2.0: blocks have no address and carry `history`; traces have no time_us.
  auto path = temp_dir() / "legacy20.pickle";
  std::string command =
      "python3 -c \"import pickle; h=[{'addr':2**40,'real_size':5,'frames':[{'filename':'m.py',"
      "'line':7,'name':'g'}]}]; d={'segments':[{'device':0,'address':2**40,'total_size':2097152,"
      "'allocated_size':1048576,'active_size':1048576,'stream':0,'segment_type':'small',"
      "'blocks':[{'size':1048576,'requested_size':5,'state':'active_allocated','history':h},"
      "{'size':1048576,'requested_size':0,'state':'inactive','history':[]}]}],"
      "'device_traces':[[{'action':'segment_alloc','addr':2**40,'size':2097152,'stream':0},"
      "{'action':'alloc','addr':2**40,'size':5,'stream':0}]]}; "
      "pickle.dump(d, open('" +
      path.string() + "','wb'), protocol=2)\"";
  if (std::system(command.c_str()) != 0)
    GTEST_SKIP() << "python3 not available";
  Snapshot s = read_snapshot(path);
  EXPECT_EQ(s.format, SnapshotFormat::v2_0);
  EXPECT_EQ(s.pickle_protocol, 2);
  ASSERT_EQ(s.segments.size(), 1u);
  ASSERT_EQ(s.segments[0].blocks.size(), 2u);
  EXPECT_EQ(s.segments[0].blocks[1].address, (1ull << 40) + 1048576);
  EXPECT_EQ(s.frames.stack_frames(s.segments[0].blocks[0].frames).at(0).name, "g");
  ASSERT_EQ(s.device_traces.size(), 1u);
  EXPECT_EQ(s.device_traces[0][1].time_us, 0);
}

}  // namespace
}  // namespace fragscope::snapshot::test
