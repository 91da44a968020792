#pragma once
// The environment a run was recorded in: fragscope-record's NAME.env.json (format
// "fragscope-env/1"). The same script behaves differently under a conda build and a pip wheel
// of one PyTorch release, or under another CUDA toolkit or cuDNN, so Compare warns point by point
// when two runs' environments differ, and `fragscope-cli env --conda-yml` writes an
// environment.yml that recreates one.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace fragscope::analysis {

struct RecordedGpu {
  std::int64_t index = 0;
  std::string name;
  std::uint64_t total_memory = 0;
  std::string compute_capability;
};

struct RecordedEnvironment {
  std::string format;  // "fragscope-env/1"
  std::string recorded_at, host, platform;
  std::string python_version, python_implementation;
  // PyTorch as imported: its version, source revision, what it was built with.
  std::string torch_version, torch_git_version, torch_cuda, torch_hip, torch_cudnn, torch_nccl;
  // How it was installed: "conda", "pip", "source" or "unknown"; conda channel and build.
  std::string install_kind, install_channel, install_build;
  std::string driver, driver_cuda, cuda_runtime;
  std::vector<RecordedGpu> gpus;
  std::map<std::string, std::string> allocator_env;  // PYTORCH_CUDA_ALLOC_CONF, ...
  bool conda = false;
  std::string conda_env_name;
  std::vector<std::string> conda_channels;
  // "conda-export" (name=version=build, pip packages as name=version=pypi_0) or "pip-freeze"
  // (name==version).
  std::string packages_format;
  std::vector<std::string> packages;
  std::string packages_sha256;
};

// Reads a fingerprint; `where` names the file in errors. A wrong type or a file that is no
// fingerprint is an InputError naming `where` and the place ("torch.version: expected a
// string"); unknown fields and missing ones are not errors.
RecordedEnvironment parse_recorded_environment(const nlohmann::json& json,
                                               const std::string& where);

// "2.11.0+cu130 pip wheel (CUDA 13.0)", "2.4.1 conda from pytorch (CUDA 12.1)"; "" when torch
// is not recorded.
std::string describe_torch(const RecordedEnvironment& env);

struct EnvironmentDifference {
  std::string point;  // "torch", "cuDNN", "driver", "PYTORCH_CUDA_ALLOC_CONF", "packages", ...
  std::string first, second;
};

// The points where two environments differ, most decisive first (the PyTorch build leads).
// Points that either environment did not record are not compared.
std::vector<EnvironmentDifference> diff_environments(const RecordedEnvironment& first,
                                                     const RecordedEnvironment& second);

// One warning line per difference: "environment differs (torch): #1 a 2.4.1 pip wheel
// (CUDA 12.1) vs #2 b 2.11.0 conda (CUDA 13.0)". Used by Compare in the CLI and the GUI.
std::vector<std::string> environment_warnings(const std::string& first_label,
                                              const RecordedEnvironment& first,
                                              const std::string& second_label,
                                              const RecordedEnvironment& second);

// A readable listing of the fingerprint (`fragscope-cli env RUN`).
std::string to_text(const RecordedEnvironment& env);

// An environment.yml that recreates the recorded environment: its conda packages pinned to
// version and build, pip-installed packages under `pip:` (with PyTorch's wheel index for
// +cuXXX wheels). `name` is the environment's name.
std::string environment_yml(const RecordedEnvironment& env, const std::string& name);

}  // namespace fragscope::analysis
