// The post-mortem of a stored run (the GUI's Post-mortem page, `fragscope-cli post-mortem`) runs
// no more what-if rows at once than analysis::what_if_memory_budget of the trace it loaded holds:
// each row's run in flight holds its own table of the trace's tensors, so on a many-core machine
// the rows would otherwise hold more than the trace itself.
#include <gtest/gtest.h>

#include <string>

#include "engine/allocator/run.h"
#include "engine/analysis/trace_requests.h"
#include "storage/db/snapshot_import.h"
#include "storage/db/stats_at.h"
#include "tests/heap_test_util.h"
#include "usecases/post_mortem.h"

namespace fragscope::usecases {
namespace {

const std::string kFixtures = FRAGSCOPE_FIXTURES;

struct Measured {
  StoredPostMortem post_mortem;
  std::size_t grown = 0;  // the most the heap grew by while it ran
  bool measurable = false;
};

Measured post_mortem_on(storage::RunStore& store, storage::RunId run, unsigned threads) {
  fragscope::test::HeapPeak heap;
  WorkControl control;
  control.progress =
      Progress([&heap](std::string_view, std::uint64_t, std::uint64_t) { heap.sample(); });
  PostMortemOptions options;
  options.threads = threads;
  Measured measured;
  measured.post_mortem = post_mortem_of(store, run, options, control);
  measured.grown = heap.grown();
  measured.measurable = heap.measurable();
  return measured;
}

// gpt_oom_cap's rows on 16 threads: the same table as on one, and the heap no larger than on as
// many threads as the budget (a fifth of the loaded events and requests) holds runs of its state,
// two here. Unbounded, its 12 rows ran at once: 7.8 MB against 3.4 MB on two threads.
TEST(PostMortemMemory, TheWhatIfRowsInFlightHoldNoMoreThanTheBudget) {
  storage::RunStore store(":memory:");
  storage::ImportOptions import;
  import.name = "gpt_oom_cap";
  const storage::RunId run =
      storage::import_snapshot(store, snapshot::read_snapshot(kFixtures + "/gpt_oom_cap.pickle.gz"),
                               import)
          .run;

  const storage::RunTrace trace = storage::load_run_trace(store, run);
  const analysis::TraceRequests requests =
      analysis::requests_from_trace(trace.events, trace.initial);
  const std::size_t budget =
      analysis::what_if_memory_budget(trace.events.size() * sizeof(TraceEvent) +
                                      requests.requests.requests.size() * sizeof(Request));
  const std::size_t run_bytes = alloc::run_state_bytes(requests.requests);
  const std::size_t runs_held = budget / run_bytes;
  // The budget caps the rows: it holds a run, and far fewer than the rows.
  ASSERT_GE(runs_held, 1U);
  ASSERT_LE(runs_held, 3U) << budget << " bytes, " << run_bytes << " a run";

  post_mortem_on(store, run, 1);  // the store's pages read once, outside the measurements
  const Measured one = post_mortem_on(store, run, 1);
  const Measured held = post_mortem_on(store, run, static_cast<unsigned>(runs_held));
  const Measured sixteen = post_mortem_on(store, run, 16);
  ASSERT_TRUE(one.post_mortem.what_if.has_value()) << one.post_mortem.what_if_error;
  ASSERT_TRUE(sixteen.post_mortem.what_if.has_value()) << sixteen.post_mortem.what_if_error;
  EXPECT_GE(one.post_mortem.what_if->rows.size(), 8U);
  EXPECT_EQ(analysis::to_json(*sixteen.post_mortem.what_if).dump(),
            analysis::to_json(*one.post_mortem.what_if).dump());
  if (one.measurable && sixteen.measurable) {
    EXPECT_LE(sixteen.grown, held.grown + run_bytes)
        << "one thread " << one.grown << " bytes, " << runs_held << " threads " << held.grown
        << " bytes, a run's table " << run_bytes << " bytes";
  }
}

}  // namespace
}  // namespace fragscope::usecases
