// PYTORCH_CUDA_ALLOC_CONF as PyTorch 2.11 reads it (torch-allocator-spec §8).
//
// PyTorch reads the string three times, and we follow the same walks because their quirks are
// observable:
//  1. at library load, a structural scan looks for `backend` (a string it cannot walk, such as
//     `,,` or a key with no value, trips an internal assert there and aborts the process);
//  2. at CUDA init, the CUDA-specific parser (CUDAAllocatorConfig) handles its own keys and
//     rejects unknown ones ("Unrecognized key 'foo' in CUDA allocator config.");
//  3. the common parser (AcceleratorAllocatorConfig) resets max_split_size, the roundup table and
//     garbage_collection_threshold, reads large_segment_size_mb first, then every other key.
// The `:` after a key and the `,` after a value are located but never compared: PyTorch's
// checkToken only bounds-checks, so `max_split_size_mb,100` parses like `max_split_size_mb:100`.
// Which of passes 2 and 3 runs first decides only which error a string with two faults reports;
// CUDA-first is inferred from 2.11 reporting unknown keys with the CUDA parser's text.
#include "engine/allocator/config.h"

#include <algorithm>
#include <bit>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace fragscope::alloc {
namespace {

constexpr std::uint64_t kMaxMegabytes = std::numeric_limits<std::uint64_t>::max() / kMiB;
constexpr std::uint64_t kMinLargeAllocMegabytes = 10;  // kMinLargeAlloc / 1 MiB
constexpr std::uint64_t kMaxPinnedRegisterThreads = 128;
constexpr std::uint64_t kMaxRoundupDivisions =
    static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
constexpr std::string_view kAsyncBackendName = "cudaMallocAsync";

// How an internal assert of PyTorch's tokenizer shows up, for the error text.
enum class AssertContext : std::uint8_t {
  library_load,  // the load-time backend scan: uncaught, the process aborts
  runtime,       // a later parse: a RuntimeError "INTERNAL ASSERT FAILED"
};

bool is_power_of_two(std::uint64_t v) {
  return v != 0 && std::has_single_bit(v);
}

std::string_view backend_name(Backend backend) {
  return backend == Backend::cuda_malloc_async ? kAsyncBackendName : "native";
}

// PyTorch's ConfigTokenizer: `,` `:` `[` `]` are tokens of their own, whitespace is dropped,
// everything else between them is one token.
class ConfigTokens {
 public:
  ConfigTokens(std::string_view text, AssertContext context) : text_(text), context_(context) {
    std::string buffer;
    for (char ch : text) {
      if (ch == ',' || ch == ':' || ch == '[' || ch == ']') {
        if (!buffer.empty())
          tokens_.push_back(std::move(buffer));
        buffer.clear();
        tokens_.emplace_back(1, ch);
      } else if (!std::isspace(static_cast<unsigned char>(ch))) {
        buffer += ch;
      }
    }
    if (!buffer.empty())
      tokens_.push_back(std::move(buffer));
  }

  std::size_t size() const { return tokens_.size(); }

  const std::string& operator[](std::size_t i) const {
    check_index(i);
    return tokens_[i];
  }

  // PyTorch's checkToken: bounds-checked, but a different token there is not an error.
  void locate(std::size_t i) const { check_index(i); }

  std::uint64_t to_unsigned(std::size_t i, std::string_view key) const {
    const std::string& token = (*this)[i];
    // std::stoull semantics: a leading sign is allowed ("-1" wraps), trailing text is ignored.
    errno = 0;
    char* end = nullptr;
    const unsigned long long value = std::strtoull(token.c_str(), &end, 10);
    if (end == token.c_str())
      throw conversion_error(i, key, "an unsigned integer", "std::invalid_argument: stoull");
    if (errno == ERANGE)
      throw conversion_error(i, key, "an unsigned integer", "std::out_of_range: stoull");
    return value;
  }

