#include "engine/analysis/recorded_environment.h"

#include <algorithm>
#include <cctype>
#include <limits>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "engine/allocator/summary.h"
#include "engine/core/error.h"

namespace fragscope::analysis {
namespace {

// What was found instead: a scalar as written, cut short (a type name alone, "got number", hid
// which value was refused), a container by its type.
std::string found(const nlohmann::json& value) {
  if (!value.is_primitive())
    return value.type_name();
  std::string text = value.dump();
  return text.size() > 60 ? text.substr(0, 57) + "..." : text;
}

// Reads typed fields of one JSON object; every error names the file and the dotted place.
class Fields {
 public:
  Fields(const nlohmann::json& object, std::string where, std::string place)
      : object_(object), where_(std::move(where)), place_(std::move(place)) {}

  [[noreturn]] void fail(const std::string& key, const std::string& expected) const {
    const auto it = object_.find(key);
    throw InputError(where_ + ": " + path(key) + ": expected " + expected + ", got " +
                     (it == object_.end() ? std::string("nothing") : found(*it)));
  }

  std::string path(const std::string& key) const {
    return place_.empty() ? key : place_ + "." + key;
  }

  const nlohmann::json* find(const std::string& key) const {
    const auto it = object_.find(key);
    return it == object_.end() || it->is_null() ? nullptr : &*it;
  }

  std::string text(const std::string& key) const {
    const nlohmann::json* value = find(key);
    if (value == nullptr)
      return {};
    if (!value->is_string())
      fail(key, "a string");
    return value->get<std::string>();
  }

  // A version: a string, or an integer as PyTorch reports cuDNN's (91900).
  std::string version(const std::string& key) const {
    const nlohmann::json* value = find(key);
    if (value != nullptr && value->is_number_integer())
      return value->dump();  // as written: 2^64 - 1 read as int64 printed "-1"
    if (value != nullptr && !value->is_string())
      fail(key, "a version (a string or a whole number)");
    return text(key);
  }

  std::uint64_t unsigned_number(const std::string& key) const {
    const nlohmann::json* value = find(key);
    if (value == nullptr)
      return 0;
    if (!value->is_number_unsigned())
      fail(key, "a byte count (a whole number, not negative)");
    return value->get<std::uint64_t>();
  }

  std::optional<Fields> object(const std::string& key) const {
    const nlohmann::json* value = find(key);
    if (value == nullptr)
      return std::nullopt;
    if (!value->is_object())
      fail(key, "an object");
    return Fields(*value, where_, path(key));
  }

  const nlohmann::json* array(const std::string& key) const {
    const nlohmann::json* value = find(key);
    if (value != nullptr && !value->is_array())
      fail(key, "a list");
    return value;
  }

  std::vector<std::string> strings(const std::string& key) const {
    std::vector<std::string> out;
    const nlohmann::json* list = array(key);
    if (list == nullptr)
      return out;
    for (std::size_t i = 0; i < list->size(); ++i) {
      if (!(*list)[i].is_string())
        throw InputError(where_ + ": " + path(key) + "[" + std::to_string(i) +
                         "]: expected a string, got " + found((*list)[i]));
      out.push_back((*list)[i].get<std::string>());
    }
    return out;
  }

  const nlohmann::json& json() const { return object_; }
  const std::string& where() const { return where_; }

