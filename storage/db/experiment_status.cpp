#include "storage/db/experiment_status.h"

namespace fragscope::storage {

ExperimentId begin_experiment(RunStore& store, const std::string& name,
                              const nlohmann::json& definition, std::uint64_t expected_points) {
  Database& db = store.database();
  Transaction transaction(db);
  const ExperimentId id = store.create_experiment(name, definition);
  auto mark =
      db.prepare("UPDATE experiments SET status = 'incomplete', expected_points = ? WHERE id = ?");
  mark.bind_int(1, static_cast<std::int64_t>(expected_points)).bind_int(2, id.value);
  mark.run();
  transaction.commit();
  return id;
}

void finish_experiment(RunStore& store, ExperimentId experiment) {
  auto mark = store.database().prepare("UPDATE experiments SET status = 'complete' WHERE id = ?");
  mark.bind_int(1, experiment.value);
  mark.run();
}

std::map<ExperimentId, ExperimentProgress> experiment_progress(RunStore& store) {
  auto query = store.database().prepare(
      "SELECT e.id, e.status, e.expected_points, "
      "(SELECT count(*) FROM runs r WHERE r.experiment_id = e.id) FROM experiments e");
  std::map<ExperimentId, ExperimentProgress> all;
  while (query.step()) {
    ExperimentProgress progress;
    progress.complete = query.column_text(1) == "complete";
    progress.expected_points = static_cast<std::uint64_t>(query.column_int(2));
    progress.stored_points = static_cast<std::uint64_t>(query.column_int(3));
    all[ExperimentId{query.column_int(0)}] = progress;
  }
  return all;
}

std::string describe(const ExperimentProgress& progress) {
  if (progress.complete)
    return "complete";
  return "incomplete (" + std::to_string(progress.stored_points) + " of " +
         std::to_string(progress.expected_points) + " runs)";
}

}  // namespace fragscope::storage
