// Validation of a workload's knob combination, and the step-time model.
#include <cmath>
#include <string>

#include "engine/core/error.h"
#include "engine/workload/compiled_plan.h"
#include "engine/workload/step_generator.h"
#include "engine/workload/workload.h"

namespace fragscope::workload {
namespace {

[[noreturn]] void reject(const std::string& where, const std::string& what) {
  throw InputError("workload: " + where + ": " + what);
}

// Whether micro-batches can differ in length (a compiled model recompiles for a new length).
bool varying_length(const SeqLenSpec& s) {
  return s.kind != SeqLenKind::fixed;
}

void require_positive(int value, const char* where) {
  if (value <= 0)
    reject(where, "must be a positive integer, got " + std::to_string(value));
}

// Forward FLOPs of one micro-batch, split into what a recompute repeats (workload-model.md §3:
// matmul FLOPs per token and layer 8h² (attention projections) + 4·f·h (FFN) + 4·s·h (scores and
// ×V); LM head 2·V·h per token).
struct Flops {
  double forward = 0;
  double recompute = 0;
};

Flops micro_batch_flops(const Workload& w, double tokens, double seq) {
  const Model& m = w.model;
  const double h = m.hidden;
  double attention = 0;
  double ffn = 0;
  if (m.family == ModelFamily::llama) {
    const double q = m.query_width();
    const double kv = m.kv_width();
    attention = 4 * h * (q + kv) + 4 * seq * q;
    ffn = 6 * h * m.intermediate;
  } else {
    const double f = static_cast<double>(m.ffn_mult) * h;
    attention = 8 * h * h + 4 * seq * h;
    ffn = 4 * f * h;
  }
  Flops out;
  out.forward = tokens * (m.layers * (attention + ffn) + 2.0 * m.vocab * h);
  switch (w.training.checkpointing) {
    case Checkpointing::none:
      break;
    case Checkpointing::ffn:
      out.recompute = tokens * m.layers * ffn;
      break;
    case Checkpointing::blocks: {
      const int every = w.training.checkpoint_every;
      const int checkpointed = (m.layers + every - 1) / every;
      out.recompute = tokens * checkpointed * (attention + ffn);
      break;
    }
  }
  return out;
}

// Per-micro-batch efficiency: small micro-batches keep the GPU less busy. Fitted to the measured
// "bs 4 × 4 accumulation is 13% slower than bs 16" (workload-model.md §7.4): e(n) = n / (n + n0)
// with n0 = 742 tokens.
constexpr double kHalfEfficiencyTokens = 742;
// torch.compile speed-up measured on the 4 × 4 + MLP-checkpoint case (§7.4): +8.7% throughput.
constexpr double kCompileSpeedup = 1.087;

double efficiency(double tokens) {
  return tokens / (tokens + kHalfEfficiencyTokens);
}

}  // namespace

void validate(const Workload& w) {
  const Model& m = w.model;
  const Training& t = w.training;
  require_positive(m.layers, "model.layers");
  require_positive(m.hidden, "model.hidden");
  require_positive(m.heads, "model.heads");
  require_positive(m.ffn_mult, "model.ffn_mult");
  require_positive(m.vocab, "model.vocab");
  if (m.family == ModelFamily::llama) {
    require_positive(m.intermediate, "model.intermediate");
    if (m.kv_heads < 0 || m.head_dim < 0)
      reject("model.kv_heads", "kv_heads and head_dim must be >= 0");
    if (m.heads % m.effective_kv_heads() != 0)
      reject("model.kv_heads", "must divide model.heads (" + std::to_string(m.heads) + ")");
    if (m.head_dim == 0 && m.hidden % m.heads != 0)
      reject("model.heads", "must divide model.hidden (" + std::to_string(m.hidden) +
                                ") unless model.head_dim is given");
    if (m.effective_head_dim() % 2 != 0)
      reject("model.head_dim", "must be even (rotary embeddings rotate pairs)");
    if (t.checkpointing == Checkpointing::ffn)
      reject("training.checkpointing", "\"ffn\" is modelled for the gpt family; use \"blocks\"");
    if (t.compile.any() && !t.compile.whole_model())
      reject("training.compile",
             "per-part compile is modelled for the gpt family; use {\"scope\": \"model\"}");
  } else if (m.hidden % m.heads != 0) {
    reject("model.heads", "must divide model.hidden (" + std::to_string(m.hidden) + ")");
  }
  if (m.dropout < 0 || m.dropout >= 1)
    reject("model.dropout", "must be in [0, 1)");
  if (m.positions < 0)
    reject("model.positions", "must be >= 0");
  if (t.compile.whole_model()) {
    // Inductor's plans were recorded for the recorder's GPT and Llama (compiled_plan.h); what
    // they do not cover is refused rather than guessed.
    const bool llama = m.family == ModelFamily::llama;
    if (llama && m.qkv_bias)
      reject("model.qkv_bias",
             "torch.compile of the whole model is modelled for the recorded Llama, whose "
             "projections have no biases (Qwen2's q/k/v biases change Inductor's graphs)");
    if (llama && m.tied_embeddings)
      reject("model.tied_embeddings",
             "torch.compile of the whole model is modelled for the recorded Llama, whose LM head "
             "is untied (a tied head changes the backward's gradient outputs)");
    if (llama && m.head_dim > 0 && m.head_dim * m.heads != m.hidden)
      reject("model.head_dim",
             "torch.compile of the whole model is modelled with head_dim = hidden / heads (the "
             "recorded Llama's plans are sized by hidden and heads)");
    if (m.layers < detail::kCompiledMinLayers)
      reject("model.layers", "torch.compile of the whole model is modelled from " +
                                 std::to_string(detail::kCompiledMinLayers) + " blocks up");
    if (t.checkpointing != Checkpointing::none)
      reject("training.checkpointing",
             "not with torch.compile of the whole model (no recorded plan of a compiled "
             "checkpoint)");
    if (!llama && (m.attention != Attention::eager || !m.bias || m.tied_embeddings ||
                   m.positions > 0 || m.final_layernorm || m.residual_dropout || m.dropout <= 0))
      reject("training.compile.scope",
             "\"model\" is modelled for the recorder's GPT (eager attention with dropout, "
             "biases, no positions, no ln_f, untied head): the plans are Inductor's graphs of "
             "that model");
    if (t.precision != Precision::bf16_autocast)
      reject("training.precision",
             "torch.compile of the whole model is modelled under "
             "bf16 autocast (the recorded plans)");
    if (varying_length(t.seq_len))
      reject("training.seq_len",
             "torch.compile of the whole model is modelled for one fixed length (a new length "
             "recompiles, with dynamic shapes from the second)");
    if (w.parallel.fsdp_shards > 1 || w.parallel.ddp)
      reject("parallel", "not with torch.compile of the whole model");
  }
  require_positive(t.batch_size, "training.batch_size");
  require_positive(t.steps, "training.steps");
  require_positive(t.grad_accum, "training.grad_accum");
  require_positive(t.checkpoint_every, "training.checkpoint_every");
  if (t.batch_size_growth < 0 || t.batch_size_growth_every < 0)
    reject("training.batch_size_growth", "must be >= 0");
  if (t.empty_cache_every < 0)
    reject("training.empty_cache_every", "must be >= 0");
  const SeqLenSpec& s = t.seq_len;
  require_positive(s.round_to, "training.seq_len.round_to");
  switch (s.kind) {
    case SeqLenKind::fixed:
      require_positive(s.value, "training.seq_len.value");
      break;
    case SeqLenKind::uniform:
    case SeqLenKind::lognormal:
      require_positive(s.min, "training.seq_len.min");
      if (s.max < s.min)
        reject("training.seq_len.max", "must be >= training.seq_len.min");
      if (s.kind == SeqLenKind::lognormal && (s.median <= 0 || s.sigma < 0))
        reject("training.seq_len", "median must be > 0 and sigma >= 0");
      break;
    case SeqLenKind::list:
      if (s.values.empty())
        reject("training.seq_len.values", "must not be empty");
      for (int v : s.values)
        require_positive(v, "training.seq_len.values[]");
      break;
  }
  if (m.positions > 0) {
    const int longest = s.kind == SeqLenKind::fixed ? s.value : s.max;
    if (longest > m.positions)
      reject("model.positions", "is " + std::to_string(m.positions) + " but sequences can be " +
                                    std::to_string(longest) + " long");
  }
  require_positive(w.parallel.fsdp_shards, "parallel.fsdp_shards");
  if (w.parallel.ddp && w.parallel.fsdp_shards > 1)
    throw InputError(
        "parallel.ddp and parallel.fsdp_shards > 1 exclude each other: a model is "
        "wrapped in DDP or sharded by FSDP, not both");
}

double estimated_step_time_ratio(const Workload& w) {
  const std::vector<MicroBatch> shapes = micro_batches(w.training);
  const int accum = w.training.grad_accum;
  double actual = 0;
  double reference = 0;
  Workload plain = w;
  plain.training.checkpointing = Checkpointing::none;
  for (std::size_t first = 0; first + static_cast<std::size_t>(accum) <= shapes.size();
       first += static_cast<std::size_t>(accum)) {
    double step_tokens = 0;
    double step_seq = 0;
    for (int i = 0; i < accum; ++i) {
      const MicroBatch& mb = shapes[first + static_cast<std::size_t>(i)];
      const double tokens = static_cast<double>(mb.batch_size) * mb.seq_len;
      const Flops f = micro_batch_flops(w, tokens, mb.seq_len);
      actual += (3 * f.forward + f.recompute) / efficiency(tokens);
      step_tokens += tokens;
      step_seq += mb.seq_len;
    }
    const Flops merged = micro_batch_flops(plain, step_tokens, step_seq / accum);
    reference += 3 * merged.forward / efficiency(step_tokens);
  }
  if (w.training.compile.any())
    actual /= kCompileSpeedup;
  return reference > 0 ? actual / reference : 1.0;
}

std::uint64_t parameter_count(const Model& model) {
  const auto h = static_cast<std::uint64_t>(model.hidden);
  std::uint64_t per_layer = 0;
  std::uint64_t total = 0;
  if (model.family == ModelFamily::llama) {
    const auto q = static_cast<std::uint64_t>(model.query_width());
    const auto kv = static_cast<std::uint64_t>(model.kv_width());
    const auto inter = static_cast<std::uint64_t>(model.intermediate);
    per_layer = 2 * h + h * q + 2 * h * kv + q * h + 3 * h * inter;
    if (model.qkv_bias)
      per_layer += q + 2 * kv;
    total = h;  // the final RMSNorm
  } else {
    const auto f = static_cast<std::uint64_t>(model.ffn_mult) * h;
    const std::uint64_t b = model.bias ? 1 : 0;
    per_layer =
        2 * h + 2 * h * b + 3 * h * h + 3 * h * b + h * h + h * b + 2 * f * h + f * b + h * b;
    total += static_cast<std::uint64_t>(model.positions) * h;
    if (model.final_layernorm)
      total += h + h * b;
  }
  total += static_cast<std::uint64_t>(model.layers) * per_layer;
  total += static_cast<std::uint64_t>(model.vocab) * h * (model.tied_embeddings ? 1 : 2);
  return total;
}

RequestStream generate(const Workload& workload) {
  validate(workload);
  RequestStream out;
  if (workload.model.family == ModelFamily::llama)
    detail::generate_llama(workload, out);
  else
    detail::generate_gpt(workload, out);
  return out;
}

}  // namespace fragscope::workload