 private:
  const nlohmann::json& object_;
  std::string where_;
  std::string place_;
};

std::string install_text(const RecordedEnvironment& env) {
  if (env.install_kind == "pip")
    return "pip wheel";
  if (env.install_kind == "conda")
    return env.install_channel.empty() ? "conda" : "conda from " + env.install_channel;
  if (env.install_kind == "source")
    return "source build";
  return "";
}

// "name" of a package line: "torch==2.4.1" -> "torch", "pytorch=2.4.1=py3.11" -> "pytorch".
std::string package_name(const std::string& line) {
  const std::size_t end = line.find('=');
  return line.substr(0, end);
}

// The version alone: "torch==2.4.1" and "pytorch=2.4.1=py3.11_0" -> "2.4.1".
std::string package_version(const std::string& line) {
  std::size_t start = line.find('=');
  if (start == std::string::npos)
    return "";
  while (start < line.size() && line[start] == '=')
    ++start;
  return line.substr(start, line.find('=', start) - start);
}

// One name for a package in both list kinds: lower case, '_' and '.' as '-', and conda's
// "pytorch" as pip's "torch".
std::string comparable_name(const std::string& line) {
  std::string name = package_name(line);
  for (char& c : name)
    c = c == '_' || c == '.' ? '-' : static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return name == "pytorch" ? "torch" : name;
}

std::string packages_difference(const RecordedEnvironment& a, const RecordedEnvironment& b) {
  std::map<std::string, std::string> left, right;
  for (const auto& line : a.packages)
    left[comparable_name(line)] = package_version(line);
  for (const auto& line : b.packages)
    right[comparable_name(line)] = package_version(line);
  std::vector<std::string> only_left, only_right, changed;
  for (const auto& [name, version] : left) {
    const auto it = right.find(name);
    if (it == right.end())
      only_left.push_back(name);
    else if (it->second != version)
      changed.push_back(name + " " + version + " vs " + it->second);
  }
  for (const auto& [name, version] : right)
    if (!left.contains(name))
      only_right.push_back(name);
  const auto some = [](const std::vector<std::string>& items) {
    std::string out;
    for (std::size_t i = 0; i < items.size() && i < 5; ++i)
      out += (i ? ", " : "") + items[i];
    if (items.size() > 5)
      out += ", ... (" + std::to_string(items.size()) + ")";
    return out;
  };
  std::vector<std::string> parts;
  if (!changed.empty())
    parts.push_back(std::to_string(changed.size()) + " changed: " + some(changed));
  if (!only_left.empty())
    parts.push_back(std::to_string(only_left.size()) + " only in the first: " + some(only_left));
  if (!only_right.empty())
    parts.push_back(std::to_string(only_right.size()) + " only in the second: " + some(only_right));
  if (a.packages_format != b.packages_format)
    parts.push_back("lists of different kinds (" + a.packages_format + " vs " + b.packages_format +
                    ")");
  std::string out;
  for (std::size_t i = 0; i < parts.size(); ++i)
    out += (i ? "; " : "") + parts[i];
  return out;
}

std::string gpu_text(const RecordedGpu& gpu) {
  std::string out = gpu.name;
  if (gpu.total_memory)
    out += " (" + alloc::format_size(gpu.total_memory) + ")";
  return out;
}

// The version of a pip line's wheel index: "2.11.0+cu130" -> "cu130"; "" for none.
std::string wheel_variant(const std::string& version) {
  const std::size_t plus = version.find('+');
  if (plus == std::string::npos)
    return "";
  const std::string local = version.substr(plus + 1);
  if (local.rfind("cu", 0) == 0 || local.rfind("rocm", 0) == 0 || local == "cpu")
    return local;
  return "";
}

}  // namespace

RecordedEnvironment parse_recorded_environment(const nlohmann::json& json,
                                               const std::string& where) {
  if (!json.is_object())
    throw InputError(where +
                     ": expected a JSON object (fragscope-record's environment "
                     "fingerprint), got " +
                     std::string(json.type_name()));
  const Fields top(json, where, "");
  RecordedEnvironment env;
  env.format = top.text("format");
  if (env.format.rfind("fragscope-env/", 0) != 0)
    throw InputError(where +
                     ": format: expected \"fragscope-env/1\" (an environment fingerprint "
                     "written by fragscope-record), got " +
                     (env.format.empty() ? std::string("none") : "\"" + env.format + "\""));
  env.recorded_at = top.text("recorded_at");
  env.host = top.text("host");
  env.platform = top.text("platform");
  if (const auto python = top.object("python")) {
    env.python_version = python->text("version");
    env.python_implementation = python->text("implementation");
  }
  if (const auto torch = top.object("torch")) {
    env.torch_version = torch->text("version");
    env.torch_git_version = torch->text("git_version");
    env.torch_cuda = torch->text("cuda");
    env.torch_hip = torch->text("hip");
    env.torch_cudnn = torch->version("cudnn");
    env.torch_nccl = torch->version("nccl");
    if (const auto install = torch->object("install")) {
      env.install_kind = install->text("kind");
      env.install_channel = install->text("channel");
      env.install_build = install->text("build");
    }
  }
  if (const auto cuda = top.object("cuda")) {
    env.driver = cuda->text("driver");
    env.driver_cuda = cuda->text("driver_cuda");
    env.cuda_runtime = cuda->text("runtime");
  }
  if (const nlohmann::json* gpus = top.array("gpus")) {
    for (std::size_t i = 0; i < gpus->size(); ++i) {
      const std::string place = "gpus[" + std::to_string(i) + "]";
      if (!(*gpus)[i].is_object())
        throw InputError(where + ": " + place + ": expected an object, got " + found((*gpus)[i]));
      const Fields gpu((*gpus)[i], where, place);
      RecordedGpu out;
      if (const nlohmann::json* index = gpu.find("index")) {
        if (!index->is_number_integer() ||
            (index->is_number_unsigned() &&
             index->get<std::uint64_t>() >
                 static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())))
          gpu.fail("index", "a whole number below 2^63");
        out.index = index->get<std::int64_t>();
      } else {
        out.index = static_cast<std::int64_t>(i);
      }
      out.name = gpu.text("name");
      out.total_memory = gpu.unsigned_number("total_memory");
      out.compute_capability = gpu.text("compute_capability");
      env.gpus.push_back(std::move(out));
    }
  }
  if (const auto variables = top.object("allocator_env")) {
    for (const auto& [key, value] : variables->json().items()) {
      if (!value.is_string())
        variables->fail(key, "a string");
      env.allocator_env[key] = value.get<std::string>();
    }
  }
  if (const auto conda = top.object("conda")) {
    env.conda = true;
    env.conda_env_name = conda->text("env_name");
    env.conda_channels = conda->strings("channels");
  }
  if (const auto packages = top.object("packages")) {
    env.packages_format = packages->text("format");
    env.packages = packages->strings("list");
    env.packages_sha256 = packages->text("sha256");
  }
  return env;
}