  double to_double(std::size_t i, std::string_view key) const {
    const std::string& token = (*this)[i];
    // std::stod semantics: trailing text is ignored; overflow and underflow both throw.
    errno = 0;
    char* end = nullptr;
    const double value = std::strtod(token.c_str(), &end);
    if (end == token.c_str())
      throw conversion_error(i, key, "a number", "std::invalid_argument: stod");
    if (errno == ERANGE)
      throw conversion_error(i, key, "a number", "std::out_of_range: stod");
    return value;
  }

  bool to_bool(std::size_t i) const {
    const std::string& token = (*this)[i];
    if (token == "True")
      return true;
    if (token == "False")
      return false;
    throw AllocatorConfigError("Expected 'True' or 'False' at index " + std::to_string(i) +
                               " in ConfigTokenizer but got '" + token + "'");
  }

  // Steps over `key : value` or `key : [ ... ]`; returns the index of the value or of the `]`.
  std::size_t skip_key(std::size_t i) const {
    locate(++i);
    ++i;
    check_index(i);
    if (tokens_[i] != "[")
      return i;
    while (++i < tokens_.size() && tokens_[i] != "]") {
    }
    if (i >= tokens_.size())
      throw malformed("Expected closing bracket ']' in ConfigTokenizer but reached end of config");
    return i;
  }

  MalformedAllocatorConfig malformed(std::string_view what) const {
    const std::string consequence =
        context_ == AssertContext::library_load
            ? "PyTorch 2.11 trips an internal assert while loading the library and the process "
              "aborts (SIGABRT)"
            : "PyTorch 2.11 raises RuntimeError (INTERNAL ASSERT FAILED)";
    return MalformedAllocatorConfig("Malformed PYTORCH_CUDA_ALLOC_CONF '" + std::string(text_) +
                                    "': " + std::string(what) + "; " + consequence);
  }

 private:
  void check_index(std::size_t i) const {
    if (i >= tokens_.size())
      throw malformed("Index out of bounds in ConfigTokenizer (token " + std::to_string(i) +
                      " of " + std::to_string(tokens_.size()) +
                      "): a key without a value, or an empty entry such as ',,'");
  }

  AllocatorConfigError conversion_error(std::size_t i, std::string_view key,
                                        std::string_view expected,
                                        std::string_view pytorch_error) const {
    return AllocatorConfigError("Expected " + std::string(expected) + " for '" + std::string(key) +
                                "' at index " + std::to_string(i) +
                                " in ConfigTokenizer but got '" + tokens_[i] +
                                "' (PyTorch 2.11 "
                                "raises ValueError from " +
                                std::string(pytorch_error) + ")");
  }

  std::string_view text_;
  AssertContext context_;
  std::vector<std::string> tokens_;
};

void require(bool condition, const std::string& message) {
  if (!condition)
    throw AllocatorConfigError(message);
}

// The keys PyTorch 2.11 knows: the common ones and those the CUDA hook registers.
bool is_known_key(std::string_view key) {
  static constexpr std::array<std::string_view, 16> kKeys{"large_segment_size_mb",
                                                          "max_split_size_mb",
                                                          "max_non_split_rounding_mb",
                                                          "garbage_collection_threshold",
                                                          "roundup_power2_divisions",
                                                          "expandable_segments",
                                                          "pinned_use_background_threads",
                                                          "backend",
                                                          "release_lock_on_cudamalloc",
                                                          "release_lock_on_hipmalloc",
                                                          "pinned_use_cuda_host_register",
                                                          "pinned_use_hip_host_register",
                                                          "pinned_num_register_threads",
                                                          "pinned_reserve_segment_size_mb",
                                                          "graph_capture_record_stream_reuse",
                                                          "per_process_memory_fraction"};
  return std::find(kKeys.begin(), kKeys.end(), key) != kKeys.end();
}

// Pass 1: the backend scan PyTorch runs while the library loads. It only walks the pairs and
// stops at the first `backend` key; anything else is checked later.
Backend scan_backend(const ConfigTokens& tokens) {
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    const bool is_backend = tokens[i] == "backend";
    i = tokens.skip_key(i);
    if (is_backend)
      return tokens[i] == kAsyncBackendName ? Backend::cuda_malloc_async : Backend::native;
    if (i + 1 < tokens.size())
      ++i;
  }
  return Backend::native;
}

