#pragma once
// The stages import_snapshot and import_job report, in order, with their rough share of the
// time, for fraction_progress: a progress bar that only grows and reaches 1 once the run (or the
// job) is committed.
#include "engine/core/progress.h"

namespace fragscope::storage {

// import_snapshot: the events dominate; "commit" reports 1 of 1 once the run is stored.
inline constexpr ProgressStage kImportStages[] = {
    {"layout", 2}, {"stacks", 1}, {"events", 12}, {"ooms", 1}, {"commit", 2}};

// import_job, rank by rank.
inline constexpr ProgressStage kJobImportStages[] = {{"reading", 1}, {"storing", 1}};

}  // namespace fragscope::storage
