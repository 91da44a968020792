#include "gui/pool_overview.h"

#include <nlohmann/json.hpp>

namespace fragscope::gui {

std::vector<analysis::PoolUsage> poolsAt(const nlohmann::json& runSummary,
                                         const std::vector<SegmentView>& views) {
  const auto recorded =
      runSummary.is_object() ? runSummary.find("segment_pools") : runSummary.end();
  if (!runSummary.is_object() || recorded == runSummary.end())
    return {};
  const analysis::PrivateSegments privateSegments = analysis::private_segments_from_json(*recorded);
  std::vector<analysis::PoolSegment> segments;
  segments.reserve(views.size());
  for (const SegmentView& view : views)
    segments.push_back({view.segment.base, view.segment.size, view.liveBytes});
  return analysis::pool_usage(segments, privateSegments);
}

QString poolOverviewText(const std::vector<analysis::PoolUsage>& pools) {
  return QString::fromStdString(analysis::describe_pools(pools)).trimmed();
}

}  // namespace fragscope::gui