// Pass 2: CUDAAllocatorConfig::parseArgs.
void parse_cuda_keys(const ConfigTokens& tokens, AllocatorConfig& config) {
  bool used_async_backend = false;
  bool used_native_specific_option = false;
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    const std::string& key = tokens[i];
    if (key == "backend") {
      tokens.locate(++i);
      const std::string& value = tokens[++i];
      require(value == "native" || value == kAsyncBackendName,
              "Unknown allocator backend, options are native and cudaMallocAsync");
      used_async_backend = value == kAsyncBackendName;
      if (value != backend_name(config.backend))
        throw AllocatorConfigError(
            "Allocator backend parsed at runtime != allocator backend parsed at load time, " +
            value + " != " + std::string(backend_name(config.backend)));
    } else if (key == "release_lock_on_cudamalloc" || key == "release_lock_on_hipmalloc") {
      used_native_specific_option = true;
      tokens.locate(++i);
      config.release_lock_on_cudamalloc = tokens.to_bool(++i);
    } else if (key == "pinned_use_cuda_host_register" || key == "pinned_use_hip_host_register") {
      used_native_specific_option = true;
      tokens.locate(++i);
      config.pinned_use_cuda_host_register = tokens.to_bool(++i);
    } else if (key == "pinned_num_register_threads") {
      used_native_specific_option = true;
      tokens.locate(++i);
      const std::uint64_t threads = tokens.to_unsigned(++i, key);
      require(is_power_of_two(threads),
              "Number of register threads has to be power of 2, got " + std::to_string(threads));
      require(threads <= kMaxPinnedRegisterThreads,
              "Number of register threads should be less than or equal to " +
                  std::to_string(kMaxPinnedRegisterThreads) + ", got " + std::to_string(threads));
      config.pinned_num_register_threads = threads;
    } else if (key == "pinned_reserve_segment_size_mb") {
      used_native_specific_option = true;
      tokens.locate(++i);
      const std::uint64_t megabytes = tokens.to_unsigned(++i, key);
      require(megabytes > 0, "Pinned reserve segment size has to be greater than 0");
      config.pinned_reserve_segment_size_mb = megabytes;
    } else if (key == "graph_capture_record_stream_reuse") {
      used_native_specific_option = true;
      tokens.locate(++i);
      config.graph_capture_record_stream_reuse = tokens.to_bool(++i);
    } else if (key == "per_process_memory_fraction") {
      used_native_specific_option = true;
      tokens.locate(++i);
      const double fraction = tokens.to_double(++i, key);
      require(fraction >= 0.0 && fraction <= 1.0,
              "per_process_memory_fraction is invalid, set it in [0.0, 1.0]");
      config.per_process_memory_fraction = fraction;
    } else {
      require(is_known_key(key), "Unrecognized key '" + key + "' in CUDA allocator config.");
      i = tokens.skip_key(i);
    }
    if (i + 1 < tokens.size())
      tokens.locate(++i);
  }
  // Only the keys this parser owns count as "native-specific" here (sic in PyTorch: the common
  // keys the warning names do not trigger it).
  if (used_async_backend && used_native_specific_option)
    config.warnings =
        "backend:cudaMallocAsync ignores max_split_size_mb,roundup_power2_divisions, and "
        "garbage_collect_threshold.";
}

std::size_t parse_large_segment_size(const ConfigTokens& tokens, std::size_t i,
                                     AllocatorConfig& config) {
  tokens.locate(++i);
  std::uint64_t megabytes = tokens.to_unsigned(++i, "large_segment_size_mb");
  require(megabytes > kMinLargeAllocMegabytes,
          "CachingAllocator option large_segment_size_mb must be > " +
              std::to_string(kMinLargeAllocMegabytes) + " MB");
  megabytes = std::min(megabytes, kMaxMegabytes);
  config.large_segment_size = megabytes * kMiB;
  return i;
}

