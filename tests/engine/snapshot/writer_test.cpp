#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

#include "engine/core/error.h"
#include "engine/snapshot/pickle_writer.h"
#include "engine/snapshot/snapshot_test_util.h"
#include "engine/snapshot/timeline.h"

namespace fragscope::snapshot::test {
namespace {

std::string run_command(const std::string& command, int& status) {
  std::string out;
  std::FILE* p = popen(command.c_str(), "r");
  if (p == nullptr) {
    status = -1;
    return out;
  }
  char buf[4096];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0)
    out.append(buf, n);
  status = pclose(p);
  return out;
}

bool have_python() {
  int status = 0;
  run_command("python3 -c 'import pickle' 2>/dev/null", status);
  return status == 0;
}

// Runs a Python `script` (saved as `name` in the temporary directory) on `pickle`: its output.
std::string run_python_on(const std::string& script, const std::string& name,
                          const std::filesystem::path& pickle, int& status) {
  { std::ofstream(temp_dir() / name) << script; }
  return run_command("python3 " + (temp_dir() / name).string() + " " + pickle.string(), status);
}

class WriterRoundTrip : public ::testing::TestWithParam<std::string> {};

TEST_P(WriterRoundTrip, ReadOfWriteIsIdentity) {
  const Snapshot& original = fixture(GetParam());
  std::string bytes = write_snapshot_pickle(original);
  ASSERT_EQ(static_cast<unsigned char>(bytes[0]), 0x80);
  ASSERT_EQ(bytes[1], 4);  // protocol 4, like _dump_snapshot
  Snapshot again = read_snapshot_from_memory(
      std::span(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size()), "written");
  EXPECT_TRUE(again == original);
  EXPECT_EQ(again.segments, original.segments);
  EXPECT_EQ(again.device_traces, original.device_traces);
  EXPECT_EQ(again.allocator_settings, original.allocator_settings);

  // PyTorch's layout of frames lists holds the same stacks.
  WriteOptions per_call;
  per_call.frames_lists = FramesLists::per_call;
  bytes = write_snapshot_pickle(original, per_call);
  again = read_snapshot_from_memory(
      std::span(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size()), "per_call");
  EXPECT_TRUE(again == original);
  EXPECT_EQ(again.device_traces, original.device_traces);
}

// Stacks, expandable segments, an OOM and two streams: every part of the format.
INSTANTIATE_TEST_SUITE_P(Fixtures, WriterRoundTrip,
                         ::testing::Values("gpt_varlen_default", "gpt_varlen_expandable",
                                           "gpt_oom_cap", "streams_default"));

TEST(Writer, GzipFileRoundTrips) {
  const Snapshot& original = fixture("gpt_oom_cap");
  auto path = temp_dir() / "written.pickle.gz";
  write_snapshot(original, path);
  EXPECT_TRUE(read_snapshot(path) == original);
  EXPECT_FALSE(std::filesystem::exists(path.string() + ".tmp"));
  EXPECT_THROW(write_snapshot(original, "/nonexistent-dir/x.pickle"), InputError);
}

// Python's own unpickler reads what we write and sees the same numbers.
TEST(Writer, PythonPickleLoadReadsIt) {
  if (!have_python())
    GTEST_SKIP() << "python3 not available";
  const Snapshot& original = fixture("gpt_varlen_default");
  auto path = temp_dir() / "for_python.pickle";
  write_snapshot(original, path);
  const std::string script =
      "import pickle,sys\n"
      "d=pickle.load(open(sys.argv[1],'rb'))\n"
      "t=d['device_traces'][0]\n"
      "print(len(d['segments']), len(t), sum(e['size'] for e in t),"
      " sum(b['size'] for s in d['segments'] for b in s['blocks']),"
      " t[0]['frames'][0]['name'], d['allocator_settings']['expandable_segments'],"
      " sum(1 for e in t if e['action']=='alloc'))\n";
  int status = 0;
  std::string out = run_python_on(script, "check.py", path, status);
  ASSERT_EQ(status, 0) << out;
  Bytes total = 0, blocks = 0, allocs = 0;
  for (const auto& e : original.device_traces[0]) {
    total += e.size;
    allocs += e.action == TraceAction::alloc;
  }
  for (const auto& s : original.segments)
    for (const auto& b : s.blocks)
      blocks += b.size;
  std::string expected = std::to_string(original.segments.size()) + " " +
                         std::to_string(original.device_traces[0].size()) + " " +
                         std::to_string(total) + " " + std::to_string(blocks) + " " +
                         original.frames.stack_frames(original.device_traces[0][0].frames)[0].name +
                         " False " + std::to_string(allocs) + "\n";
  EXPECT_EQ(out, expected);
}

// Which trace entries share one frames list object, as pickle.load sees them: per device, each
// entry with a non-empty list names the first entry holding that same object. The per_call
// layout must give what PyTorch gave for a recording made with the default settings (stacks and
// context "all", as users record): one list per allocator call.
std::string frames_list_sharing(const std::filesystem::path& pickle) {
  const std::string script =
      "import gzip,pickle,sys\n"
      "p=sys.argv[1]\n"
      "d=pickle.load(gzip.open(p) if p.endswith('.gz') else open(p,'rb'))\n"
      "for t in d['device_traces']:\n"
      "  first={}\n"
      "  print(' '.join(str(first.setdefault(id(e['frames']),i)) if e.get('frames') else '-'"
      " for i,e in enumerate(t)))\n";
  int status = 0;
  std::string out = run_python_on(script, "sharing.py", pickle, status);
  EXPECT_EQ(status, 0) << out;
  return out;
}

TEST(Writer, PerCallFramesListsAreSharedAsPyTorchSharesThem) {
  if (!have_python())
    GTEST_SKIP() << "python3 not available";
  // Recorded by fragscope-record with PyTorch's default history settings: an OOM, an
  // empty_cache's run of segment_free, frees and mallocs that free cached segments.
  const auto recorded = std::filesystem::path(FRAGSCOPE_SOURCE_DIR) /
                        "tests/fixtures/fragscope-record/oom_fraction.pickle.gz";
  const Snapshot original = read_snapshot(recorded);
  const std::string pytorch = frames_list_sharing(recorded);
  ASSERT_FALSE(pytorch.empty());

  WriteOptions per_call;
  per_call.frames_lists = FramesLists::per_call;
  const auto written = temp_dir() / "per_call.pickle";
  write_snapshot(original, written, per_call);
  EXPECT_EQ(frames_list_sharing(written), pytorch);
  EXPECT_TRUE(read_snapshot(written) == original);

  // The default layout shares one list per stack: not PyTorch's, and smaller.
  const auto compact = temp_dir() / "per_stack.pickle";
  write_snapshot(original, compact);
  EXPECT_NE(frames_list_sharing(compact), pytorch);
  EXPECT_LT(std::filesystem::file_size(compact), std::filesystem::file_size(written));
}

TEST(Writer, PythonWrittenPicklesOfEveryProtocolRead) {
  if (!have_python())
    GTEST_SKIP() << "python3 not available";
  for (int protocol : {2, 3, 4, 5}) {
    auto path = temp_dir() / ("proto" + std::to_string(protocol) + ".pickle");
    int status = 0;
    std::string out = run_command(
        "python3 -c \"import pickle; f=[{'filename':'a.py','line':3,'name':'f'}]; "
        "d={'segments':[{'device':0,'address':2**63+4096,'total_size':2097152,'stream':0,"
        "'segment_type':'small','segment_pool_id':(0,0),'is_expandable':False,'frames':[],"
        "'blocks':[{'address':2**63+4096,'size':2097152,'requested_size':5,'state':'inactive',"
        "'frames':f}]}],'device_traces':[[{'action':'segment_alloc','addr':2**63+4096,"
        "'size':2097152,'stream':0,'time_us':1,'frames':f},{'action':'oom','device_free':-0+2**40,"
        "'size':2**70//2**20,'stream':0,'time_us':2,'frames':f}]],'allocator_settings':{'x':1.5,"
        "'big':[True,None,'s'*300]},'external_annotations':[]}; "
        "pickle.dump(d, open('" +
            path.string() + "','wb'), protocol=" + std::to_string(protocol) + ")\"",
        status);
    ASSERT_EQ(status, 0) << out;
    Snapshot s = read_snapshot(path);
    EXPECT_EQ(s.pickle_protocol, protocol);
    ASSERT_EQ(s.segments.size(), 1u);
    EXPECT_EQ(s.segments[0].address, (1ull << 63) + 4096);
    ASSERT_EQ(s.device_traces.at(0).size(), 2u);
    EXPECT_EQ(s.device_traces[0][1].action, TraceAction::oom);
    EXPECT_EQ(s.device_traces[0][1].addr, 1ull << 40);
    EXPECT_EQ(s.device_traces[0][1].size, 1ull << 50);
    EXPECT_EQ(s.frames.stack_frames(s.device_traces[0][0].frames).at(0).filename, "a.py");
    EXPECT_EQ(s.segments[0].blocks[0].frames, s.device_traces[0][0].frames);
    EXPECT_EQ(s.allocator_settings["x"].get<double>(), 1.5);
    EXPECT_EQ(s.allocator_settings["big"][2].get<std::string>().size(), 300u);
  }
}

}  // namespace
}  // namespace fragscope::snapshot::test

namespace fragscope::snapshot::test {
namespace {

// The benchmark's generator writes a consistent snapshot: its replay lands on its segments.
TEST(Generator, LargeSnapshotGeneratorIsSelfConsistent) {
  if (!have_python())
    GTEST_SKIP() << "python3 not available";
  auto path = temp_dir() / "generated.pickle";
  int status = 0;
  std::string out = run_command("python3 " + std::string(FRAGSCOPE_SOURCE_DIR) +
                                    "/tests/snapshot_tools/gen_large_snapshot.py " + path.string() +
                                    " --entries 20000 --seed 3",
                                status);
  ASSERT_EQ(status, 0) << out;
  Snapshot s = read_snapshot(path);
  EXPECT_GE(s.device_traces.at(0).size(), 19990u);
  Timeline tl = build_timeline(s, 0);
  EXPECT_TRUE(tl.matches_final_segments) << tl.mismatch;
  EXPECT_FALSE(tl.truncated);
  EXPECT_GT(tl.peak.allocated, 0u);
}

}  // namespace
}  // namespace fragscope::snapshot::test
