#include "cli/slurm_submit.h"

#include <chrono>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>

#include <nlohmann/json.hpp>

#include "storage/db/slurm.h"

namespace fragscope::cli {
namespace {

namespace fs = std::filesystem;

fs::path this_executable() {
  std::error_code error;
  const fs::path exe = fs::read_symlink("/proc/self/exe", error);
  return error ? fs::path("fragscope-cli") : exe;
}

std::string timestamp() {
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm utc{};
  gmtime_r(&now, &utc);
  char text[32];
  std::strftime(text, sizeof text, "%Y%m%d-%H%M%S", &utc);
  return text;
}

}  // namespace

void reject_slurm_options(const Args& args) {
  for (const std::string& flag : kSlurmFlags) {
    if (flag != "--slurm" && args.flag(flag))
      throw UsageError{flag + " goes with --slurm"};
  }
  for (const std::string& option : kSlurmOptions) {
    if (option != "--out" && args.option(option))
      throw UsageError{option + " goes with --slurm"};
  }
}

void apply_slurm_options(const Args& args, storage::SweepSpec& spec) {
  spec.slurm.partition = args.option_or("--partition", "");
  spec.slurm.account = args.option_or("--account", "");
  spec.slurm.time = args.option_or("--time", "");
  if (const auto gpus = args.uint_option("--gpus-per-task")) {
    if (*gpus == 0 || *gpus > 64)
      throw UsageError{"--gpus-per-task: expected 1..64"};
    if (spec.kind != storage::SweepKind::torch)
      throw UsageError{"--gpus-per-task applies to torch-run (a simulated point needs no GPU)"};
    spec.slurm.gpus_per_task = static_cast<int>(*gpus);
  }
  if (const auto cpus = args.uint_option("--cpus-per-task")) {
    if (*cpus == 0 || *cpus > 1024)
      throw UsageError{"--cpus-per-task: expected 1..1024"};
    spec.slurm.cpus_per_task = static_cast<int>(*cpus);
  }
  std::string stem;
  for (char c : spec.name)
    stem += std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' ? c : '_';
  spec.dir = args.option_or("--out", "fragscope-sweep-" + stem + "-" + timestamp());
  spec.cli = this_executable();
}

int submit_sweep(const Args& args, storage::SweepSpec spec, const nlohmann::json& definition) {
  if (args.flag("--dry-run")) {
    spec.dir = fs::absolute(spec.dir).lexically_normal();
    std::cout << storage::batch_script(spec);
    return 0;
  }
  const fs::path script = storage::write_sweep(spec, definition);
  const std::string job_id = storage::submit_batch_script(script);
  { std::ofstream(spec.dir / "slurm_job_id") << job_id << "\n"; }
  const nlohmann::json out = {{"experiment", spec.name},
                              {"slurm_job_id", job_id},
                              {"tasks", spec.points.size()},
                              {"dir", spec.dir.string()},
                              {"script", script.string()}};
  if (auto target = args.option("--json")) {
    write_json(out, *target);
    return 0;
  }
  std::cout << "submitted " << spec.points.size() << " task(s) of " << spec.name
            << " as Slurm job array " << job_id << "\n  batch script: " << script.string()
            << "\n  results:      " << spec.dir.string() << "/tasks/N"
            << "\n  collect with: fragscope-cli collect " << spec.dir.string() << "\n";
  return 0;
}

}  // namespace fragscope::cli
