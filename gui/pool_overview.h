#pragma once
// Pools at the cursor (default vs each private pool: CUDA graphs, MemPool), for the segment map
// and the Summary page. The figures are engine/analysis/pool_usage's; this only turns the run's
// recorded segment pools and the loaded segment views into them, and into text.
#include <QString>

#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "engine/analysis/pool_usage.h"
#include "gui/segment_layout.h"

namespace fragscope::gui {

// `runSummary` is the run's stored summary (its "segment_pools", written at import).
std::vector<analysis::PoolUsage> poolsAt(const nlohmann::json& runSummary,
                                         const std::vector<SegmentView>& views);
// The pool of each view (parallel to `views`); empty when the run has no private pool, so the
// segment map marks only private-pool segments.
std::vector<MempoolId> segmentPools(const nlohmann::json& runSummary,
                                    const std::vector<SegmentView>& views);
// "private pool (1, 0) (CUDA graph)" for a segment's tooltip; empty for the default pools.
QString segmentPoolText(const MempoolId& pool);
// One line per pool; empty when the run has no private pool.
QString poolOverviewText(const std::vector<analysis::PoolUsage>& pools);

}  // namespace fragscope::gui
