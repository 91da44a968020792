// fragscope-cli torch-run: an experiment as a real PyTorch training loop
// (experiments/torch_runner), its recording imported as a run, and its simulated twin — the same
// request stream through the allocator model — run, stored and linked to it.
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "cli/slurm_submit.h"
#include "engine/core/error.h"
#include "engine/snapshot/snapshot.h"
#include "engine/workload/experiment.h"
#include "storage/db/data_location.h"
#include "storage/db/experiment_status.h"
#include "storage/db/run_store.h"
#include "storage/db/snapshot_import.h"
#include "usecases/twin.h"

extern char** environ;

namespace fragscope::cli {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// The runner of this installation, found relative to the executable so no build machine's path is
// baked into the binary and the working directory never matters: CMake installs experiments/ (the
// runner with it) under PREFIX/share/fragscope/experiments beside PREFIX/bin, and a build tree
// links the same place (BUILD/share/fragscope/experiments) to its source tree's experiments/.
fs::path default_runner() {
  if (const char* env = std::getenv("FRAGSCOPE_TORCH_RUNNER"))
    return env;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec)
    throw InputError("/proc/self/exe: cannot locate this executable to find the torch runner (" +
                     ec.message() + "); give --runner PATH");
  return exe.parent_path().parent_path() /
         "share/fragscope/experiments/torch_runner/torch_runner.py";
}

// A file-name stem for a point: letters, digits, '-', '_' kept, everything else '_'.
std::string stem_of(const std::string& name) {
  std::string stem;
  for (char c : name)
    stem += (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_') ? c : '_';
  return stem.empty() ? "run" : stem;
}

void write_file(const fs::path& path, const json& value) {
  std::ofstream out(path);
  out << value.dump(1) << "\n";
  if (!out)
    throw InputError(path.string() + ": cannot write");
}

json read_json_file(const fs::path& path) {
  std::ifstream in(path);
  if (!in)
    throw InputError(path.string() + ": the torch runner wrote no such file");
  try {
    return json::parse(in);
  } catch (const json::parse_error& e) {
    throw InputError(path.string() + ": not valid JSON: " + e.what());
  }
}

// Runs the child with its stdout sent to our stderr (our stdout may be the --json output);
// returns its exit status.
int run_child(const std::vector<std::string>& command) {
  std::vector<char*> argv;
  for (const std::string& arg : command)
    argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, STDERR_FILENO, STDOUT_FILENO);
  pid_t pid = 0;
  const int spawned = posix_spawnp(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (spawned != 0)
    throw InputError("cannot start " + command[0] + ": " + std::strerror(spawned) +
                     " (give the Python that has PyTorch with --python PATH)");
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR)
      throw std::runtime_error(std::string("waitpid: ") + std::strerror(errno));
  }
  if (WIFSIGNALED(status))
    return 128 + WTERMSIG(status);
  return WEXITSTATUS(status);
}

std::int64_t stat_of(const json& stats, const char* key) {
  const json& memory = stats.at("memory_stats");
  return memory.contains(key) ? memory.at(key).get<std::int64_t>() : 0;
}

double relative_error(double simulated, double real) {
  return real == 0 ? 0.0 : (simulated - real) / real;
}

storage::Environment environment_of(const json& stats) {
  storage::Environment env = storage::Environment::current();
  const json e = stats.value("environment", json::object());
  env.torch_version = e.value("torch", stats.value("torch", std::string()));
  env.cuda_version = e.value("cuda", stats.value("cuda", std::string()));
  env.driver_version = e.value("driver", std::string());
  env.gpu_name = e.value("gpu_name", stats.value("device", std::string()));
  env.gpu_memory = e.value("gpu_memory", stats.value("total_memory", Bytes{0}));
  env.host = e.value("host", env.host);
  return env;
}

