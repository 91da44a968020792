// gpu-run and torch-run, run as the real fragscope-cli. Without a GPU gpu-run must refuse with
// exit 2 and say why; torch-run is tested end to end with a stand-in runner that "records" a
// real PyTorch fixture, so the import, the simulated twin and the link between them are checked
// on any machine. The real runner's --plan (no torch needed) must draw the micro-batches the
// workload engine draws.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/cli_process.h"
#include "engine/workload/experiment.h"
#include "storage/db/run_store.h"
#include "storage/storage_test_util.h"

namespace fragscope::test {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const fs::path kSource = FRAGSCOPE_SOURCE_DIR;
const fs::path kCalibration = kSource / "experiments/calibration-torch-2.11-h200.json";
const fs::path kRunner = kSource / "experiments/torch_runner/torch_runner.py";
const fs::path kFixtures = FRAGSCOPE_FIXTURES;

json read_json(const fs::path& path) {
  std::ifstream in(path);
  return json::parse(in);
}

bool have_python() {
  return std::system("python3 -c 'import json' > /dev/null 2>&1") == 0;
}

// Exit 2 and an error line containing `needle`.
void expect_refused(const CliResult& r, const std::string& needle) {
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find(needle), std::string::npos) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
}

bool gpu_present() {
  return std::system("nvidia-smi -L > /dev/null 2>&1") == 0;
}

// The binary under test may be built with or without the CUDA backend (FRAGSCOPE_CUDA); it says
// which when asked to run.
bool cli_has_cuda() {
  const CliResult r = run_cli({"gpu-run", kCalibration.string(), "--variant", "nope"});
  return r.err.find("built without CUDA") == std::string::npos;
}

TEST(GpuRunCli, WithoutAGpuExitsTwoSayingWhy) {
  if (!cli_has_cuda()) {
    expect_refused(run_cli({"gpu-run", kCalibration.string()}), "built without CUDA");
    return;
  }
  if (gpu_present())
    GTEST_SKIP() << "a GPU is present; this checks the behaviour without one";
  expect_refused(run_cli({"gpu-run", kCalibration.string(), "--variant", "gpt_fixedlen_default"}),
                 "no GPU to run on");
}

TEST(GpuRunCli, BadCommandLinesAreUsageErrors) {
  expect_refused(run_cli({"gpu-run"}), "usage: fragscope-cli gpu-run");
  expect_refused(run_cli({"gpu-run", kCalibration.string(), "--bogus"}), "--bogus");
  if (!cli_has_cuda())
    return;
  expect_refused(run_cli({"gpu-run", kCalibration.string(), "--allocator", "cudamalloc"}),
                 "expected model, cudaMalloc, cudaMallocAsync or all");
  expect_refused(run_cli({"gpu-run", kCalibration.string(), "--variant", "nope"}),
                 "no point named 'nope'");
  expect_refused(run_cli({"gpu-run", (kSource / "no-such.json").string()}), "no-such.json");
}

