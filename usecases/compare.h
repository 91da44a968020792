#pragma once
// Compare stored runs, once for both front-ends: every run is measured the same way (its events
// through analysis::measure_run with the layout rules of its allocator settings), then
// analysis::compare_runs lines the runs up. `fragscope-cli compare` prints the result and the
// GUI's Compare page shows it, so both give the same numbers for the same runs.
#include <cstddef>
#include <optional>
#include <span>
#include <vector>

#include "engine/analysis/compare.h"
#include "engine/core/cancel.h"
#include "engine/snapshot/segment_state.h"
#include "storage/db/run_store.h"

namespace fragscope::usecases {

inline constexpr std::size_t kDefaultComparePhases = 10;

// The rules that decide block sizes in a stored run: the recorded allocator_settings of an
// imported snapshot, else its allocator config. A config that does not parse is an InputError
// naming the run.
snapshot::LayoutRules layout_rules_of(const storage::RunRecord& record);

// What a comparison needs of one stored run. The metrics come from the run's events; where the
// events do not rebuild a layout (a truncated trace), the peaks come from the stored series and
// profile.series_only is set. `control` is polled before the events are read and measured.
analysis::RunProfile profile_of(storage::RunReader& reader, const storage::RunRecord& record,
                                std::size_t phases = kDefaultComparePhases,
                                const WorkControl& control = {});

struct StoredComparison {
  std::vector<storage::RunRecord> records;     // in the order asked for; the first is the baseline
  std::vector<analysis::RunProfile> profiles;  // one per record
  analysis::Comparison comparison;
};

// An unknown run id is an InputError naming it. Reports the stage "measuring" run by run.
StoredComparison compare_stored_runs(storage::RunStore& store, std::span<const storage::RunId> runs,
                                     std::size_t phases = kDefaultComparePhases,
                                     const WorkControl& control = {});

// Reserved bytes not allocated at the event where reserved peaked: both counters read at that one
// event (the difference of the two peaks mixes two moments). Unknown for a series-only profile.
std::optional<Bytes> reserved_unallocated_at_peak(const analysis::RunProfile& profile);

}  // namespace fragscope::usecases
