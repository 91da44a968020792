// fragscope-record's environment fingerprint: reading it (errors name the file and place),
// describing the PyTorch build, the point-by-point diff and the environment.yml.
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <limits>

#include <nlohmann/json.hpp>

#include "engine/analysis/compare.h"
#include "engine/analysis/recorded_environment.h"
#include "engine/core/error.h"

namespace fragscope::analysis {
namespace {

const std::string kEnvFixtures = std::string(FRAGSCOPE_FIXTURES) + "/../env";

nlohmann::json fixture(const std::string& name) {
  std::ifstream in(kEnvFixtures + "/" + name);
  return nlohmann::json::parse(in);
}

const std::string kPip = "torch-2.4.1-pip-cu121.env.json";
const std::string kConda = "torch-2.11.0-conda-cu130.env.json";

std::string error_of(const nlohmann::json& json) {
  try {
    parse_recorded_environment(json, "run.env.json");
  } catch (const InputError& error) {
    return error.what();
  }
  return "";
}

TEST(RecordedEnvironment, ReadsEveryPoint) {
  const RecordedEnvironment env = parse_recorded_environment(fixture(kConda), kConda);
  EXPECT_EQ(env.torch_version, "2.11.0");
  EXPECT_EQ(env.install_kind, "conda");
  EXPECT_EQ(env.install_channel, "pytorch");
  EXPECT_EQ(env.install_build, "py3.12_cuda13.0_cudnn9.19.0_0");
  EXPECT_EQ(env.torch_cuda, "13.0");
  EXPECT_EQ(env.torch_cudnn, "9.19.0");
  EXPECT_EQ(env.torch_nccl, "2.28.9");
  EXPECT_EQ(env.driver, "580.159.04");
  EXPECT_EQ(env.cuda_runtime, "13.0");
  ASSERT_EQ(env.gpus.size(), 1u);
  EXPECT_EQ(env.gpus[0].name, "NVIDIA H200");
  EXPECT_EQ(env.gpus[0].total_memory, 150109880320u);
  EXPECT_TRUE(env.conda);
  EXPECT_EQ(env.conda_env_name, "train");
  EXPECT_EQ(env.conda_channels, (std::vector<std::string>{"pytorch", "nvidia", "conda-forge"}));
  EXPECT_EQ(env.packages_format, "conda-export");
  EXPECT_EQ(env.packages.size(), 4u);
  EXPECT_EQ(describe_torch(env), "2.11.0 conda from pytorch (CUDA 13.0)");
  const RecordedEnvironment pip = parse_recorded_environment(fixture(kPip), kPip);
  EXPECT_EQ(describe_torch(pip), "2.4.1+cu121 pip wheel (CUDA 12.1)");
  EXPECT_EQ(pip.allocator_env.at("PYTORCH_CUDA_ALLOC_CONF"), "expandable_segments:True");
  EXPECT_FALSE(pip.conda);
}

TEST(RecordedEnvironment, MissingPartsAndUnknownFieldsAreNotErrors) {
  const RecordedEnvironment env =
      parse_recorded_environment({{"format", "fragscope-env/2"}, {"new", 1}}, "x");
  EXPECT_TRUE(env.torch_version.empty());
  EXPECT_EQ(describe_torch(env), "");
  // cuDNN as PyTorch's integer still reads.
  const auto numeric = parse_recorded_environment(
      {{"format", "fragscope-env/1"}, {"torch", {{"version", "2.1.0"}, {"cudnn", 8902}}}}, "x");
  EXPECT_EQ(numeric.torch_cudnn, "8902");
}

TEST(RecordedEnvironment, BadInputNamesTheFileAndThePlace) {
  EXPECT_EQ(error_of(nlohmann::json::array()),
            "run.env.json: expected a JSON object (fragscope-record's environment fingerprint), "
            "got array");
  EXPECT_NE(error_of({{"torch", {{"version", "2.4"}}}}).find("run.env.json: format: expected"),
            std::string::npos);
  nlohmann::json bad = fixture(kPip);
  bad["torch"]["version"] = nlohmann::json::array();
  EXPECT_EQ(error_of(bad), "run.env.json: torch.version: expected a string, got array");
  bad = fixture(kPip);
  bad["gpus"][0]["total_memory"] = -5;
  EXPECT_EQ(error_of(bad),
            "run.env.json: gpus[0].total_memory: expected a byte count (a whole number, not "
            "negative), got -5");
  bad = fixture(kPip);
  bad["packages"]["list"][1] = 7;
  EXPECT_EQ(error_of(bad), "run.env.json: packages.list[1]: expected a string, got 7");
  bad = fixture(kPip);
  bad["allocator_env"]["PYTORCH_CUDA_ALLOC_CONF"] = true;
  EXPECT_EQ(error_of(bad),
            "run.env.json: allocator_env.PYTORCH_CUDA_ALLOC_CONF: expected a string, got true");
  bad = fixture(kPip);
  bad["python"] = "3.11";
  EXPECT_EQ(error_of(bad), "run.env.json: python: expected an object, got \"3.11\"");
}

TEST(RecordedEnvironment, NumbersAboveInt64AreQuotedAsWritten) {
  // Read as int64, 2^64 - 1 became -1: a cuDNN "version -1", a GPU "index -1".
  nlohmann::json env = fixture(kPip);
  env["torch"]["cudnn"] = std::numeric_limits<std::uint64_t>::max();
  EXPECT_EQ(parse_recorded_environment(env, "x").torch_cudnn, "18446744073709551615");
  env = fixture(kPip);
  env["gpus"][0]["index"] = std::numeric_limits<std::uint64_t>::max();
  EXPECT_EQ(error_of(env),
            "run.env.json: gpus[0].index: expected a whole number below 2^63, got "
            "18446744073709551615");
}

TEST(RecordedEnvironment, DiffGoesPointByPointBuildFirst) {
  const auto pip = parse_recorded_environment(fixture(kPip), kPip);
  const auto conda = parse_recorded_environment(fixture(kConda), kConda);
  const auto differences = diff_environments(pip, conda);
  ASSERT_GE(differences.size(), 8u);
  EXPECT_EQ(differences[0].point, "torch");
  EXPECT_EQ(differences[0].first, "2.4.1+cu121 pip wheel (CUDA 12.1)");
  EXPECT_EQ(differences[0].second, "2.11.0 conda from pytorch (CUDA 13.0)");
  std::map<std::string, std::pair<std::string, std::string>> by_point;
  for (const auto& d : differences)
    by_point[d.point] = {d.first, d.second};
  EXPECT_EQ(by_point.at("cuDNN"), std::make_pair(std::string("9.1.0"), std::string("9.19.0")));
  EXPECT_EQ(by_point.at("NCCL"), std::make_pair(std::string("2.20.5"), std::string("2.28.9")));
  EXPECT_EQ(by_point.at("driver").second, "580.159.04");
  EXPECT_EQ(by_point.at("Python").first, "3.11.9");
  EXPECT_EQ(by_point.at("GPU").first, "NVIDIA A100-SXM4-40GB (39.39 GiB)");
  EXPECT_EQ(by_point.at("PYTORCH_CUDA_ALLOC_CONF"),
            std::make_pair(std::string("\"expandable_segments:True\""), std::string("(unset)")));
  EXPECT_NE(by_point.at("packages").second.find("only in the first"), std::string::npos);
  EXPECT_TRUE(diff_environments(conda, conda).empty());
  // The same release built differently is still a difference.
  auto rebuilt = conda;
  rebuilt.install_build = "py3.12_cuda13.0_cudnn9.19.0_1";
  const auto build = diff_environments(conda, rebuilt);
  ASSERT_EQ(build.size(), 1u);
  EXPECT_EQ(build[0].point, "torch build");
}

TEST(RecordedEnvironment, CompareWarnsPointByPoint) {
  RunProfile a, b;
  a.label = "#1 pip";
  b.label = "#2 conda";
  a.environment = {{"torch", "2.4.1+cu121"}, {"fragscope", "0.1.0"}};
  b.environment = {{"torch", "2.11.0"}, {"fragscope", "0.1.0"}};
  a.recorded_environment = parse_recorded_environment(fixture(kPip), kPip);
  b.recorded_environment = parse_recorded_environment(fixture(kConda), kConda);
  const std::vector<RunProfile> profiles = {a, b};
  const Comparison comparison = compare_runs(profiles);
  ASSERT_FALSE(comparison.warnings.empty());
  EXPECT_EQ(comparison.warnings[0],
            "environment differs (torch): #1 pip 2.4.1+cu121 pip wheel (CUDA 12.1) vs #2 conda "
            "2.11.0 conda from pytorch (CUDA 13.0)");
  // The coarse columns are not repeated when both runs carry a fingerprint.
  for (const auto& warning : comparison.warnings)
    EXPECT_EQ(warning.find("environment differs (torch): #1 pip \"2.4.1+cu121\""),
              std::string::npos);
}

TEST(RecordedEnvironment, EnvironmentYmlRecreatesConda) {
  const auto conda = parse_recorded_environment(fixture(kConda), kConda);
  EXPECT_EQ(environment_yml(conda, "train"),
            "# Recreates the environment fragscope-record fingerprinted at 2026-12-01T17:40:02Z "
            "on h200-node-1.\n"
            "# torch 2.11.0 conda from pytorch (CUDA 13.0)\n"
            "name: train\n"
            "channels:\n"
            "  - pytorch\n"
            "  - nvidia\n"
            "  - conda-forge\n"
            "dependencies:\n"
            "  - numpy=2.1.0=py312h58c1407_0\n"
            "  - python=3.12.3=hab00c5b_0_cpython\n"
            "  - pytorch=2.11.0=py3.12_cuda13.0_cudnn9.19.0_0\n"
            "  - pip\n"
            "  - pip:\n"
            "    - flash-attn==2.7.0\n");
}

TEST(RecordedEnvironment, EnvironmentYmlRecreatesAPipWheelSetup) {
  const auto pip = parse_recorded_environment(fixture(kPip), kPip);
  const std::string yml = environment_yml(pip, "run");
  EXPECT_NE(yml.find("  - python=3.11.9\n  - pip\n  - pip:\n"
                     "    - --extra-index-url https://download.pytorch.org/whl/cu121\n"
                     "    - numpy==1.26.4\n    - torch==2.4.1+cu121\n    - triton==3.0.0\n"),
            std::string::npos)
      << yml;
}

}  // namespace
}  // namespace fragscope::analysis
