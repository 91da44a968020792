// Hugging Face config.json as the model: the supported architectures map onto the generator's
// families (parameter counts checked against the published counts of real checkpoints), a config
// of each runs, and anything else is refused naming the field.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "engine/core/error.h"
#include "engine/workload/experiment.h"
#include "engine/workload/hf_config.h"
#include "engine/workload/runner.h"

namespace fragscope::workload {
namespace {

const std::string kConfigs = std::string(FRAGSCOPE_SOURCE_DIR) + "/tests/fixtures/hf-configs/";

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(HfConfig, LlamaConfigIsTheRecordedLlama) {
  const Model m = load_hf_config(kConfigs + "llama-l8-h1024.json");
  EXPECT_EQ(m.family, ModelFamily::llama);
  EXPECT_EQ(m.layers, 8);
  EXPECT_EQ(m.kv_heads, 4);
  EXPECT_EQ(m.intermediate, 2816);
  EXPECT_FALSE(m.tied_embeddings);
  EXPECT_FALSE(m.qkv_bias);
  // the same model as the calibration point of llama_l8_h1024_varlen: the same request stream
  const Experiment calibration = load_experiment(
      std::string(FRAGSCOPE_SOURCE_DIR) + "/experiments/calibration-torch-2.11-h200-turn2.json");
  Workload w = calibration.points.at(0).workload;
  ASSERT_EQ(calibration.points.at(0).name, "llama_l8_h1024_varlen");
  w.training.steps = 2;
  Workload from_hf = w;
  from_hf.model = m;
  const RequestStream a = generate(w);
  const RequestStream b = generate(from_hf);
  ASSERT_EQ(a.requests.size(), b.requests.size());
  for (std::size_t i = 0; i < a.requests.size(); ++i)
    ASSERT_EQ(a.requests[i].size, b.requests[i].size) << i;
}

// Published parameter counts: Qwen2-0.5B 494,032,768 (q/k/v biases, tied); GPT-2 small
// 124,439,808; Mistral-7B-v0.1 7,241,732,096; Llama-2-7B 6,738,415,616.
TEST(HfConfig, ParameterCountsOfRealCheckpoints) {
  Model qwen = load_hf_config(kConfigs + "qwen2-small.json");
  EXPECT_TRUE(qwen.qkv_bias);
  EXPECT_TRUE(qwen.tied_embeddings);
  qwen.layers = 24;
  EXPECT_EQ(parameter_count(qwen), 494032768U);
  const Model gpt2 = load_hf_config(kConfigs + "gpt2-small.json");
  EXPECT_EQ(gpt2.family, ModelFamily::gpt);
  EXPECT_EQ(gpt2.ffn_mult, 4);
  EXPECT_EQ(parameter_count(gpt2), 124439808U);
  Model mistral = load_hf_config(kConfigs + "mistral-small.json");
  mistral.layers = 32;
  mistral.hidden = 4096;
  mistral.heads = 32;
  mistral.head_dim = 128;
  mistral.intermediate = 14336;
  mistral.vocab = 32000;
  EXPECT_EQ(parameter_count(mistral), 7241732096U);
  Model llama = load_hf_config(kConfigs + "llama-l8-h1024.json");
  llama.layers = 32;
  llama.hidden = 4096;
  llama.heads = 32;
  llama.kv_heads = 32;
  llama.head_dim = 128;
  llama.intermediate = 11008;
  EXPECT_EQ(parameter_count(llama), 6738415616U);
}

class HfConfigRuns : public testing::TestWithParam<const char*> {};

TEST_P(HfConfigRuns, OneOfEachArchitectureRuns) {
  HfRunOptions options;
  options.device = "H200-141GB";
  options.batch_size = 2;
  options.seq_len = 512;
  options.steps = 2;
  const Experiment e = experiment_from_hf_config(kConfigs + GetParam(), options);
  ASSERT_EQ(e.points.size(), 1U);
  const PointResult r = run_point(e.points[0], false);
  EXPECT_FALSE(r.oom);
  EXPECT_EQ(r.steps_completed, 2);
  // at least parameters, gradients and the two Adam states, all fp32
  EXPECT_GT(r.peak_allocated, 16 * parameter_count(e.points[0].workload.model));
}

INSTANTIATE_TEST_SUITE_P(Architectures, HfConfigRuns,
                         testing::Values("llama-l8-h1024.json", "mistral-small.json",
                                         "qwen2-small.json", "gpt2-small.json"));

TEST(HfConfig, UnknownArchitectureIsRefusedNamingTheField) {
  const std::string error = error_of([] { load_hf_config(kConfigs + "unsupported-t5.json"); });
  EXPECT_NE(error.find("unsupported-t5.json: $.architectures[0]"), std::string::npos) << error;
  EXPECT_NE(error.find("T5ForConditionalGeneration"), std::string::npos) << error;
  EXPECT_NE(error.find("LlamaForCausalLM"), std::string::npos) << error;
}

TEST(HfConfig, BadFieldsAreNamed) {
  const nlohmann::json missing = {{"architectures", {"LlamaForCausalLM"}}, {"hidden_size", 64}};
  EXPECT_NE(error_of([&] {
              model_from_hf_config(missing, "c.json");
            }).find("c.json: $.num_hidden_layers: missing"),
            std::string::npos);
  nlohmann::json gqa = {{"model_type", "mistral"},  {"hidden_size", 64},
                        {"num_hidden_layers", 2},   {"num_attention_heads", 4},
                        {"num_key_value_heads", 3}, {"intermediate_size", 128},
                        {"vocab_size", 100}};
  EXPECT_NE(error_of([&] {
              model_from_hf_config(gqa, "c.json");
            }).find("c.json: $.num_key_value_heads: must divide num_attention_heads"),
            std::string::npos);
  gqa["num_key_value_heads"] = 2;
  EXPECT_EQ(model_from_hf_config(gqa, "c.json").kv_heads, 2);
  EXPECT_NE(error_of([] {
              load_hf_config(kConfigs + "absent.json");
            }).find("absent.json: no such file (the Hugging Face config)"),
            std::string::npos);
}

// A config.json is a user's file: a FIFO blocked in open(), nesting 100k deep overflowed the
// stack and 1e400 escaped as "internal error: [json.exception...]". Each is an InputError
// naming the file.
TEST(HfConfig, HostileFilesAreRefusedNamingTheFile) {
  const auto dir = std::filesystem::temp_directory_path() / "fragscope-hf-hostile";
  std::filesystem::create_directories(dir);
  const auto fifo = dir / "fifo.json";
  std::filesystem::remove(fifo);
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_NE(
      error_of([&] { load_hf_config(fifo); }).find("fifo.json: the Hugging Face config is a FIFO"),
      std::string::npos);
  const auto deep = dir / "deep.json";
  std::ofstream(deep) << std::string(100000, '[') << std::string(100000, ']');
  EXPECT_NE(error_of([&] {
              load_hf_config(deep);
            }).find("deep.json: line 1, column 65: JSON nested deeper than 64"),
            std::string::npos);
  const auto huge = dir / "huge.json";
  std::ofstream(huge) << R"({"model_type": "llama", "hidden_size": 1e400})";
  EXPECT_NE(error_of([&] {
              load_hf_config(huge);
            }).find("huge.json: line 1, column 40: the number 1e400 is out of range"),
            std::string::npos);
  // The same reader for the experiment file that names a config.
  EXPECT_NE(error_of([&] {
              experiment_with_hf_model(deep, kConfigs + "gpt2-small.json");
            }).find("deep.json: line 1, column 65: JSON nested deeper"),
            std::string::npos);
  std::filesystem::remove_all(dir);
}

// In an experiment file, "hf_config" is relative to the file and other keys override it.
TEST(HfConfig, ExperimentModelFromConfigWithOverrides) {
  const nlohmann::json document = {{"name", "hf"},
                                   {"device", {{"preset", "H200-141GB"}}},
                                   {"model", {{"hf_config", "llama-l8-h1024.json"}, {"layers", 2}}},
                                   {"training", {{"steps", 1}, {"batch_size", 1}}}};
  const Experiment e = parse_experiment(document, kConfigs + "experiment.json");
  EXPECT_EQ(e.points.at(0).workload.model.family, ModelFamily::llama);
  EXPECT_EQ(e.points.at(0).workload.model.layers, 2);
  EXPECT_EQ(e.points.at(0).workload.model.kv_heads, 4);
  const nlohmann::json bad = {{"name", "hf"},
                              {"device", {{"preset", "H200-141GB"}}},
                              {"model", {{"hf_config", "unsupported-t5.json"}}}};
  const std::string error = error_of([&] { parse_experiment(bad, kConfigs + "experiment.json"); });
  EXPECT_NE(error.find("$.model.hf_config"), std::string::npos) << error;
  EXPECT_NE(error.find("architectures[0]"), std::string::npos) << error;
}

}  // namespace
}  // namespace fragscope::workload
