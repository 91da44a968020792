// Experiment-file decoding. The resolved JSON of each point is decoded by one set of readers that
// know every key, its type and its range, so a variant's override is checked exactly like the
// base configuration.
#include "engine/workload/experiment.h"

#include "engine/core/input_file.h"

#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>

#include "engine/core/devices.h"
#include "engine/core/error.h"
#include "engine/workload/hf_config.h"

namespace fragscope::workload {
namespace {

using nlohmann::json;

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j)
    row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

std::string describe(const json& value) {
  std::string text = value.dump();
  if (text.size() > 60)
    text = text.substr(0, 57) + "...";
  return text;
}

// Reads one JSON object, remembering which keys were consumed so leftovers can be reported.
class Reader {
 public:
  Reader(const json& object, std::string path, std::string_view source)
      : object_(object), path_(std::move(path)), source_(source) {
    if (!object_.is_object())
      fail(path_, "expected an object, got " + describe(object_));
  }

  [[noreturn]] void fail(const std::string& path, const std::string& what) const {
    throw InputError(std::string(source_) + ": " + path + ": " + what);
  }

  std::string at(std::string_view key) const { return path_ + "." + std::string(key); }

  const json* find(std::string_view key) {
    known_.emplace_back(key);
    const auto it = object_.find(std::string(key));
    return it == object_.end() ? nullptr : &*it;
  }

  bool has(std::string_view key) const { return object_.contains(std::string(key)); }

  std::int64_t integer(std::string_view key, std::int64_t fallback, std::int64_t min,
                       std::int64_t max = std::numeric_limits<std::int32_t>::max()) {
    const json* v = find(key);
    if (v == nullptr)
      return fallback;
    if (!v->is_number_integer() && !v->is_number_unsigned())
      fail(at(key), "expected an integer >= " + std::to_string(min) + ", got " + describe(*v));
    // A number above 2^63 - 1 is unsigned in the JSON: reading it as int64 wrapped it to a
    // negative, and the message then quoted the wrapped value. Quote the text as written.
    const bool too_large = v->is_number_unsigned() &&
                           v->get<std::uint64_t>() >
                               static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
    const auto value =
        too_large ? std::numeric_limits<std::int64_t>::max() : v->get<std::int64_t>();
    if (too_large || value < min || value > max)
      fail(at(key), "expected an integer in [" + std::to_string(min) + ", " + std::to_string(max) +
                        "], got " + describe(*v));
    return value;
  }
  int int32(std::string_view key, int fallback, int min,
            int max = std::numeric_limits<std::int32_t>::max()) {
    return static_cast<int>(integer(key, fallback, min, max));
  }

  double number(std::string_view key, double fallback, double min, double max) {
    const json* v = find(key);
    if (v == nullptr)
      return fallback;
    if (!v->is_number())
      fail(at(key), "expected a number, got " + describe(*v));
    const double value = v->get<double>();
    if (!(value >= min && value <= max))
      fail(at(key), "expected a number in [" + std::to_string(min) + ", " + std::to_string(max) +
                        "], got " + describe(*v));
    return value;
  }

  bool boolean(std::string_view key, bool fallback) {
    const json* v = find(key);
    if (v == nullptr)
      return fallback;
    if (!v->is_boolean())
      fail(at(key), "expected true or false, got " + describe(*v));
    return v->get<bool>();
  }

  std::string string(std::string_view key, const std::string& fallback) {
    const json* v = find(key);
    if (v == nullptr)
      return fallback;
    if (!v->is_string())
      fail(at(key), "expected a string, got " + describe(*v));
    return v->get<std::string>();
  }

  template <typename Enum>
  Enum choice(std::string_view key, Enum fallback,
              const std::vector<std::pair<std::string, Enum>>& options) {
    const json* v = find(key);
    if (v == nullptr)
      return fallback;
    std::string names;
    for (const auto& [name, value] : options)
      names += (names.empty() ? "" : ", ") + name;
    if (v->is_string()) {
      for (const auto& [name, value] : options)
        if (name == v->get<std::string>())
          return value;
    }
    fail(at(key), "expected one of " + names + ", got " + describe(*v));
  }

