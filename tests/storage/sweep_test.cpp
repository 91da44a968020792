// Slurm sweep folders without a cluster: the batch script, and collect's bookkeeping (finished,
// waiting and failed tasks; nothing imported twice; the runs copied whole).
#include "storage/db/sweep.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "engine/core/error.h"
#include "engine/workload/experiment.h"
#include "engine/workload/runner.h"
#include "storage/db/simulated_run.h"
#include "storage/storage_test_util.h"

namespace fragscope::storage {
namespace {

namespace fs = std::filesystem;
const fs::path kExperiment = fs::path(FRAGSCOPE_SOURCE_DIR) / "tests/slurm/sweep-small.json";

SweepSpec spec_in(const fs::path& dir) {
  SweepSpec spec;
  spec.name = "small";
  spec.dir = dir;
  spec.points = {"a", "b", "c"};
  spec.cli = "/opt/fragscope/bin/fragscope-cli";
  spec.slurm.partition = "gpu";
  spec.slurm.time = "00:10:00";
  return spec;
}

void write(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream(path) << text;
}

// What a finished simulated task leaves: its own database with the point's run, result.json.
void finish_task(const fs::path& dir, int task, const workload::ExperimentPoint& point) {
  const fs::path out = dir / "tasks" / std::to_string(task);
  fs::create_directories(out);
  {
    RunStore store((out / "task.db").string());
    const ExperimentId experiment = store.create_experiment("task", {});
    store_simulated_run(store, experiment, point, workload::run_point(point, true));
  }
  write(out / "exit_status", "0\n");
  write(out / "result.json", "{}");
}

TEST(Sweep, BatchScriptIsAnArrayOfOneTaskPerPoint) {
  test::TempDir dir;
  SweepSpec spec = spec_in(dir.path() / "s");
  const std::string script = batch_script(spec);
  EXPECT_EQ(script.rfind("#!/bin/bash\n", 0), 0u);
  EXPECT_NE(script.find("#SBATCH --array=0-2\n"), std::string::npos) << script;
  EXPECT_NE(script.find("#SBATCH --partition=gpu\n"), std::string::npos);
  EXPECT_NE(script.find("#SBATCH --time=00:10:00\n"), std::string::npos);
  EXPECT_EQ(script.find("--gpus-per-task"), std::string::npos);  // simulated: no GPU
  EXPECT_EQ(script.find("--account"), std::string::npos);
  EXPECT_NE(script.find("--point \"$TASK\""), std::string::npos);
  EXPECT_NE(script.find("#   1: b\n"), std::string::npos);
  spec.kind = SweepKind::torch;
  spec.runner = "/r/torch_runner.py";
  spec.slurm.gpus_per_task = 2;
  const std::string torch = batch_script(spec);
  EXPECT_NE(torch.find("#SBATCH --gpus-per-task=2\n"), std::string::npos);
  EXPECT_NE(torch.find(" torch-run "), std::string::npos);
  EXPECT_NE(torch.find("'/r/torch_runner.py'"), std::string::npos);
}

TEST(Sweep, AFolderSlurmCannotNameIsRefused) {
  test::TempDir dir;
  SweepSpec spec = spec_in(dir.path() / "with blank");
  EXPECT_THROW(write_sweep(spec, {}), InputError);
  EXPECT_FALSE(fs::exists(dir.path() / "with blank"));
}

TEST(Sweep, WriteSweepLaysOutTheFolderAndRefusesASecondSweepThere) {
  test::TempDir dir;
  SweepSpec spec = spec_in(dir.path() / "s");
  const fs::path script = write_sweep(spec, {{"name", "small"}});
  EXPECT_TRUE(fs::exists(script));
  EXPECT_TRUE(fs::is_directory(dir.path() / "s/logs"));
  EXPECT_EQ(read_sweep(dir.path() / "s")["points"].size(), 3u);
  EXPECT_TRUE((fs::status(script).permissions() & fs::perms::owner_exec) != fs::perms::none);
  SweepSpec again = spec_in(dir.path() / "s");
  EXPECT_THROW(write_sweep(again, {}), InputError);
  EXPECT_THROW(read_sweep(dir.path()), InputError);
}

TEST(Sweep, CollectImportsFinishedTasksOnceAndReportsTheRest) {
  test::TempDir dir;
  const workload::Experiment experiment = workload::load_experiment(kExperiment);
  SweepSpec spec = spec_in(dir.path() / "s");
  spec.points = {experiment.points[0].name, experiment.points[1].name, "waits", "fails"};
  write_sweep(spec, experiment.definition);
  finish_task(spec.dir, 0, experiment.points[0]);
  write(spec.dir / "tasks/2/slurm", "77 80 node1\n");  // started, no result yet
  write(spec.dir / "tasks/3/slurm", "77 81 node1\n");
  write(spec.dir / "tasks/3/exit_status", "2\n");
  write(spec.dir / "logs/task-3.out", "line 1\nfragscope-cli run: error: bad point\n");

  std::vector<std::pair<std::string, int>> asked;
  const SlurmStateQuery slurm = [&](const std::string& job, int task) {
    asked.emplace_back(job, task);
    return task == 3 ? std::string("FAILED") : std::string("RUNNING");
  };
  RunStore store(":memory:");
  CollectReport first = collect_sweep(store, spec.dir, slurm, 1);
  EXPECT_EQ(first.count(TaskState::collected), 1u);
  EXPECT_EQ(first.count(TaskState::waiting), 2u);  // 1: not started, 2: running
  EXPECT_EQ(first.count(TaskState::failed), 1u);
  const TaskReport& failed = first.tasks[3];
  EXPECT_EQ(failed.slurm_state, "FAILED");
  EXPECT_EQ(failed.exit_status, 2);
  EXPECT_EQ(failed.log_tail, "fragscope-cli run: error: bad point\n");  // the last line only
  EXPECT_EQ(asked.back().first, "77");                                  // the job id the task wrote
  // One run of four: the experiment says so, in the database and in the report.
  EXPECT_EQ(describe(experiment_progress(store).at(*first.experiment)), "incomplete (1 of 4 runs)");
  EXPECT_FALSE(to_json(first)["experiment_complete"]);

  // The copied run equals the task's own, events and all.
  ASSERT_EQ(first.tasks[0].runs.size(), 1u);
  const RunRecord copied = store.run(first.tasks[0].runs[0]);
  RunStore task_db((spec.dir / "tasks/0/task.db").string());
  const RunRecord original = task_db.list_runs().front();
  EXPECT_EQ(copied.experiment, first.experiment);
  EXPECT_EQ(copied.event_count, original.event_count);
  EXPECT_EQ(copied.summary, original.summary);
  EXPECT_EQ(store.events(copied.id, 0, copied.event_count),
            task_db.events(original.id, 0, original.event_count));
  EXPECT_EQ(store.timeline(copied.id, 64), task_db.timeline(original.id, 64));
  EXPECT_EQ(store.labels(copied.id).size(), task_db.labels(original.id).size());

  // Task 1 finishes; a second collect imports it alone, into the same experiment.
  finish_task(spec.dir, 1, experiment.points[1]);
  const CollectReport second = collect_sweep(store, spec.dir, slurm);
  EXPECT_EQ(second.count(TaskState::collected), 1u);
  EXPECT_EQ(second.count(TaskState::already_collected), 1u);
  EXPECT_EQ(second.experiment, first.experiment);
  EXPECT_EQ(store.run_count(), 2);
  const CollectReport third = collect_sweep(store, spec.dir, slurm);
  EXPECT_EQ(third.count(TaskState::collected), 0u);
  EXPECT_EQ(store.run_count(), 2);
  EXPECT_EQ(to_json(third)["already_collected"], 2);
  EXPECT_FALSE(experiment_progress(store).at(*third.experiment).complete);  // 2 tasks never ran
}

TEST(Sweep, ExperimentIsCompleteOnceEveryTaskIsCollected) {
  test::TempDir dir;
  const workload::Experiment experiment = workload::load_experiment(kExperiment);
  SweepSpec spec = spec_in(dir.path() / "s");
  spec.points = {experiment.points[0].name, experiment.points[1].name};
  write_sweep(spec, experiment.definition);
  finish_task(spec.dir, 0, experiment.points[0]);
  RunStore store(":memory:");
  const CollectReport first = collect_sweep(store, spec.dir, {});
  ASSERT_TRUE(first.experiment);
  EXPECT_EQ(describe(first.progress), "incomplete (1 of 2 runs)");
  finish_task(spec.dir, 1, experiment.points[1]);
  const CollectReport second = collect_sweep(store, spec.dir, {});
  EXPECT_EQ(describe(second.progress), "complete");
  EXPECT_TRUE(experiment_progress(store).at(*second.experiment).complete);
  EXPECT_TRUE(to_json(second)["experiment_complete"]);
}

}  // namespace
}  // namespace fragscope::storage