int run_torch_run(const std::vector<std::string>& argv) {
  std::set<std::string> flags = {"--stacks"};
  std::set<std::string> options = {"--variant", "--point", "--python", "--runner",
                                   "--out",     "--db",    "--json"};
  flags.insert(kSlurmFlags.begin(), kSlurmFlags.end());
  options.insert(kSlurmOptions.begin(), kSlurmOptions.end());
  const Args args(argv, flags, options);
  args.expect_positional(1, "one EXPERIMENT.json");
  const fs::path file = args.positional()[0];
  const workload::Experiment experiment = workload::load_experiment(file);
  std::vector<const workload::ExperimentPoint*> points =
      workload::select_points(experiment, args.option("--variant"), file.string());
  if (const auto index = args.uint_option("--point")) {
    if (args.option("--variant"))
      throw UsageError{"give --variant NAME or --point INDEX, not both"};
    if (*index >= experiment.points.size())
      throw UsageError{"--point " + std::to_string(*index) + ": the experiment has " +
                       std::to_string(experiment.points.size()) + " point(s)"};
    points = {&experiment.points[static_cast<std::size_t>(*index)]};
  }
  const std::optional<std::string> given_runner = args.option("--runner");
  const fs::path runner = fs::absolute(given_runner ? fs::path(*given_runner) : default_runner());
  if (!fs::exists(runner))
    throw InputError(runner.string() + ": no torch runner there (give --runner PATH)");
  const std::string python = args.option_or("--python", "python3");
  if (args.flag("--slurm")) {
    if (args.option("--variant") || args.option("--point"))
      throw UsageError{"--slurm runs every point, one array task each"};
    storage::SweepSpec spec;
    spec.kind = storage::SweepKind::torch;
    spec.name = experiment.name;
    for (const workload::ExperimentPoint* point : points)
      spec.points.push_back(point->name);
    spec.python = python;
    spec.runner = runner;
    spec.stacks = args.flag("--stacks");
    apply_slurm_options(args, spec);
    return submit_sweep(args, std::move(spec), experiment.definition);
  }
  reject_slurm_options(args);

  fs::path out_dir;
  if (auto out = args.option("--out")) {
    out_dir = *out;
  } else {
    std::string tmpl = (fs::temp_directory_path() / "fragscope-torch-run-XXXXXX").string();
    if (mkdtemp(tmpl.data()) == nullptr)
      throw InputError("cannot create a folder in " + fs::temp_directory_path().string());
    out_dir = tmpl;
  }
  fs::create_directories(out_dir);

  const std::string db_path = args.option_or("--db", storage::default_database_path());
  storage::RunStore store(db_path);
  // Created with the first finished run, so a run PyTorch refuses leaves nothing behind.
  std::optional<storage::ExperimentId> experiment_id;

  json runs = json::array();
  for (const workload::ExperimentPoint* point : points) {
    const std::string stem = stem_of(point->name);
    const fs::path config_file = out_dir / (stem + ".experiment.json");
    const fs::path shapes_file = out_dir / (stem + ".micro_batches.json");
    write_file(config_file, point->config);
    json shapes = json::array();
    for (const workload::MicroBatch& m : workload::micro_batches(point->workload.training))
      shapes.push_back({{"batch_size", m.batch_size}, {"seq_len", m.seq_len}});
    write_file(shapes_file, shapes);
    const Bytes limit = point->device.allowed != 0 ? point->device.allowed : point->device.capacity;

    std::vector<std::string> command = {python,
                                        runner.string(),
                                        config_file.string(),
                                        "--out",
                                        out_dir.string(),
                                        "--name",
                                        stem,
                                        "--capacity-bytes",
                                        std::to_string(limit),
                                        "--micro-batches",
                                        shapes_file.string()};
    if (args.flag("--stacks"))
      command.push_back("--stacks");
    std::cerr << "torch-run: " << point->name << ": running PyTorch...\n";
    const int status = run_child(command);
    if (status == 2)
      throw InputError(point->name + ": the torch runner refused the run (its message is above)");
    if (status != 0)
      throw std::runtime_error(point->name + ": the torch runner failed with exit status " +
                               std::to_string(status));

    const json stats = read_json_file(out_dir / (stem + ".stats.json"));
    const fs::path snapshot_file = out_dir / (stem + ".pickle");
    const Bytes gpu_total = stats.at("total_memory").get<Bytes>();
    if (!experiment_id)  // incomplete until every point's two runs are stored
      experiment_id = storage::begin_experiment(store, experiment.name + " (PyTorch)",
                                                experiment.definition, 2 * points.size());

    storage::ImportOptions import;
    import.name = point->name + " [PyTorch]";
    import.source_file = snapshot_file.string();
    import.experiment = experiment_id;
    import.source = storage::RunSource::torch;
    import.environment = environment_of(stats);
    const storage::ImportResult real =
        storage::import_snapshot(store, snapshot::read_snapshot_spooled(snapshot_file), import);

    const usecases::TwinRun twin =
        usecases::store_twin(store, real.run, experiment_id, *point, gpu_total, limit,
                             stats.value("device", std::string("GPU")));
    const bool sim_oom = !twin.result.ooms.empty();

    const auto real_allocated = stat_of(stats, "allocated_bytes.all.peak");
    const auto real_reserved = stat_of(stats, "reserved_bytes.all.peak");
    const std::string outcome = stats.value("outcome", std::string("ok"));
    json comparison = {
        {"real_peak_allocated", real_allocated},
        {"simulated_peak_allocated", twin.result.peak_allocated},
        {"peak_allocated_error", relative_error(static_cast<double>(twin.result.peak_allocated),
                                                static_cast<double>(real_allocated))},
        {"real_peak_reserved", real_reserved},
        {"simulated_peak_reserved", twin.result.peak_reserved},
        {"peak_reserved_error", relative_error(static_cast<double>(twin.result.peak_reserved),
                                               static_cast<double>(real_reserved))},
        {"real_segment_allocs", stat_of(stats, "num_device_alloc")},
        {"simulated_segment_allocs", twin.result.stats.num_device_alloc},
        {"real_outcome", outcome.rfind("oom", 0) == 0 ? "oom" : "ok"},
        {"simulated_outcome", sim_oom ? "oom" : "ok"},
    };
    json summary = store.run(real.run).summary;
    summary["comparison"] = comparison;
    summary["memory_stats"] = stats.at("memory_stats");
    summary["outcome"] = outcome;
    summary["steps"] = stats.value("steps", json::array());
    summary["environment"] = stats.value("environment", json::object());
    store.update_summary(real.run, summary);

    json entry = comparison;
    entry["point"] = point->name;
    entry["run_id"] = real.run.value;
    entry["twin_run_id"] = twin.run.value;
    entry["outcome"] = outcome;
    entry["wall_s"] = stats.value("wall_s", 0.0);
    entry["steps"] = stats.value("steps", json::array());
    entry["files"] = {{"snapshot", snapshot_file.string()},
                      {"stats", (out_dir / (stem + ".stats.json")).string()},
                      {"summary", (out_dir / (stem + ".summary.txt")).string()}};
    runs.push_back(std::move(entry));
  }
  if (experiment_id)
    storage::finish_experiment(store, *experiment_id);
  const json out = {{"experiment", experiment.name},
                    {"experiment_id", experiment_id->value},
                    {"db", db_path},
                    {"runs", runs}};
  if (auto target = args.option("--json")) {
    write_json(out, *target);
    return 0;
  }
  for (const auto& run : runs)
    std::cout << run["point"].get<std::string>() << ": " << run["real_outcome"].get<std::string>()
              << ", peak allocated real " << run["real_peak_allocated"] << " / model "
              << run["simulated_peak_allocated"] << ", peak reserved real "
              << run["real_peak_reserved"] << " / model " << run["simulated_peak_reserved"]
              << " (runs " << run["run_id"] << " and twin " << run["twin_run_id"] << ")\n";
  return 0;
}

}  // namespace

FRAGSCOPE_CLI_COMMAND({"torch-run",
                       "torch-run EXPERIMENT.json [--variant NAME | --point INDEX] [--python PATH] "
                       "[--runner PATH] [--out DIR] [--stacks] [--db FILE] [--json FILE|-]\n"
                       "  torch-run EXPERIMENT.json --slurm [--out DIR] [--partition P] "
                       "[--gpus-per-task N] [--time T] [--account A] [--dry-run]",
                       "Run an experiment as a real PyTorch training loop, import its snapshot "
                       "and link it to its simulated twin; --slurm submits one Slurm array task "
                       "per point (collect them with fragscope-cli collect DIR)",
                       run_torch_run});

}  // namespace fragscope::cli