// max_split_size_mb and max_non_split_rounding_mb share one rule: at least large_segment_size.
std::size_t parse_megabytes_at_least_large_segment(const ConfigTokens& tokens, std::size_t i,
                                                   const std::string& key, Bytes& out,
                                                   const AllocatorConfig& config) {
  tokens.locate(++i);
  const std::uint64_t minimum = config.large_segment_size / kMiB;
  std::uint64_t megabytes = tokens.to_unsigned(++i, key);
  require(megabytes >= minimum,
          "CachingAllocator option " + key + " too small, must be >= " + std::to_string(minimum));
  megabytes = std::min(megabytes, kMaxMegabytes);
  out = megabytes * kMiB;
  return i;
}

std::size_t interval_index(std::uint64_t megabytes) {
  const std::size_t index = static_cast<std::size_t>(std::bit_width(megabytes) - 1);
  return std::min(index, kRoundupIntervals - 1);
}

// `roundup_power2_divisions:N` fills every interval; `[K:v,...,>:v]` sets interval log2(K), the
// first K also fills the intervals below it, `>` fills those after the last K listed.
std::size_t parse_roundup_divisions(const ConfigTokens& tokens, std::size_t i,
                                    AllocatorConfig& config) {
  static const std::string kKey = "roundup_power2_divisions";
  auto& table = config.roundup_power2_divisions;
  tokens.locate(++i);
  if (tokens[++i] != "[") {
    const std::uint64_t value = tokens.to_unsigned(i, kKey);
    require(is_power_of_two(value), "For roundups, the divisions has to be power of 2 ");
    table.fill(value);
    return i;
  }
  bool first_value = true;
  std::size_t last_index = 0;
  while (++i < tokens.size() && tokens[i] != "]") {
    const std::size_t interval_token = i;
    tokens.locate(++i);
    const std::uint64_t value = tokens.to_unsigned(++i, kKey);
    require(value == 0 || is_power_of_two(value),
            "For roundups, the divisions has to be power of 2 or 0 to disable roundup ");
    if (tokens[interval_token] == ">") {
      std::fill(table.begin() + static_cast<std::ptrdiff_t>(last_index + 1), table.end(), value);
    } else {
      const std::uint64_t megabytes = tokens.to_unsigned(interval_token, kKey);
      require(is_power_of_two(megabytes), "For roundups, the intervals have to be power of 2 ");
      const std::size_t index = interval_index(megabytes);
      if (first_value) {
        std::fill(table.begin(), table.begin() + static_cast<std::ptrdiff_t>(index), value);
        first_value = false;
      }
      table[index] = value;
      last_index = index;
    }
    if (tokens[i + 1] != "]")
      tokens.locate(++i);
  }
  if (i >= tokens.size())
    throw tokens.malformed(
        "Expected closing bracket ']' in ConfigTokenizer but reached end of config");
  return i;
}

// Pass 3: AcceleratorAllocatorConfig::parseArgs.
void parse_common_keys(const ConfigTokens& tokens, AllocatorConfig& config) {
  config.max_split_size = kUnlimited;
  config.roundup_power2_divisions.fill(0);
  config.garbage_collection_threshold = 0.0;

  // large_segment_size_mb first: the other size limits are checked against it.
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] == "large_segment_size_mb")
      i = parse_large_segment_size(tokens, i, config);
  }
  config.max_non_split_rounding_size = config.large_segment_size;

  for (std::size_t i = 0; i < tokens.size(); ++i) {
    const std::string& key = tokens[i];
    if (key == "max_split_size_mb") {
      i = parse_megabytes_at_least_large_segment(tokens, i, key, config.max_split_size, config);
    } else if (key == "max_non_split_rounding_mb") {
      i = parse_megabytes_at_least_large_segment(tokens, i, key, config.max_non_split_rounding_size,
                                                 config);
    } else if (key == "garbage_collection_threshold") {
      tokens.locate(++i);
      const double threshold = tokens.to_double(++i, key);
      require(threshold > 0 && threshold < 1.0,
              "garbage_collect_threshold is invalid, set it in (0.0, 1.0)");
      config.garbage_collection_threshold = threshold;
    } else if (key == "roundup_power2_divisions") {
      i = parse_roundup_divisions(tokens, i, config);
    } else if (key == "expandable_segments") {
      tokens.locate(++i);
      config.expandable_segments = tokens.to_bool(++i);
    } else if (key == "pinned_use_background_threads") {
      tokens.locate(++i);
      config.pinned_use_background_threads = tokens.to_bool(++i);
    } else {
      // large_segment_size_mb (done above) and the CUDA parser's keys.
      i = tokens.skip_key(i);
    }
    if (i + 1 < tokens.size())
      tokens.locate(++i);
  }
}

