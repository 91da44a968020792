// Hugging Face config.json → Model. Field names and defaults are those of transformers'
// LlamaConfig, MistralConfig, Qwen2Config and GPT2Config.
#include "engine/workload/hf_config.h"

#include <limits>
#include <string>

#include "engine/core/error.h"
#include "engine/core/input_file.h"

namespace fragscope::workload {
namespace {

using nlohmann::json;

class HfReader {
 public:
  HfReader(const json& config, std::string_view source) : config_(config), source_(source) {}

  [[noreturn]] void fail(const std::string& field, const std::string& what) const {
    throw InputError(std::string(source_) + ": $." + field + ": " + what);
  }

  bool has(const char* field) const {
    const auto it = config_.find(field);
    return it != config_.end() && !it->is_null();
  }

  int integer(const char* field, int min, int max = std::numeric_limits<int>::max()) const {
    if (!has(field))
      fail(field, "missing (expected an integer >= " + std::to_string(min) + ")");
    return integer_or(field, 0, min, max);
  }
  int integer_or(const char* field, int fallback, int min,
                 int max = std::numeric_limits<int>::max()) const {
    if (!has(field))
      return fallback;
    const json& v = config_.at(field);
    if (!v.is_number_integer() || v.get<std::int64_t>() < min || v.get<std::int64_t>() > max)
      fail(field, "expected an integer in [" + std::to_string(min) + ", " + std::to_string(max) +
                      "], got " + v.dump());
    return v.get<int>();
  }
  double number_or(const char* field, double fallback) const {
    if (!has(field))
      return fallback;
    const json& v = config_.at(field);
    if (!v.is_number() || v.get<double>() < 0)
      fail(field, "expected a non-negative number, got " + v.dump());
    return v.get<double>();
  }
  bool boolean_or(const char* field, bool fallback) const {
    if (!has(field))
      return fallback;
    const json& v = config_.at(field);
    if (!v.is_boolean())
      fail(field, "expected true or false, got " + v.dump());
    return v.get<bool>();
  }

