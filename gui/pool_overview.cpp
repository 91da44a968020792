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

std::vector<MempoolId> segmentPools(const nlohmann::json& runSummary,
                                    const std::vector<SegmentView>& views) {
  if (!runSummary.is_object() || !runSummary.contains("segment_pools"))
    return {};
  const analysis::PrivateSegments privateSegments =
      analysis::private_segments_from_json(runSummary.at("segment_pools"));
  if (privateSegments.empty())
    return {};
  std::vector<MempoolId> pools;
  pools.reserve(views.size());
  for (const SegmentView& view : views)
    pools.push_back(analysis::pool_of(privateSegments, view.segment.base, view.segment.size));
  return pools;
}

QString segmentPoolText(const MempoolId& pool) {
  if (pool.is_default())
    return {};
  return QStringLiteral("private pool (%1, %2) (%3)")
      .arg(pool.first)
      .arg(pool.second)
      .arg(QString::fromStdString(analysis::pool_kind(pool)));
}

QString poolOverviewText(const std::vector<analysis::PoolUsage>& pools) {
  return QString::fromStdString(analysis::describe_pools(pools)).trimmed();
}

}  // namespace fragscope::gui
