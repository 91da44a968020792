#pragma once
// Experiment files (experiments/*.json, documented in experiments/README.md): one base
// configuration — device, allocator, model, training, parallelism — plus named variants that
// override dotted keys, and a sweep whose cartesian product becomes more points. Every point is
// one run of the generator through the allocator model.
//
// Validation is strict: an unknown key (with a "did you mean"), a wrong type or an out-of-range
// value is a fragscope::InputError naming the file and the JSON path, e.g.
//   "case.json: $.training.batch_size: expected an integer >= 1, got -4".
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/allocator/config.h"
#include "engine/core/units.h"
#include "engine/workload/workload.h"

namespace fragscope::workload {

// A GPU model: its real totalGlobalMem and what the CUDA context (and library handles) take
// before the caching allocator gets anything.
struct DevicePreset {
  std::string name;
  Bytes total_memory = 0;
  Bytes context_reserve = 0;
};
// The built-in presets (experiments/README.md lists their sources).
const std::vector<DevicePreset>& device_presets();
// The CUDA-context reserve the presets use unless a file overrides it: 600 MiB, which leaves an
// A100-40GB the 39.0 GiB the case-study measurements were capped at.
inline constexpr Bytes kDefaultContextReserve = 600 * kMiB;

struct DeviceSpec {
  std::string name;        // preset name, or "custom"
  Bytes total_memory = 0;  // what the device reports (OOM messages' "total capacity")
  Bytes capacity = 0;      // what the allocator may use: total - context reserve
  // torch.cuda.set_per_process_memory_fraction as bytes (the OOM text's "X allowed"); 0 = none
  Bytes allowed = 0;
};

struct ExperimentPoint {
  std::string name;  // variant name, or "sweep:key=value,..." for sweep points
  Workload workload;
  DeviceSpec device;
  // allocator.alloc_conf, parsed when the file is read (config.raw: the string as written).
  alloc::AllocatorConfig alloc_conf;
  nlohmann::json config;  // the fully resolved configuration of this point (stored with the run)
};

struct Experiment {
  std::string name;
  std::string description;
  nlohmann::json definition;  // the file as given
  std::vector<ExperimentPoint> points;
};

// `source` names the file in error messages.
Experiment parse_experiment(const nlohmann::json& document, std::string_view source);
// Reads and parses a file; unreadable or malformed JSON is an InputError naming it.
Experiment load_experiment(const std::filesystem::path& path);

// The point named `variant`, or every point when no name is given (the CLI's --variant). An
// unknown name is an InputError listing the points there are; `source` names the file.
std::vector<const ExperimentPoint*> select_points(const Experiment& experiment,
                                                  const std::optional<std::string>& variant,
                                                  std::string_view source);

}  // namespace fragscope::workload