void apply_settings(AllocatorConfig& config, std::string_view text, AssertContext context) {
  const ConfigTokens tokens(text, context);
  // Only a string read from the environment goes through the load-time scan; a runtime
  // settings change is parsed directly (so `,,` is an unknown key ',' there, not an abort).
  if (context == AssertContext::library_load)
    config.backend = scan_backend(tokens);
  config.warnings.clear();
  parse_cuda_keys(tokens, config);
  parse_common_keys(tokens, config);
  config.raw = std::string(text);
}

// ---- allocator_settings (snapshot) ----

const nlohmann::json& settings_field(const nlohmann::json& settings, std::string_view key) {
  const auto it = settings.find(key);
  if (it == settings.end())
    throw AllocatorConfigError("allocator_settings: missing key '" + std::string(key) + "'");
  return *it;
}

bool settings_bool(const nlohmann::json& settings, std::string_view key) {
  const nlohmann::json& value = settings_field(settings, key);
  if (!value.is_boolean())
    throw AllocatorConfigError("allocator_settings: '" + std::string(key) +
                               "' must be True or False, got " + value.dump());
  return value.get<bool>();
}

std::int64_t settings_integer(const nlohmann::json& settings, std::string_view key) {
  const nlohmann::json& value = settings_field(settings, key);
  if (!value.is_number_integer())
    throw AllocatorConfigError("allocator_settings: '" + std::string(key) +
                               "' must be an integer, got " + value.dump());
  if (value.is_number_unsigned() &&
      value.get<std::uint64_t>() >
          static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
    throw AllocatorConfigError("allocator_settings: '" + std::string(key) +
                               "' is out of range: " + value.dump());
  return value.get<std::int64_t>();
}

std::string format_double(double value) {
  // Shortest text that reads back as the same double.
  std::array<char, 64> buffer{};
  const auto result = std::to_chars(buffer.data(), buffer.data() + buffer.size(), value);
  return std::string(buffer.data(), result.ptr);
}

std::string megabytes_text(Bytes bytes, std::string_view key) {
  if (bytes % kMiB != 0)
    throw AllocatorConfigError("to_alloc_conf_string: " + std::string(key) + " of " +
                               std::to_string(bytes) + " bytes is not a whole number of MiB");
  return std::to_string(bytes / kMiB);
}

std::string roundup_text(const std::array<std::uint64_t, kRoundupIntervals>& table) {
  for (std::uint64_t value : table) {
    if (value != 0 && !is_power_of_two(value))
      throw AllocatorConfigError("to_alloc_conf_string: roundup_power2_divisions value " +
                                 std::to_string(value) + " is neither 0 nor a power of two");
  }
  const bool constant = std::all_of(table.begin(), table.end(),
                                    [&](std::uint64_t value) { return value == table[0]; });
  if (constant)
    return std::to_string(table[0]);

  // List form: the first entry covers the leading run of equal values, `>` the trailing run;
  // in between, zero entries need no mention (the table starts all 0).
  const auto interval_key = [](std::size_t index) { return std::to_string(1ULL << index); };
  std::size_t lead_end = 1;
  while (table[lead_end] == table[0])
    ++lead_end;
  std::size_t tail_start = kRoundupIntervals - 1;
  while (table[tail_start - 1] == table[kRoundupIntervals - 1])
    --tail_start;
  const bool use_tail = table[kRoundupIntervals - 1] != 0;
  const std::size_t explicit_end = use_tail ? tail_start : kRoundupIntervals;

  std::string text = "[" + interval_key(lead_end - 1) + ":" + std::to_string(table[0]);
  for (std::size_t index = lead_end; index < explicit_end; ++index) {
    // The entry just before `>` must be listed even when 0: `>` starts after the last listed.
    if (table[index] != 0 || (use_tail && index + 1 == explicit_end))
      text += "," + interval_key(index) + ":" + std::to_string(table[index]);
  }
  if (use_tail)
    text += ",>:" + std::to_string(table[kRoundupIntervals - 1]);
  return text + "]";
}

}  // namespace