std::string describe_torch(const RecordedEnvironment& env) {
  if (env.torch_version.empty())
    return "";
  std::string out = env.torch_version;
  if (const std::string install = install_text(env); !install.empty())
    out += " " + install;
  if (!env.torch_cuda.empty())
    out += " (CUDA " + env.torch_cuda + ")";
  else if (!env.torch_hip.empty())
    out += " (ROCm " + env.torch_hip + ")";
  else
    out += " (CPU only)";
  return out;
}

std::vector<EnvironmentDifference> diff_environments(const RecordedEnvironment& a,
                                                     const RecordedEnvironment& b) {
  std::vector<EnvironmentDifference> out;
  const auto point = [&](const std::string& name, const std::string& x, const std::string& y) {
    if (!x.empty() && !y.empty() && x != y)
      out.push_back({name, x, y});
  };
  // The build leads: version, how it was installed and the CUDA it was built with, together.
  if (!a.torch_version.empty() && !b.torch_version.empty() &&
      (a.torch_version != b.torch_version || a.install_kind != b.install_kind ||
       a.install_channel != b.install_channel || a.torch_cuda != b.torch_cuda ||
       a.torch_hip != b.torch_hip))
    out.push_back({"torch", describe_torch(a), describe_torch(b)});
  else
    point("torch build", a.install_build, b.install_build);
  point("torch git_version", a.torch_git_version, b.torch_git_version);
  point("cuDNN", a.torch_cudnn, b.torch_cudnn);
  point("NCCL", a.torch_nccl, b.torch_nccl);
  point("CUDA runtime", a.cuda_runtime, b.cuda_runtime);
  point("driver", a.driver, b.driver);
  point("driver CUDA", a.driver_cuda, b.driver_cuda);
  point("Python", a.python_version, b.python_version);
  if (!a.gpus.empty() && !b.gpus.empty()) {
    point("GPU", gpu_text(a.gpus.front()), gpu_text(b.gpus.front()));
    if (a.gpus.size() != b.gpus.size())
      out.push_back({"GPU count", std::to_string(a.gpus.size()), std::to_string(b.gpus.size())});
  }
  // Allocator variables: one unset on one side is a difference too (it means the default).
  std::set<std::string> variables;
  for (const auto& [key, value] : a.allocator_env)
    variables.insert(key);
  for (const auto& [key, value] : b.allocator_env)
    variables.insert(key);
  for (const std::string& key : variables) {
    const auto x = a.allocator_env.find(key);
    const auto y = b.allocator_env.find(key);
    const std::string xs = x == a.allocator_env.end() ? "(unset)" : "\"" + x->second + "\"";
    const std::string ys = y == b.allocator_env.end() ? "(unset)" : "\"" + y->second + "\"";
    if (xs != ys)
      out.push_back({key, xs, ys});
  }
  if (!a.packages_sha256.empty() && !b.packages_sha256.empty() &&
      a.packages_sha256 != b.packages_sha256) {
    const std::string what = packages_difference(a, b);
    out.push_back(
        {"packages",
         std::to_string(a.packages.size()) + " packages, sha256 " + a.packages_sha256.substr(0, 12),
         std::to_string(b.packages.size()) + " packages, sha256 " +
             b.packages_sha256.substr(0, 12) + (what.empty() ? "" : " (" + what + ")")});
  }
  return out;
}