 private:
  const json& config_;
  std::string_view source_;
};

constexpr const char* kSupported =
    "LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, GPT2LMHeadModel";

Model llama_like(const HfReader& r, bool qkv_bias) {
  Model m;
  m.family = ModelFamily::llama;
  m.hidden = r.integer("hidden_size", 1, 1 << 17);
  m.layers = r.integer("num_hidden_layers", 1, 1024);
  m.heads = r.integer("num_attention_heads", 1, 1024);
  m.kv_heads = r.integer_or("num_key_value_heads", m.heads, 1, m.heads);
  if (m.heads % m.kv_heads != 0)
    r.fail("num_key_value_heads", "must divide num_attention_heads (" + std::to_string(m.heads) +
                                      "), got " + std::to_string(m.kv_heads));
  if (!r.has("head_dim") && m.hidden % m.heads != 0)
    r.fail("num_attention_heads",
           "must divide hidden_size (" + std::to_string(m.hidden) + ") when head_dim is not given");
  m.head_dim = r.integer_or("head_dim", m.hidden / m.heads, 2, 1 << 12);
  if (m.head_dim % 2 != 0)
    r.fail("head_dim", "must be even (rotary embeddings rotate pairs)");
  m.intermediate = r.integer("intermediate_size", 1, 1 << 20);
  m.vocab = r.integer("vocab_size", 1, 1 << 22);
  m.tied_embeddings = r.boolean_or("tie_word_embeddings", false);
  m.rope_theta = r.number_or("rope_theta", 10000.0);
  m.norm_eps = r.number_or("rms_norm_eps", 1e-6);
  m.max_positions = r.integer_or("max_position_embeddings", 0, 0, 1 << 24);
  m.qkv_bias = qkv_bias;
  if (r.boolean_or("attention_bias", false))
    r.fail("attention_bias",
           "true (a biased o_proj) is not modelled; q/k/v biases are "
           "(Qwen2ForCausalLM)");
  if (r.boolean_or("mlp_bias", false))
    r.fail("mlp_bias", "true (biased MLP projections) is not modelled");
  m.bias = false;
  m.dropout = 0;
  m.residual_dropout = false;
  m.attention = Attention::sdpa;
  m.final_layernorm = true;
  return m;
}

Model gpt2(const HfReader& r) {
  Model m;
  m.family = ModelFamily::gpt;
  m.hidden = r.integer("n_embd", 1, 1 << 17);
  m.layers = r.integer("n_layer", 1, 1024);
  m.heads = r.integer("n_head", 1, 1024);
  if (m.hidden % m.heads != 0)
    r.fail("n_head", "must divide n_embd (" + std::to_string(m.hidden) + ")");
  const int inner = r.integer_or("n_inner", 4 * m.hidden, 1, 1 << 20);
  if (inner % m.hidden != 0)
    r.fail("n_inner", "must be a multiple of n_embd (" + std::to_string(m.hidden) +
                          ") to be modelled, got " + std::to_string(inner));
  m.ffn_mult = inner / m.hidden;
  m.vocab = r.integer("vocab_size", 1, 1 << 22);
  m.positions = r.integer_or("n_positions", 1024, 1, 1 << 20);
  m.tied_embeddings = r.boolean_or("tie_word_embeddings", true);
  m.bias = true;
  m.dropout = r.number_or("attn_pdrop", 0.1);
  m.residual_dropout = r.number_or("resid_pdrop", 0.1) > 0;
  m.attention = Attention::sdpa;  // transformers' default attention implementation
  m.final_layernorm = true;
  return m;
}

}  // namespace

Model model_from_hf_config(const json& config, std::string_view source) {
  if (!config.is_object())
    throw InputError(std::string(source) + ": $: expected a Hugging Face config object");
  const HfReader r(config, source);
  std::string architecture;
  std::string field = "architectures[0]";
  if (const auto it = config.find("architectures"); it != config.end() && !it->is_null()) {
    if (!it->is_array() || it->empty() || !(*it)[0].is_string())
      r.fail("architectures",
             "expected an array of architecture names, e.g. [\"LlamaForCausalLM\"]");
    architecture = (*it)[0].get<std::string>();
  } else if (const auto type = config.find("model_type");
             type != config.end() && type->is_string()) {
    field = "model_type";
    const std::string t = type->get<std::string>();
    architecture = t == "llama"     ? "LlamaForCausalLM"
                   : t == "mistral" ? "MistralForCausalLM"
                   : t == "qwen2"   ? "Qwen2ForCausalLM"
                   : t == "gpt2"    ? "GPT2LMHeadModel"
                                    : t;
  } else {
    r.fail("architectures", std::string("missing (and no model_type); supported: ") + kSupported);
  }
  if (architecture == "LlamaForCausalLM" || architecture == "MistralForCausalLM")
    return llama_like(r, false);
  if (architecture == "Qwen2ForCausalLM")
    return llama_like(r, true);
  if (architecture == "GPT2LMHeadModel")
    return gpt2(r);
  r.fail(field, "architecture \"" + architecture + "\" is not modelled; supported: " + kSupported);
}

Model load_hf_config(const std::filesystem::path& path) {
  // Regular files only, bounded size and nesting, 1e400 refused (input_file.h): a FIFO blocked,
  // deep nesting overflowed the stack and 1e400 escaped as an internal error.
  const json config = read_json_file(path, "Hugging Face config");
  return model_from_hf_config(config, path.string());
}

Experiment experiment_from_hf_config(const std::filesystem::path& config,
                                     const HfRunOptions& options) {
  const std::filesystem::path absolute = std::filesystem::absolute(config);
  const Model model = load_hf_config(absolute);  // reports a bad config before anything else
  json document = {
      {"name", "hf:" + config.filename().string()},
      {"description", "The model of the Hugging Face config " + absolute.string() + " (" +
                          (model.family == ModelFamily::llama ? "llama" : "gpt") +
                          " family), fp32 parameters under bf16 autocast, AdamW, on " +
                          options.device + "."},
      {"device", {{"preset", options.device}}},
      {"model", {{"hf_config", absolute.string()}}},
      {"training",
       {{"batch_size", options.batch_size},
        {"steps", options.steps},
        {"seq_len", {{"kind", "fixed"}, {"value", options.seq_len}}}}}};
  return parse_experiment(document, "--hf-config " + config.string());
}

Experiment experiment_with_hf_model(const std::filesystem::path& experiment_file,
                                    const std::filesystem::path& config) {
  json document = read_json_file(experiment_file, "experiment file");
  if (!document.is_object())
    throw InputError(experiment_file.string() + ": $: expected an experiment object");
  document["model"] = {{"hf_config", std::filesystem::absolute(config).string()}};
  return parse_experiment(document, experiment_file.string());
}

}  // namespace fragscope::workload