AllocatorConfig AllocatorConfig::parse(std::string_view text) {
  AllocatorConfig config;
  apply_settings(config, text, AssertContext::library_load);
  return config;
}

void AllocatorConfig::apply(std::string_view text) {
  AllocatorConfig updated = *this;
  apply_settings(updated, text, AssertContext::runtime);
  *this = std::move(updated);
}

AllocatorConfig config_from_environment(
    const std::function<std::optional<std::string>(std::string_view name)>& lookup) {
  const std::optional<std::string> cuda = lookup("PYTORCH_CUDA_ALLOC_CONF");
  const std::optional<std::string> hip = lookup("PYTORCH_HIP_ALLOC_CONF");
  const std::optional<std::string> generic = lookup("PYTORCH_ALLOC_CONF");
  // The common reader also honours the HIP name on CUDA builds; the CUDA-specific readers (the
  // load-time backend scan and CUDAAllocatorConfig) only look at the other two.
  const std::optional<std::string>& common = cuda ? cuda : hip ? hip : generic;
  const std::optional<std::string>& cuda_specific = cuda ? cuda : generic;
  AllocatorConfig config;
  if (cuda_specific) {
    const ConfigTokens tokens(*cuda_specific, AssertContext::library_load);
    config.backend = scan_backend(tokens);
    parse_cuda_keys(tokens, config);
  }
  if (common) {
    const ConfigTokens tokens(*common, AssertContext::runtime);
    parse_common_keys(tokens, config);
    config.raw = *common;  // PyTorch's "last allocator settings", what snapshots record
  }
  return config;
}

std::string RecordedAllocatorConfig::note() const {
  if (!recorded)
    return "the snapshot records no allocator_settings (PyTorch 2.0-2.2 or memory_snapshot()): "
           "the config is unknown, PyTorch's defaults are assumed";
  std::string text;
  const auto list = [](const std::vector<std::string>& keys) {
    std::string out;
    for (const std::string& key : keys)
      out += (out.empty() ? "" : ", ") + key;
    return out;
  };
  if (!missing_keys.empty())
    text += "not recorded, at their defaults: " + list(missing_keys);
  if (!ignored_keys.empty())
    text += std::string(text.empty() ? "" : "; ") + "unknown keys ignored: " + list(ignored_keys);
  if (!raw_string_error.empty())
    text += std::string(text.empty() ? "" : "; ") +
            "PYTORCH_CUDA_ALLOC_CONF does not parse with 2.11's rules (" + raw_string_error +
            "), the recorded values are used";
  return text;
}

