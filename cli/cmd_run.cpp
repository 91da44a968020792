// fragscope-cli run: simulates every variant and sweep point of an experiment file through the
// allocator model (points in parallel on a thread pool) and stores them as runs of one
// experiment. Output is deterministic: points are reported and stored in file order.
#include <algorithm>
#include <filesystem>
#include <iostream>
#include <optional>
#include <set>
#include <thread>

#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "cli/slurm_submit.h"
#include "engine/workload/experiment.h"
#include "engine/workload/hf_config.h"
#include "storage/db/data_location.h"
#include "storage/db/run_store.h"
#include "usecases/simulate.h"

namespace fragscope::cli {
namespace {

int run_experiment(const std::vector<std::string>& argv) {
  std::set<std::string> flags = {"--no-store"};
  std::set<std::string> option_names = {"--db",     "--json",           "--threads", "--hf-config",
                                        "--device", "--batch-size",     "--seq-len", "--steps",
                                        "--point",  "--max-points-held"};
  flags.insert(kSlurmFlags.begin(), kSlurmFlags.end());
  option_names.insert(kSlurmOptions.begin(), kSlurmOptions.end());
  const Args args(argv, flags, option_names);
  if (args.flag("--slurm") && args.option("--hf-config"))
    throw UsageError{
        "--slurm runs an experiment file (the tasks read a copy of it); write the "
        "--hf-config model into one first"};
  workload::Experiment experiment;
  if (const auto hf = args.option("--hf-config")) {
    // the model of a Hugging Face config.json: on its own, or in place of an experiment's model
    if (args.positional().size() > 1)
      throw UsageError{"run --hf-config FILE takes at most one EXPERIMENT.json"};
    if (args.positional().size() == 1) {
      for (const char* own : {"--device", "--batch-size", "--seq-len", "--steps"})
        if (args.option(own))
          throw UsageError{std::string(own) + " is given by the experiment file; set it there"};
      experiment = workload::experiment_with_hf_model(args.positional()[0], *hf);
    } else {
      workload::HfRunOptions options;
      options.device = args.option_or("--device", options.device);
      const auto bounded = [&](const char* name, int fallback) {
        const auto v = args.uint_option(name);
        if (v && (*v == 0 || *v > (1U << 20)))
          throw UsageError{std::string(name) + ": expected 1..1048576"};
        return v ? static_cast<int>(*v) : fallback;
      };
      options.batch_size = bounded("--batch-size", options.batch_size);
      options.seq_len = bounded("--seq-len", options.seq_len);
      options.steps = bounded("--steps", options.steps);
      experiment = workload::experiment_from_hf_config(*hf, options);
    }
  } else {
    args.expect_positional(1, "one EXPERIMENT.json file (or --hf-config FILE)");
    experiment = workload::load_experiment(args.positional()[0]);
  }
  if (args.flag("--slurm")) {
    if (args.option("--point") || args.flag("--no-store") || args.option("--max-points-held"))
      throw UsageError{
          "--slurm runs every point, one array task each; --point, --no-store and "
          "--max-points-held do not apply"};
    storage::SweepSpec spec;
    spec.kind = storage::SweepKind::simulated;
    spec.name = experiment.name;
    for (const workload::ExperimentPoint& point : experiment.points)
      spec.points.push_back(point.name);
    apply_slurm_options(args, spec);
    return submit_sweep(args, std::move(spec), experiment.definition);
  }
  reject_slurm_options(args);
  if (args.option("--out"))
    throw UsageError{"--out goes with --slurm"};
  if (const auto point = args.uint_option("--point")) {
    // One point by its index (a Slurm array task runs point $SLURM_ARRAY_TASK_ID).
    if (*point >= experiment.points.size())
      throw UsageError{"--point " + std::to_string(*point) + ": the experiment has " +
                       std::to_string(experiment.points.size()) + " point(s), 0.." +
                       std::to_string(experiment.points.size() - 1)};
    experiment.points = {experiment.points[static_cast<std::size_t>(*point)]};
  }

  unsigned threads = std::max(1U, std::thread::hardware_concurrency());
  if (const auto n = args.uint_option("--threads")) {
    if (*n == 0 || *n > 1024)
      throw UsageError{"--threads: expected 1..1024"};
    threads = static_cast<unsigned>(*n);
  }
  threads = std::min<unsigned>(threads, static_cast<unsigned>(experiment.points.size()));
  // Points held at once (running, or done and waiting for an earlier one to be stored), each with
  // its whole trace; 0: SimulateOptions' default, twice the threads.
  std::size_t held = 0;
  if (const auto n = args.uint_option("--max-points-held")) {
    if (*n == 0 || *n > 65536)
      throw UsageError{"--max-points-held: expected 1..65536"};
    held = static_cast<std::size_t>(*n);
  }

  std::unique_ptr<storage::RunStore> store;
  if (!args.flag("--no-store"))
    store = std::make_unique<storage::RunStore>(
        args.option_or("--db", storage::default_database_path()));
  usecases::SimulateOptions options;
  options.store = store.get();
  options.threads = threads;
  options.max_points_held = held;
  nlohmann::json runs = nlohmann::json::array();
  options.on_point = [&](std::size_t i, const workload::PointResult& result,
                         std::optional<storage::RunId> run) {
    nlohmann::json summary = workload::to_json(result);
    if (run)
      summary["run_id"] = run->value;
    std::cerr << "run: " << (i + 1) << "/" << experiment.points.size() << " "
              << experiment.points[i].name << ": " << (result.oom ? "oom" : "ok")
              << ", peak allocated " << result.peak_allocated << " B, peak reserved "
              << result.peak_reserved << " B\n";
    runs.push_back(std::move(summary));
  };
  const usecases::StoredExperiment stored =
      usecases::simulate_experiment(experiment, experiment.definition, options);
  nlohmann::json out = {{"experiment", experiment.name}, {"runs", runs}};
  if (store)
    out["experiment_id"] = stored.experiment.value;
  write_json(out, args.option_or("--json", "-"));
  return 0;
}

}  // namespace

FRAGSCOPE_CLI_COMMAND({"run",
                       "run EXPERIMENT.json | --hf-config CONFIG.json [EXPERIMENT.json] [--device "
                       "PRESET] [--batch-size N] [--seq-len N] [--steps N] [--db FILE] [--json "
                       "FILE|-] [--threads N] [--max-points-held N] [--no-store] [--point INDEX]\n"
                       "  run EXPERIMENT.json --slurm [--out DIR] [--partition P] [--account A] "
                       "[--time T] [--cpus-per-task N] [--dry-run] [--json FILE|-]",
                       "Simulate every variant and sweep point of an experiment (or a Hugging "
                       "Face config.json's model) and store the runs, in point order; --threads "
                       "(default: the cores) points run at once, and at most --max-points-held "
                       "(default: twice the threads) are held in memory, running or done and "
                       "waiting for an earlier point; --slurm submits one Slurm array task per "
                       "point instead (collect them with fragscope-cli collect DIR)",
                       run_experiment});

}  // namespace fragscope::cli
