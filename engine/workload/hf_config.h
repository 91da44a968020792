#pragma once
// A Hugging Face transformers `config.json` as the model of a workload, so a user can size their
// own model without translating it. Supported architectures (the config's "architectures"[0], or
// its "model_type" when that is absent):
//   LlamaForCausalLM, MistralForCausalLM  → llama family
//   Qwen2ForCausalLM                      → llama family with q/k/v biases
//   GPT2LMHeadModel                       → gpt family (learned positions, final LayerNorm, tied)
// Anything else is an InputError naming the field and the architectures there are.
#include <filesystem>
#include <string_view>

#include <nlohmann/json.hpp>

#include "engine/workload/workload.h"

namespace fragscope::workload {

// `source` names the file in error messages.
Model model_from_hf_config(const nlohmann::json& config, std::string_view source);
// Reads the file; unreadable or malformed JSON is an InputError naming it.
Model load_hf_config(const std::filesystem::path& path);

}  // namespace fragscope::workload