RecordedAllocatorConfig read_allocator_settings(const nlohmann::json* settings,
                                                TorchVersion writer) {
  RecordedAllocatorConfig out;
  if (settings == nullptr || settings->is_null()) {
    out.recorded = false;
    return out;
  }
  if (!settings->is_object())
    throw AllocatorConfigError("allocator_settings: expected a dict, got " +
                               std::string(settings->type_name()));
  static constexpr std::array<std::string_view, 9> kSettingsKeys{
      "PYTORCH_CUDA_ALLOC_CONF",       "max_split_size",
      "garbage_collection_threshold",  "expandable_segments",
      "pinned_num_register_threads",   "release_lock_on_cudamalloc",
      "pinned_use_cuda_host_register", "graph_capture_record_stream_reuse",
      "roundup_power2_divisions"};
  for (const auto& [key, value] : settings->items()) {
    if (std::find(kSettingsKeys.begin(), kSettingsKeys.end(), key) == kSettingsKeys.end())
      out.ignored_keys.push_back(key);
  }
  if (!settings->empty()) {
    for (std::string_view key : kSettingsKeys) {
      if (settings->contains(key))
        continue;
      out.defaulted_keys.emplace_back(key);
      // 2.3 recorded the first eight keys; graph_capture_record_stream_reuse came with 2.9.
      const bool had_it =
          key != "graph_capture_record_stream_reuse" || writer >= TorchVersion{2, 9};
      if (had_it)
        out.missing_keys.emplace_back(key);
    }
  }
  const auto present = [&](std::string_view key) { return settings->contains(key); };

  AllocatorConfig& config = out.config;
  if (present("PYTORCH_CUDA_ALLOC_CONF")) {
    const nlohmann::json& raw = settings_field(*settings, "PYTORCH_CUDA_ALLOC_CONF");
    if (!raw.is_string())
      throw AllocatorConfigError(
          "allocator_settings: 'PYTORCH_CUDA_ALLOC_CONF' must be a string, got " + raw.dump());
    try {
      config = AllocatorConfig::parse(raw.get<std::string>());
    } catch (const AllocatorConfigError& error) {
      // Older releases accepted options 2.11 refuses (roundup_bypass_threshold_mb, ...): the
      // recorded effective values below still say what the allocator did.
      out.raw_string_error = error.what();
      config = AllocatorConfig{};
      config.raw = raw.get<std::string>();
    }
  }

  if (present("max_split_size")) {
    const std::int64_t max_split = settings_integer(*settings, "max_split_size");
    if (max_split < -1)
      throw AllocatorConfigError(
          "allocator_settings: 'max_split_size' must be -1 (unlimited) or a byte count, got " +
          std::to_string(max_split));
    config.max_split_size = max_split == -1 ? kUnlimited : static_cast<Bytes>(max_split);
  }
  if (present("garbage_collection_threshold")) {
    const nlohmann::json& threshold = settings_field(*settings, "garbage_collection_threshold");
    if (!threshold.is_number())
      throw AllocatorConfigError(
          "allocator_settings: 'garbage_collection_threshold' must be a number, got " +
          threshold.dump());
    config.garbage_collection_threshold = threshold.get<double>();
  }
  const auto flag = [&](std::string_view key, bool& target) {
    if (present(key))
      target = settings_bool(*settings, key);
  };
  flag("expandable_segments", config.expandable_segments);
  flag("release_lock_on_cudamalloc", config.release_lock_on_cudamalloc);
  flag("pinned_use_cuda_host_register", config.pinned_use_cuda_host_register);
  flag("graph_capture_record_stream_reuse", config.graph_capture_record_stream_reuse);
  if (present("pinned_num_register_threads")) {
    const std::int64_t threads = settings_integer(*settings, "pinned_num_register_threads");
    if (threads < 1)
      throw AllocatorConfigError(
          "allocator_settings: 'pinned_num_register_threads' must be >= 1, got " +
          std::to_string(threads));
    config.pinned_num_register_threads = static_cast<std::uint64_t>(threads);
  }

  // Keys are the MiB start of each interval: "1", "2", "4", ..., "32768"; an interval a release
  // did not record keeps its default 0.
  if (present("roundup_power2_divisions")) {
    const nlohmann::json& divisions = settings_field(*settings, "roundup_power2_divisions");
    if (!divisions.is_object())
      throw AllocatorConfigError(
          "allocator_settings: 'roundup_power2_divisions' must be a dict of intervals "
          "\"1\"..\"32768\", got " +
          divisions.dump());
    for (std::size_t index = 0; index < kRoundupIntervals; ++index) {
      const std::string interval = std::to_string(1ULL << index);
      const auto it = divisions.find(interval);
      if (it == divisions.end())
        continue;
      // Above 2^63 - 1 the value is unsigned in JSON and read as int64 it looked negative.
      if (!it->is_number_integer() ||
          (it->is_number_unsigned() ? it->get<std::uint64_t>() > kMaxRoundupDivisions
                                    : it->get<std::int64_t>() < 0))
        throw AllocatorConfigError(
            "allocator_settings: 'roundup_power2_divisions' needs an integer in [0, 2^63) for "
            "interval \"" +
            interval + "\", got " + it->dump());
      config.roundup_power2_divisions[index] = it->get<std::uint64_t>();
    }
  }
  return out;
}