  // Every key of the object must have been asked for.
  void finish() const {
    for (const auto& [key, value] : object_.items()) {
      if (std::find(known_.begin(), known_.end(), key) != known_.end())
        continue;
      std::string best;
      std::size_t best_distance = 3;
      for (const std::string& candidate : known_) {
        const std::size_t d = edit_distance(key, candidate);
        if (d < best_distance) {
          best_distance = d;
          best = candidate;
        }
      }
      fail(at(key),
           "unknown key" + (best.empty() ? std::string() : " (did you mean \"" + best + "\"?)"));
    }
  }

  const std::string& path() const { return path_; }
  std::string_view source() const { return source_; }

 private:
  const json& object_;
  std::string path_;
  std::string_view source_;
  std::vector<std::string> known_;
};

// "hf_config" names a Hugging Face config.json (relative to the experiment file); the other keys
// then override what it gives.
Model read_model(Reader& r) {
  Model m;
  if (const json* hf = r.find("hf_config")) {
    if (!hf->is_string() || hf->get<std::string>().empty())
      r.fail(r.at("hf_config"),
             "expected the path of a Hugging Face config.json, got " + describe(*hf));
    std::filesystem::path path = hf->get<std::string>();
    const std::filesystem::path experiment_file(r.source());
    if (path.is_relative() && experiment_file.has_parent_path())
      path = experiment_file.parent_path() / path;
    try {
      m = load_hf_config(path);
    } catch (const InputError& e) {
      r.fail(r.at("hf_config"), e.what());
    }
  }
  const std::string kind = r.string("kind", m.family == ModelFamily::llama ? "llama" : "gpt");
  if (kind == "llama") {
    if (m.family != ModelFamily::llama) {
      // Llama defaults: no biases, no dropout, SDPA, final RMSNorm
      m = Model{};
      m.family = ModelFamily::llama;
      m.bias = false;
      m.dropout = 0;
      m.attention = Attention::sdpa;
      m.final_layernorm = true;
      m.vocab = 32000;
    }
  } else if (kind == "gpt") {
    if (m.family != ModelFamily::gpt)
      r.fail(r.at("kind"), "\"gpt\" does not match the Hugging Face config's llama family");
  } else {
    r.fail(r.at("kind"), "expected \"gpt\" or \"llama\", got \"" + kind + "\"");
  }
  m.layers = r.int32("layers", m.layers, 1, 1024);
  m.hidden = r.int32("hidden", m.hidden, 1, 1 << 17);
  m.heads = r.int32("heads", m.heads, 1, 1024);
  m.vocab = r.int32("vocab", m.vocab, 1, 1 << 22);
  m.tied_embeddings = r.boolean("tied_embeddings", m.tied_embeddings);
  if (m.family == ModelFamily::llama) {
    m.kv_heads = r.int32("kv_heads", m.kv_heads > 0 ? m.kv_heads : m.heads, 1, 1024);
    m.head_dim = r.int32("head_dim", m.head_dim, 0, 1 << 12);
    if (!r.has("intermediate") && m.intermediate == 0)
      r.fail(r.at("intermediate"), "missing: the SwiGLU width (gate and up projections)");
    m.intermediate = r.int32("intermediate", m.intermediate, 1, 1 << 20);
    m.rope_theta = r.number("rope_theta", m.rope_theta, 1.0, 1e12);
    m.norm_eps = r.number("norm_eps", m.norm_eps, 0.0, 1.0);
    m.max_positions = r.int32("max_positions", m.max_positions, 0, 1 << 24);
    m.qkv_bias = r.boolean("qkv_bias", m.qkv_bias);
    if (m.heads % m.kv_heads != 0)
      r.fail(r.at("kv_heads"), "must divide heads (" + std::to_string(m.heads) + ")");
    if (m.head_dim == 0 && m.hidden % m.heads != 0)
      r.fail(r.at("heads"),
             "must divide hidden (" + std::to_string(m.hidden) + ") unless head_dim is given");
    if (m.effective_head_dim() % 2 != 0)
      r.fail(r.at("head_dim"), "must be even (rotary embeddings rotate pairs)");
    r.finish();
    return m;
  }
  m.ffn_mult = r.int32("ffn_mult", m.ffn_mult, 1, 64);
  m.bias = r.boolean("bias", m.bias);
  m.dropout = r.number("dropout", m.dropout, 0.0, 0.99);
  m.residual_dropout = r.boolean("residual_dropout", m.residual_dropout);
  m.attention = r.choice<Attention>("attention", m.attention,
                                    {{"eager", Attention::eager}, {"sdpa", Attention::sdpa}});
  m.positions = r.int32("positions", m.positions, 0, 1 << 20);
  m.final_layernorm = r.boolean("final_layernorm", m.final_layernorm);
  if (m.hidden % m.heads != 0)
    r.fail(r.at("heads"), "must divide hidden (" + std::to_string(m.hidden) + ")");
  r.finish();
  return m;
}

SeqLenSpec read_seq_len(Reader& r) {
  SeqLenSpec s;
  s.kind = r.choice<SeqLenKind>("kind", SeqLenKind::fixed,
                                {{"fixed", SeqLenKind::fixed},
                                 {"uniform", SeqLenKind::uniform},
                                 {"lognormal", SeqLenKind::lognormal},
                                 {"list", SeqLenKind::list}});
  if (s.kind == SeqLenKind::fixed) {
    s.value = r.int32("value", s.value, 1, 1 << 20);
  } else if (s.kind == SeqLenKind::list) {
    const json* values = r.find("values");
    if (values == nullptr || !values->is_array() || values->empty())
      r.fail(r.at("values"), "expected a non-empty array of positive integers");
    for (std::size_t i = 0; i < values->size(); ++i) {
      const json& v = (*values)[i];
      if (!v.is_number_integer() || v.get<std::int64_t>() < 1 || v.get<std::int64_t>() > (1 << 20))
        r.fail(r.at("values") + "[" + std::to_string(i) + "]",
               "expected a positive integer, got " + describe(v));
      s.values.push_back(v.get<int>());
    }
  } else {
    s.min = r.int32("min", s.min, 1, 1 << 20);
    s.max = r.int32("max", s.max, 1, 1 << 20);
    if (s.max < s.min)
      r.fail(r.at("max"), "must be >= min (" + std::to_string(s.min) + ")");
    s.seed = static_cast<std::uint64_t>(
        r.integer("seed", 7, 0, std::numeric_limits<std::int64_t>::max()));
    if (s.kind == SeqLenKind::lognormal) {
      s.median = r.number("median", s.median, 1.0, 1e7);
      s.sigma = r.number("sigma", s.sigma, 0.0, 10.0);
    }
  }
  s.round_to = r.int32("round_to", 1, 1, 1 << 16);
  s.collation = r.choice<Collation>("collation", Collation::per_batch,
                                    {{"per_batch", Collation::per_batch},
                                     {"pad_to_max", Collation::pad_to_max},
                                     {"pack", Collation::pack}});
  r.finish();
  return s;
}

CompileSpec read_compile(const json& value, const std::string& path, std::string_view source) {
  CompileSpec c;
  if (value.is_boolean()) {
    // true = every non-attention module (LayerNorms and MLPs); the loss is opted in separately
    c.layernorm = c.mlp = value.get<bool>();
    return c;
  }
  Reader r(value, path, source);
  c.scope =
      r.choice<CompileScope>("scope", CompileScope::parts,
                             {{"parts", CompileScope::parts}, {"model", CompileScope::model}});
  c.mode = r.choice<CompileMode>(
      "mode", CompileMode::default_mode,
      {{"default", CompileMode::default_mode}, {"reduce-overhead", CompileMode::reduce_overhead}});
  if (c.scope == CompileScope::model) {
    // torch.compile(model): every module is compiled; the per-part knobs do not apply
    for (const char* part : {"layernorm", "mlp", "loss", "attention"})
      if (r.has(part))
        r.fail(r.at(part), "not with scope \"model\" (the whole model is compiled)");
    r.finish();
    return c;
  }
  if (c.mode != CompileMode::default_mode)
    r.fail(r.at("mode"), "\"reduce-overhead\" (CUDA graphs) needs scope \"model\"");
  c.layernorm = r.boolean("layernorm", false);
  c.mlp = r.boolean("mlp", false);
  c.loss = r.boolean("loss", false);
  if (r.boolean("attention", false))
    r.fail(r.at("attention"),
           "compiling eager attention is not modelled; use model.attention \"sdpa\" for a fused "
           "attention kernel");
  r.finish();
  return c;
}

Training read_training(Reader& r) {
  Training t;
  t.batch_size = r.int32("batch_size", t.batch_size, 1, 1 << 20);
  if (const json* growth = r.find("batch_size_growth")) {
    Reader g(*growth, r.at("batch_size_growth"), r.source());
    t.batch_size_growth_every = g.int32("every_steps", 1, 1);
    t.batch_size_growth = g.int32("add", 0, 0, 1 << 20);
    g.finish();
  }
  t.steps = r.int32("steps", t.steps, 1, 1'000'000);
  t.grad_accum = r.int32("grad_accum", t.grad_accum, 1, 1 << 16);
  t.precision = r.choice<Precision>("precision", t.precision,
                                    {{"fp32", Precision::fp32},
                                     {"bf16-autocast", Precision::bf16_autocast},
                                     {"fp16-autocast", Precision::fp16_autocast},
                                     {"bf16", Precision::bf16}});
  if (const json* seq = r.find("seq_len")) {
    Reader s(*seq, r.at("seq_len"), r.source());
    t.seq_len = read_seq_len(s);
  }
  t.checkpointing = r.choice<Checkpointing>("checkpointing", t.checkpointing,
                                            {{"none", Checkpointing::none},
                                             {"blocks", Checkpointing::blocks},
                                             {"ffn", Checkpointing::ffn}});
  t.checkpoint_every = r.int32("checkpoint_every", 1, 1, 1024);
  if (const json* compile = r.find("compile"))
    t.compile = read_compile(*compile, r.at("compile"), r.source());
  t.optimizer = r.choice<OptimizerKind>("optimizer", t.optimizer,
                                        {{"sgd", OptimizerKind::sgd},
                                         {"adam", OptimizerKind::adam},
                                         {"adamw", OptimizerKind::adamw}});
  t.fused_optimizer = r.boolean("fused", false);
  t.hold_logits = r.boolean("hold_logits", true);
  t.empty_cache_every = r.int32("empty_cache_every", 0, 0);
  t.teardown = r.boolean("teardown", true);
  r.finish();
  return t;
}

DeviceSpec read_device(Reader& r) {
  DeviceSpec d;
  const bool has_preset = r.has("preset");
  const bool has_capacity = r.has("capacity_bytes");
  if (has_preset == has_capacity)
    r.fail(r.path(), "give exactly one of \"preset\" and \"capacity_bytes\"");
  if (has_preset) {
    const std::string name = r.string("preset", "");
    const auto& presets = device_presets();
    const auto it = std::find_if(presets.begin(), presets.end(),
                                 [&](const DevicePreset& p) { return p.name == name; });
    if (it == presets.end()) {
      std::string names;
      for (const DevicePreset& p : presets)
        names += (names.empty() ? "" : ", ") + p.name;
      r.fail(r.at("preset"), "unknown device \"" + name + "\"; presets: " + names);
    }
    const auto reserve = static_cast<Bytes>(
        r.integer("context_reserve_bytes", static_cast<std::int64_t>(it->context_reserve), 0,
                  static_cast<std::int64_t>(it->total_memory) - 1));
    d.name = it->name;
    d.total_memory = it->total_memory;
    d.capacity = it->total_memory - reserve;
  } else {
    d.capacity =
        static_cast<Bytes>(r.integer("capacity_bytes", 0, 2 * static_cast<std::int64_t>(kMiB),
                                     std::numeric_limits<std::int64_t>::max()));
    d.total_memory = static_cast<Bytes>(
        r.integer("total_memory_bytes", static_cast<std::int64_t>(d.capacity),
                  static_cast<std::int64_t>(d.capacity), std::numeric_limits<std::int64_t>::max()));
    d.name = "custom";
  }
  d.allowed = static_cast<Bytes>(
      r.integer("per_process_memory_bytes", 0, 0, static_cast<std::int64_t>(d.capacity)));
  d.name = r.string("name", d.name);
  r.finish();
  return d;
}

// Decodes one resolved configuration (the base with a variant's or sweep point's overrides).
ExperimentPoint decode_point(const json& config, const std::string& name, std::string_view source,
                             const std::string& context) {
  ExperimentPoint p;
  p.name = name;
  p.config = config;
  const std::string root = context.empty() ? "$" : context + ": $";
  Reader top(config, root, source);
  top.find("name");
  top.find("description");
  top.find("variants");
  top.find("sweep");
  const json* device = top.find("device");
  if (device == nullptr)
    top.fail(root, "missing \"device\" ({\"preset\": ...} or {\"capacity_bytes\": ...})");
  Reader dr(*device, top.at("device"), source);
  p.device = read_device(dr);
  if (const json* allocator = top.find("allocator")) {
    Reader ar(*allocator, top.at("allocator"), source);
    const std::string text = ar.string("alloc_conf", "");
    try {
      p.alloc_conf = alloc::AllocatorConfig::parse(text);
    } catch (const alloc::AllocatorConfigError& e) {
      ar.fail(ar.at("alloc_conf"), "\"" + text + "\": " + e.what());
    }
    ar.finish();
  }
  const json* model = top.find("model");
  if (model == nullptr)
    top.fail(root, "missing \"model\"");
  Reader mr(*model, top.at("model"), source);
  p.workload.model = read_model(mr);
  if (const json* training = top.find("training")) {
    Reader tr(*training, top.at("training"), source);
    p.workload.training = read_training(tr);
  }
  if (const json* parallel = top.find("parallel")) {
    Reader pr(*parallel, top.at("parallel"), source);
    p.workload.parallel.fsdp_shards = pr.int32("fsdp_shards", 1, 1, 65536);
    p.workload.parallel.ddp = pr.boolean("ddp", false);
    p.workload.parallel.ddp_bucket_cap_mb = pr.int32("ddp_bucket_cap_mb", 25, 1, 1 << 20);
    p.workload.parallel.fsdp_mixed_precision = pr.boolean("fsdp_mixed_precision", true);
    p.workload.parallel.fsdp_reshard_after_forward = pr.boolean("fsdp_reshard_after_forward", true);
    p.workload.parallel.backend =
        pr.choice("backend", Backend::nccl, {{"nccl", Backend::nccl}, {"gloo", Backend::gloo}});
    pr.finish();
  }
  top.finish();
  try {
    validate(p.workload);
  } catch (const InputError& e) {
    throw InputError(std::string(source) + ": " + (context.empty() ? "" : context + ": ") +
                     e.what());
  }
  return p;
}

constexpr std::size_t kMaxDottedSegments = 8;
// What the resolved points of one file may take together: far beyond any real sweep (100000
// points of a few KiB), short of what a copied long string would need.
constexpr std::size_t kMaxResolvedBytes = 256u << 20;

// Applies {"training.batch_size": 16} style overrides; the first segment must be a section.
json apply_overrides(json config, const json& set, const std::string& path,
                     std::string_view source) {
  if (!set.is_object())
    throw InputError(std::string(source) + ": " + path + ": expected an object of dotted keys");
  static const std::vector<std::string> sections = {"device", "allocator", "model", "training",
                                                    "parallel"};
  for (const auto& [dotted, value] : set.items()) {
    std::vector<std::string> parts;
    std::stringstream stream(dotted);
    for (std::string part; std::getline(stream, part, '.');) {
      // Every key is at most section.group.key; a long chain would nest the configuration so deep
      // that copying it overflows the stack.
      if (parts.size() == kMaxDottedSegments)
        throw InputError(std::string(source) + ": " + path + ".\"" + dotted.substr(0, 80) +
                         (dotted.size() > 80 ? "...\"" : "\"") + ": more than " +
                         std::to_string(kMaxDottedSegments) + " dotted segments");
      parts.push_back(part);
    }
    if (parts.size() < 2 || std::find(sections.begin(), sections.end(), parts[0]) == sections.end())
      throw InputError(std::string(source) + ": " + path + ".\"" + dotted +
                       "\": expected a dotted key under device, allocator, model, training or "
                       "parallel (e.g. \"training.batch_size\")");
    json* node = &config;
    for (std::size_t i = 0; i + 1 < parts.size(); ++i) {
      if (!node->contains(parts[i]))
        (*node)[parts[i]] = json::object();
      node = &(*node)[parts[i]];
      if (!node->is_object())
        throw InputError(std::string(source) + ": " + path + ".\"" + dotted + "\": \"" + parts[i] +
                         "\" is not an object in the base configuration");
    }
    // A device override replaces the other way of giving the device
    if (parts[0] == "device" && parts.size() == 2) {
      if (parts[1] == "preset")
        node->erase("capacity_bytes");
      if (parts[1] == "capacity_bytes")
        node->erase("preset");
    }
    (*node)[parts.back()] = value;
  }
  return config;
}

std::string short_value(const json& value) {
  return value.is_string() ? value.get<std::string>() : value.dump();
}

}  // namespace

