#include "gui/post_mortem_data.h"

#include <QObject>
#include <algorithm>

#include "gui/format.h"
#include "gui/job_tracker.h"
#include "gui/run_data.h"
#include "usecases/post_mortem.h"

namespace fragscope::gui {

std::vector<const analysis::WhatIfRow*> PostMortemData::rowsThatFit() const {
  std::vector<const analysis::WhatIfRow*> rows;
  if (!whatIf)
    return rows;
  const analysis::WhatIfRow* baseline = whatIf->baseline();
  for (const analysis::WhatIfRow& row : whatIf->rows)
    if (row.ok && row.error.empty() && &row != baseline)
      rows.push_back(&row);
  return rows;
}

Bytes PostMortemData::shortfall() const {
  if (postMortems.empty())
    return 0;
  const analysis::OomPostMortem& oom = postMortems.front();
  if (oom.cause != analysis::OomCause::capacity || oom.capacity == 0)
    return 0;
  const Bytes needed = oom.allocated + oom.rounded;
  return needed > oom.capacity ? needed - oom.capacity : 0;
}

QString describeFailingRequest(const analysis::OomPostMortem& oom) {
  if (oom.requested == 0)
    return QObject::tr(
               "a request of %1 (the rounded size: the trace does not record the request "
               "itself); PyTorch tried to allocate %2")
        .arg(formatBytes(static_cast<double>(oom.rounded)),
             formatBytes(static_cast<double>(oom.segment_size)));
  if (oom.requested == oom.rounded)
    return QObject::tr("a request of %1").arg(formatBytes(static_cast<double>(oom.requested)));
  return QObject::tr("a request of %1 (rounded to %2)")
      .arg(formatBytes(static_cast<double>(oom.requested)),
           formatBytes(static_cast<double>(oom.rounded)));
}

PostMortemData loadPostMortem(const QString& databasePath, storage::RunId run,
                              bool whatIfForOomOnly, const JobContext* job) {
  const WorkControl control = job ? job->workControl() : WorkControl{};
  usecases::PostMortemOptions options;
  options.what_if_for_oom_only = whatIfForOomOnly;
  usecases::StoredPostMortem stored =
      usecases::post_mortem_of(*openReader(databasePath), run, options, control);
  PostMortemData data;
  data.record = std::move(stored.record);
  data.limit = stored.limit;
  data.allocatorRules = QString::fromStdString(stored.profile.describe());
  for (const std::string& note : stored.notes)
    data.notes << QString::fromStdString(note);
  data.postMortems = std::move(stored.post_mortems);
  data.whatIf = std::move(stored.what_if);
  data.whatIfError = QString::fromStdString(stored.what_if_error);
  data.metrics = std::move(stored.metrics);
  data.metricsError = QString::fromStdString(stored.metrics_error);
  data.categoriesAtOom = stored.categories_at_oom;
  data.workloadChanges = std::move(stored.workload_changes);
  return data;
}

storage::RunId runMitigation(const QString& databasePath, storage::RunId run,
                             const std::string& mitigation, const JobContext* job) {
  storage::RunStore store(databasePath.toStdString());
  return usecases::run_mitigation(store, run, mitigation, job ? job->workControl() : WorkControl{});
}

}  // namespace fragscope::gui