AllocatorConfig config_from_allocator_settings(const nlohmann::json& settings) {
  return read_allocator_settings(&settings).config;
}

std::vector<std::pair<std::string, std::string>> alloc_conf_options(const AllocatorConfig& config) {
  const AllocatorConfig defaults;
  std::vector<std::pair<std::string, std::string>> entries;
  const auto add = [&](std::string_view key, const std::string& value) {
    entries.emplace_back(std::string(key), value);
  };
  const auto add_flag = [&](std::string_view key, bool value, bool default_value) {
    if (value != default_value)
      add(key, value ? "True" : "False");
  };

  if (config.backend != defaults.backend)
    add("backend", std::string(backend_name(config.backend)));
  if (config.large_segment_size != defaults.large_segment_size)
    add("large_segment_size_mb", megabytes_text(config.large_segment_size, "large_segment_size"));
  if (config.max_split_size != kUnlimited)
    add("max_split_size_mb", megabytes_text(config.max_split_size, "max_split_size"));
  if (config.max_non_split_rounding_size != config.large_segment_size)
    add("max_non_split_rounding_mb",
        megabytes_text(config.max_non_split_rounding_size, "max_non_split_rounding_size"));
  if (config.garbage_collection_threshold != 0.0)
    add("garbage_collection_threshold", format_double(config.garbage_collection_threshold));
  if (config.roundup_power2_divisions != defaults.roundup_power2_divisions)
    add("roundup_power2_divisions", roundup_text(config.roundup_power2_divisions));
  add_flag("expandable_segments", config.expandable_segments, defaults.expandable_segments);
  add_flag("pinned_use_background_threads", config.pinned_use_background_threads,
           defaults.pinned_use_background_threads);
  add_flag("release_lock_on_cudamalloc", config.release_lock_on_cudamalloc,
           defaults.release_lock_on_cudamalloc);
  add_flag("pinned_use_cuda_host_register", config.pinned_use_cuda_host_register,
           defaults.pinned_use_cuda_host_register);
  if (config.pinned_num_register_threads != defaults.pinned_num_register_threads)
    add("pinned_num_register_threads", std::to_string(config.pinned_num_register_threads));
  if (config.pinned_reserve_segment_size_mb != defaults.pinned_reserve_segment_size_mb)
    add("pinned_reserve_segment_size_mb", std::to_string(config.pinned_reserve_segment_size_mb));
  add_flag("graph_capture_record_stream_reuse", config.graph_capture_record_stream_reuse,
           defaults.graph_capture_record_stream_reuse);
  if (config.per_process_memory_fraction)
    add("per_process_memory_fraction", format_double(*config.per_process_memory_fraction));
  return entries;
}

std::string to_alloc_conf_string(const AllocatorConfig& config) {
  std::string text;
  for (const auto& [key, value] : alloc_conf_options(config))
    text += (text.empty() ? "" : ",") + key + ":" + value;
  return text;
}

std::string alloc_conf_text(const AllocatorConfig& config) {
  try {
    return to_alloc_conf_string(config);
  } catch (const AllocatorConfigError&) {
    return config.raw;
  }
}

}  // namespace fragscope::alloc