TEST(GpuRunCli, GpuRunsJsonHasEveryAllocator) {
  if (!cli_has_cuda() || !gpu_present())
    GTEST_SKIP() << "needs fragscope-cli built with CUDA and an NVIDIA GPU";
  storage::test::TempDir dir;
  const std::string out = dir.file("gpu.json");
  const CliResult r = run_cli({"gpu-run", kCalibration.string(), "--variant", "gpt_ckpt_accum",
                               "--allocator", "all", "--json", out, "--db", dir.file("gpu.db")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json result = read_json(out);
  ASSERT_EQ(result["runs"].size(), 3u);
  for (const json& run : result["runs"]) {
    EXPECT_EQ(run["outcome"], "ok") << run["allocator"];
    EXPECT_GT(run["peak_reserved"].get<std::uint64_t>(), 0u);
    EXPECT_EQ(run["steps"].size(), 13u) << "setup + 12 steps";
  }
  EXPECT_EQ(result["runs"][0]["model"]["reserved_matches_device"], true);
  storage::RunStore store(dir.file("gpu.db"));
  EXPECT_EQ(store.run_count(), 3);
}

TEST(TorchRunnerPlan, DrawsTheWorkloadEnginesMicroBatches) {
  if (!have_python())
    GTEST_SKIP() << "needs python3";
  const workload::Experiment experiment = workload::load_experiment(kCalibration);
  for (const workload::ExperimentPoint& point : experiment.points) {
    storage::test::TempDir dir;
    const std::string config = dir.file("point.json");
    std::ofstream(config) << point.config.dump();
    const std::string command =
        "python3 " + kRunner.string() + " " + config + " --plan > " + dir.file("plan.json");
    ASSERT_EQ(std::system(command.c_str()), 0) << command;
    const json plan = read_json(dir.file("plan.json"));
    const auto expected = workload::micro_batches(point.workload.training);
    ASSERT_EQ(plan["micro_batches"].size(), expected.size()) << point.name;
    for (std::size_t i = 0; i < expected.size(); ++i) {
      EXPECT_EQ(plan["micro_batches"][i]["batch_size"], expected[i].batch_size) << point.name;
      EXPECT_EQ(plan["micro_batches"][i]["seq_len"], expected[i].seq_len) << point.name << " " << i;
    }
    EXPECT_EQ(plan["alloc_conf"], point.alloc_conf.raw) << point.name;
  }
}

// A stand-in for the PyTorch runner: checks the arguments torch-run gives it, then "records" the
// fixture `name` by copying its files under the names torch-run expects.
std::string write_fake_runner(const storage::test::TempDir& dir, const std::string& fixture,
                              int exit_code = 0) {
  const std::string path = dir.file("fake_runner.py");
  std::ofstream script(path);
  script << "import json, shutil, sys\n"
            "a = sys.argv[1:]\n"
            "arg = lambda k: a[a.index(k) + 1]\n"
            "out, name = arg('--out'), arg('--name')\n"
            "fx = '"
         << (kFixtures / fixture).string()
         << "'\n"
            "recorded = json.load(open(fx + '.stats.json'))\n"
            "given = json.load(open(arg('--micro-batches')))\n"
            "if given != recorded['micro_batches']:\n"
            "    sys.exit('micro-batches differ from the recording')\n"
            "json.load(open(a[0]))  # the resolved experiment\n"
            "int(arg('--capacity-bytes'))\n"
            "if "
         << exit_code
         << ":\n"
            "    print('refusing', file=sys.stderr); sys.exit("
         << exit_code
         << ")\n"
            "shutil.copy(fx + '.pickle.gz', f'{out}/{name}.pickle')\n"
            "shutil.copy(fx + '.stats.json', f'{out}/{name}.stats.json')\n"
            "shutil.copy(fx + '.summary.txt', f'{out}/{name}.summary.txt')\n"
            "print('fake run done')\n";
  return path;
}

TEST(TorchRunCli, ImportsTheRecordingAndLinksItsSimulatedTwin) {
  if (!have_python())
    GTEST_SKIP() << "needs python3";
  storage::test::TempDir dir;
  const std::string db = dir.file("torch.db");
  const CliResult r =
      run_cli({"torch-run", kCalibration.string(), "--variant", "gpt_ckpt_accum", "--python",
               "python3", "--runner", write_fake_runner(dir, "gpt_ckpt_accum"), "--out",
               dir.file("out"), "--db", db, "--json", "-"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("fake run done"), std::string::npos) << "runner output goes to stderr";
  const json out = json::parse(r.out);
  ASSERT_EQ(out["runs"].size(), 1u);
  const json& run = out["runs"][0];
  const json recorded = read_json(kFixtures / "gpt_ckpt_accum.stats.json")["memory_stats"];
  EXPECT_EQ(run["real_peak_reserved"], recorded["reserved_bytes.all.peak"]);
  EXPECT_EQ(run["real_peak_allocated"], recorded["allocated_bytes.all.peak"]);
  EXPECT_EQ(run["real_outcome"], "ok");
  EXPECT_GT(run["simulated_peak_reserved"].get<std::int64_t>(), 0);

  storage::RunStore store(db);
  const storage::RunRecord real = store.run(storage::RunId{run["run_id"].get<std::int64_t>()});
  EXPECT_EQ(real.source, storage::RunSource::torch);
  ASSERT_TRUE(real.twin_run.has_value());
  EXPECT_EQ(real.twin_run->value, run["twin_run_id"].get<std::int64_t>());
  EXPECT_EQ(real.environment.gpu_name, "NVIDIA H200");
  EXPECT_EQ(real.environment.torch_version, "2.11.0+cu130");
  EXPECT_EQ(real.summary["comparison"]["real_peak_reserved"], recorded["reserved_bytes.all.peak"]);
  const storage::RunRecord twin = store.run(*real.twin_run);
  EXPECT_EQ(twin.source, storage::RunSource::simulated);
  EXPECT_GT(twin.event_count, 0u);
  EXPECT_EQ(real.experiment, twin.experiment);
}

TEST(TorchRunCli, ARefusedRunIsExitTwoAndStoresNothing) {
  if (!have_python())
    GTEST_SKIP() << "needs python3";
  storage::test::TempDir dir;
  const std::string db = dir.file("torch.db");
  const CliResult r =
      run_cli({"torch-run", kCalibration.string(), "--variant", "gpt_ckpt_accum", "--runner",
               write_fake_runner(dir, "gpt_ckpt_accum", 2), "--out", dir.file("out"), "--db", db});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("refused"), std::string::npos) << r.err;
  storage::RunStore store(db);
  EXPECT_EQ(store.run_count(), 0);
  EXPECT_TRUE(store.list_experiments().empty());
}

TEST(TorchRunCli, MissingRunnerOrPythonIsExitTwo) {
  storage::test::TempDir dir;
  expect_refused(run_cli({"torch-run", kCalibration.string(), "--runner", dir.file("absent.py"),
                          "--db", dir.file("x.db")}),
                 "no torch runner there");
  expect_refused(run_cli({"torch-run", kCalibration.string(), "--variant", "gpt_ckpt_accum",
                          "--python", dir.file("no-python"), "--runner",
                          write_fake_runner(dir, "gpt_ckpt_accum"), "--db", dir.file("x.db")}),
                 "cannot start");
}

// The default runner was once resolved against the working directory: from anywhere else the
// build tree's CLI said "no torch runner there". The batch script names the runner it found.
TEST(TorchRunCli, DefaultRunnerDoesNotDependOnTheWorkingDirectory) {
  storage::test::TempDir dir;
  const CliResult r = run_cli_in(
      dir.path().string(),
      {"torch-run", kCalibration.string(), "--slurm", "--dry-run", "--out", dir.file("sweep")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const fs::path beside_cli = fs::path(FRAGSCOPE_CLI).parent_path().parent_path() /
                              "share/fragscope/experiments/torch_runner/torch_runner.py";
  EXPECT_NE(r.out.find(beside_cli.lexically_normal().string()), std::string::npos) << r.out;
}

}  // namespace
}  // namespace fragscope::test