const std::vector<DevicePreset>& device_presets() {
  // totalGlobalMem as torch.cuda.get_device_properties reports it (H200: the fixtures' own
  // recording; the others from the "total capacity of X GiB" of PyTorch OOM messages on that
  // card, X rounded to 10 MiB, so within 5 MiB).
  static const std::vector<DevicePreset> presets = [] {
    const auto gib = [](double value) { return static_cast<Bytes>(value * 1024.0) * kMiB; };
    return std::vector<DevicePreset>{
        {"A100-40GB", 42505273344ULL, kDefaultContextReserve},
        {"A100-80GB", gib(79.15), kDefaultContextReserve},
        {"H100-80GB", gib(79.11), kDefaultContextReserve},
        {"H200-141GB", kH200TotalMemory, kDefaultContextReserve},
        {"L4", gib(22.03), kDefaultContextReserve},
        {"RTX-4090", gib(23.65), kDefaultContextReserve},
        {"RTX-3090", gib(23.69), kDefaultContextReserve},
        {"V100-32GB", gib(31.74), kDefaultContextReserve},
        {"V100-16GB", gib(15.77), kDefaultContextReserve},
        {"T4", gib(14.75), kDefaultContextReserve},
    };
  }();
  return presets;
}

Experiment parse_experiment(const json& document, std::string_view source) {
  Experiment e;
  e.definition = document;
  if (!document.is_object())
    throw InputError(std::string(source) + ": $: expected an experiment object");
  const auto name = document.find("name");
  if (name == document.end() || !name->is_string() || name->get<std::string>().empty())
    throw InputError(std::string(source) + ": $.name: expected a non-empty string");
  e.name = name->get<std::string>();
  if (const auto d = document.find("description"); d != document.end()) {
    if (!d->is_string())
      throw InputError(std::string(source) + ": $.description: expected a string");
    e.description = d->get<std::string>();
  }
  json base = document;
  base.erase("variants");
  base.erase("sweep");
  // The description is the experiment's, not each point's: copying it into every resolved point
  // made a long description times a large sweep pass 4 GB.
  base.erase("description");
  const std::size_t base_bytes = base.dump().size();
  std::size_t resolved_bytes = 0;
  const auto account = [&](const json& set, const std::string& path, std::size_t points = 1) {
    resolved_bytes += points * base_bytes + 2 * set.dump().size();  // configurations and names
    if (resolved_bytes > kMaxResolvedBytes)
      throw InputError(std::string(source) + ": " + path + ": the resolved points would take " +
                       "more than " + std::to_string(kMaxResolvedBytes >> 20) +
                       " MiB (each point copies " + "the " + std::to_string(base_bytes) +
                       "-byte base configuration); split " + "the experiment");
  };
  std::map<std::string, bool> seen;
  const auto add = [&](ExperimentPoint point) {
    if (seen[point.name])
      throw InputError(std::string(source) + ": two points are named \"" + point.name + "\"");
    seen[point.name] = true;
    e.points.push_back(std::move(point));
  };
  const auto variants = document.find("variants");
  if (variants != document.end()) {
    if (!variants->is_array())
      throw InputError(std::string(source) + ": $.variants: expected an array");
    for (std::size_t i = 0; i < variants->size(); ++i) {
      const std::string path = "$.variants[" + std::to_string(i) + "]";
      const json& v = (*variants)[i];
      if (!v.is_object())
        throw InputError(std::string(source) + ": " + path + ": expected an object");
      for (const auto& [key, unused] : v.items())
        if (key != "name" && key != "set")
          throw InputError(std::string(source) + ": " + path + "." + key +
                           ": unknown key (a variant has \"name\" and \"set\")");
      if (!v.contains("name") || !v["name"].is_string() || v["name"].get<std::string>().empty())
        throw InputError(std::string(source) + ": " + path + ".name: expected a non-empty string");
      const std::string vname = v["name"].get<std::string>();
      account(v.value("set", json::object()), path);
      const json config =
          apply_overrides(base, v.value("set", json::object()), path + ".set", source);
      add(decode_point(config, vname, source, "variant \"" + vname + "\""));
    }
  }
  const auto sweep = document.find("sweep");
  if (sweep != document.end()) {
    if (!sweep->is_object() || sweep->empty())
      throw InputError(std::string(source) +
                       ": $.sweep: expected an object of dotted keys to arrays of values");
    std::vector<std::pair<std::string, const json*>> axes;
    std::size_t total = 1;
    for (const auto& [key, values] : sweep->items()) {
      if (!values.is_array() || values.empty())
        throw InputError(std::string(source) + ": $.sweep.\"" + key +
                         "\": expected a non-empty array of values");
      axes.emplace_back(key, &values);
      total *= values.size();
      if (total > 100000)
        throw InputError(std::string(source) + ": $.sweep: more than 100000 points");
    }
    if (total * base_bytes > kMaxResolvedBytes)
      account(json::object(), "$.sweep", total);  // fails before copying anything
    for (std::size_t index = 0; index < total; ++index) {
      json set = json::object();
      std::string pname = "sweep:";
      std::size_t rest = index;
      for (std::size_t a = axes.size(); a-- > 0;) {
        const json& values = *axes[a].second;
        const json& value = values[rest % values.size()];
        rest /= values.size();
        set[axes[a].first] = value;
      }
      bool first = true;
      for (const auto& [key, value] : set.items()) {
        pname += (first ? "" : ",") + key + "=" + short_value(value);
        first = false;
      }
      account(set, "$.sweep");
      add(decode_point(apply_overrides(base, set, "$.sweep", source), pname, source, pname));
    }
  }
  if (e.points.empty())
    add(decode_point(base, "base", source, ""));
  return e;
}

Experiment load_experiment(const std::filesystem::path& path) {
  // Regular files only, bounded nesting and numbers a double holds (input_file.h says why).
  return parse_experiment(read_json_file(path, "experiment file"), path.string());
}

std::vector<const ExperimentPoint*> select_points(const Experiment& experiment,
                                                  const std::optional<std::string>& variant,
                                                  std::string_view source) {
  std::vector<const ExperimentPoint*> points;
  for (const auto& point : experiment.points)
    if (!variant || point.name == *variant)
      points.push_back(&point);
  if (points.empty()) {
    std::string names;
    for (const auto& point : experiment.points)
      names += (names.empty() ? "" : ", ") + point.name;
    throw InputError(std::string(source) + ": no point named '" + variant.value_or("") +
                     "' (points: " + names + ")");
  }
  return points;
}

}  // namespace fragscope::workload