std::vector<std::string> environment_warnings(const std::string& first_label,
                                              const RecordedEnvironment& first,
                                              const std::string& second_label,
                                              const RecordedEnvironment& second) {
  std::vector<std::string> out;
  for (const auto& d : diff_environments(first, second))
    out.push_back("environment differs (" + d.point + "): " + first_label + " " + d.first + " vs " +
                  second_label + " " + d.second);
  return out;
}

std::string to_text(const RecordedEnvironment& env) {
  std::ostringstream out;
  const auto line = [&](const std::string& key, const std::string& value) {
    if (!value.empty())
      out << key << ": " << value << "\n";
  };
  line("torch", describe_torch(env));
  line("torch git_version", env.torch_git_version);
  line("conda build", env.install_build);
  line("cuDNN", env.torch_cudnn);
  line("NCCL", env.torch_nccl);
  line("CUDA runtime", env.cuda_runtime);
  line("driver", env.driver + (env.driver_cuda.empty() ? "" : " (CUDA " + env.driver_cuda + ")"));
  line("Python", env.python_version +
                     (env.python_implementation.empty() ? "" : " " + env.python_implementation));
  for (const auto& gpu : env.gpus)
    line("GPU " + std::to_string(gpu.index),
         gpu_text(gpu) + (gpu.compute_capability.empty() ? "" : ", sm " + gpu.compute_capability));
  for (const auto& [key, value] : env.allocator_env)
    line(key, "\"" + value + "\"");
  if (env.conda)
    line("conda environment", env.conda_env_name.empty() ? "(unnamed)" : env.conda_env_name);
  if (!env.packages_sha256.empty() || !env.packages.empty())
    line("packages", std::to_string(env.packages.size()) + " (" + env.packages_format +
                         "), sha256 " + env.packages_sha256);
  line("host", env.host);
  line("platform", env.platform);
  line("recorded at", env.recorded_at);
  return out.str();
}

std::string environment_yml(const RecordedEnvironment& env, const std::string& name) {
  std::ostringstream out;
  out << "# Recreates the environment fragscope-record fingerprinted";
  if (!env.recorded_at.empty())
    out << " at " << env.recorded_at;
  if (!env.host.empty())
    out << " on " << env.host;
  out << ".\n# torch " << describe_torch(env) << "\n";
  out << "name: " << name << "\n";
  std::vector<std::string> channels = env.conda_channels;
  if (!env.install_channel.empty() &&
      std::find(channels.begin(), channels.end(), env.install_channel) == channels.end())
    channels.insert(channels.begin(), env.install_channel);
  if (channels.empty())
    channels = {env.install_kind == "conda" ? "pytorch" : "conda-forge"};
  if (env.install_kind == "conda" && !env.torch_cuda.empty() &&
      std::find(channels.begin(), channels.end(), "nvidia") == channels.end())
    channels.push_back("nvidia");
  out << "channels:\n";
  for (const auto& channel : channels)
    out << "  - " << channel << "\n";
  out << "dependencies:\n";
  std::vector<std::string> pip;
  bool has_python = false;
  bool has_pip = false;
  if (env.packages_format == "conda-export") {
    for (const auto& line : env.packages) {
      // name=version=build; pip-installed packages carry the build "pypi_0".
      const std::size_t first = line.find('=');
      const std::size_t second = first == std::string::npos ? first : line.find('=', first + 1);
      if (second != std::string::npos && line.compare(second + 1, 5, "pypi_") == 0) {
        pip.push_back(line.substr(0, first) + "==" + line.substr(first + 1, second - first - 1));
        continue;
      }
      has_python = has_python || package_name(line) == "python";
      has_pip = has_pip || package_name(line) == "pip";
      out << "  - " << line << "\n";
    }
  } else {
    pip = env.packages;
  }
  if (!has_python && !env.python_version.empty())
    out << "  - python=" << env.python_version << "\n";
  if (!pip.empty()) {
    if (!has_pip)
      out << "  - pip\n";
    out << "  - pip:\n";
    std::set<std::string> indexes;
    for (const auto& line : pip)
      if (const std::string variant = wheel_variant(package_version(line)); !variant.empty())
        indexes.insert(variant);
    for (const auto& variant : indexes)
      out << "    - --extra-index-url https://download.pytorch.org/whl/" << variant << "\n";
    for (const auto& line : pip)
      out << "    - " << line << "\n";
  }
  return out.str();
}

}  // namespace fragscope::analysis
