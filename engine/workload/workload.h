#pragma once
// A decoder (GPT or Llama family) training loop described by its knobs, and the request stream it
// makes of the CUDA caching allocator, in PyTorch's order (workload-model.md §1.5).
//
// Strategy: the generator walks one training step the way eager PyTorch runs it — parameter
// init, a forward that allocates every op's output and keeps what autograd saves, the loss, a
// backward in reverse layer order that frees saved tensors as their node runs and creates
// gradients, the optimizer step, zero_grad(set_to_none=True). Sizes and the order of allocations
// and frees were taken from the real PyTorch 2.11 recordings in tests/fixtures/torch-2.11-h200
// (op by op, including cuBLAS workspaces, the cuBLASLt bias-gradient workspace and the
// embedding backward's sort buffers), so the stream of the fixture model matches the recorded one.
// Knobs the fixtures do not cover (SDPA, checkpointing of the FFN, compile, FSDP) follow the
// measured saved-tensor sets of workload-model.md §1.4 and §2.2.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/core/request.h"
#include "engine/core/units.h"

namespace fragscope::workload {

enum class Attention : std::uint8_t { eager, sdpa };
enum class Precision : std::uint8_t { fp32, bf16_autocast, fp16_autocast, bf16 };
enum class Checkpointing : std::uint8_t { none, blocks, ffn };
enum class OptimizerKind : std::uint8_t { sgd, adam, adamw };
enum class SeqLenKind : std::uint8_t { fixed, uniform, lognormal, list };
// How per-sample lengths become the micro-batch's padded length T.
//   per_batch: one length drawn per micro-batch (what the fixtures' script does);
//   pad_to_max: one length per sample, T = the longest in the micro-batch;
//   pack: samples concatenated into rows of seq_len.max tokens (T is always max).
enum class Collation : std::uint8_t { per_batch, pad_to_max, pack };

// Which decoder family the model is: GPT-2 style (LayerNorm, GeLU MLP, fused QKV, learned or no
// positions) or Llama style (RMSNorm, SwiGLU MLP, rotary embeddings, grouped-query attention;
// Mistral and Qwen2 are Llama-style too, Qwen2 with q/k/v biases).
enum class ModelFamily : std::uint8_t { gpt, llama };

struct Model {
  ModelFamily family = ModelFamily::gpt;
  int layers = 8;
  int hidden = 1024;
  int heads = 16;
  int ffn_mult = 4;  // gpt: the MLP is ffn_mult × hidden wide
  int vocab = 8192;
  bool tied_embeddings = false;
  bool bias = true;               // gpt: every linear and LayerNorm has a bias
  double dropout = 0.1;           // attention-probability dropout (eager; flash keeps no mask)
  bool residual_dropout = false;  // nanoGPT-style dropout after attention and after the MLP
  Attention attention = Attention::eager;
  int positions = 0;             // learned position-embedding rows; 0 = none (the fixtures)
  bool final_layernorm = false;  // ln_f before the LM head (GPT-2); the fixtures have none
  // llama family
  int kv_heads = 0;      // grouped-query attention: key/value heads (0 = heads)
  int head_dim = 0;      // 0 = hidden / heads
  int intermediate = 0;  // SwiGLU width (gate and up projections)
  double rope_theta = 10000;
  double norm_eps = 1e-5;
  int max_positions = 0;  // longest sequence the rotary table is meant for (0 = unlimited)
  bool qkv_bias = false;  // Qwen2: q, k and v projections have biases

  int query_width() const { return heads * effective_head_dim(); }
  int kv_width() const { return effective_kv_heads() * effective_head_dim(); }
  int effective_head_dim() const { return head_dim > 0 ? head_dim : hidden / heads; }
  int effective_kv_heads() const { return kv_heads > 0 ? kv_heads : heads; }
};

struct SeqLenSpec {
  SeqLenKind kind = SeqLenKind::fixed;
  int value = 1024;         // fixed
  int min = 32;             // uniform, lognormal (clip)
  int max = 2048;           // uniform, lognormal (clip); pack: row length
  double median = 492.749;  // lognormal: exp(mu)
  double sigma = 0.6;
  std::uint64_t seed = 7;
  std::vector<int> values;  // list: one per micro-batch, in order (cycled when shorter)
  int round_to = 1;         // T rounded up to a multiple of this (bucketing)
  Collation collation = Collation::per_batch;
};

// What torch.compile covers (workload-model.md §5). scope parts: compiled LayerNorms write their
// 16-bit output directly, a compiled MLP fuses the residual dropout, a compiled loss keeps only
// the 16-bit logits and per-row statistics. scope model: torch.compile(model) — the whole forward
// and backward are Inductor graphs (the loss and the optimizer stay eager), generated from the
// recorded Inductor plans (compiled_plan.h; the recorder's GPT and Llama only, validate() refuses
// the rest); mode reduce-overhead runs them under cudagraph trees: a warm-up and a capture in a
// private pool, then replays that ask the allocator for nothing.
enum class CompileScope : std::uint8_t { parts, model };
enum class CompileMode : std::uint8_t { default_mode, reduce_overhead };

struct CompileSpec {
  CompileScope scope = CompileScope::parts;
  CompileMode mode = CompileMode::default_mode;
  bool layernorm = false;
  bool mlp = false;
  bool loss = false;
  bool whole_model() const { return scope == CompileScope::model; }
  bool any() const { return whole_model() || layernorm || mlp || loss; }
};

struct Training {
  int batch_size = 8;
  int batch_size_growth_every = 0;  // every N optimizer steps the micro-batch grows ...
  int batch_size_growth = 0;        // ... by this many samples (the gpt_oom_cap fixture)
  int steps = 20;
  int grad_accum = 1;
  Precision precision = Precision::bf16_autocast;
  SeqLenSpec seq_len;
  Checkpointing checkpointing = Checkpointing::none;
  int checkpoint_every = 1;  // blocks: every k-th block is checkpointed
  CompileSpec compile;
  OptimizerKind optimizer = OptimizerKind::adamw;
  bool fused_optimizer = false;  // fused=True: no foreach temporaries
  bool hold_logits = true;       // the loop keeps `logits` alive through backward (nanoGPT)
  int empty_cache_every = 0;     // torch.cuda.empty_cache() after every N-th step; 0 = never
  // The training function returns at the end and frees optimizer state and model (the fixtures).
  // false: the run ends inside the loop, as a memory_summary() printed after the last step sees.
  bool teardown = true;
};

// Which collective backend a multi-rank run uses. NCCL's buffers are its own; gloo (CUDA tensors
// through host memory) also takes an output-sized temporary from the caching allocator per
// collective, on the collective's stream.
enum class Backend : std::uint8_t { nccl, gloo };

struct Parallel {
  // FSDP2 (torch.distributed.fsdp.fully_shard on every block, then on the root) over this many
  // ranks; 1 = one GPU. See experiments/README.md "parallel" for what is modelled.
  int fsdp_shards = 1;
  // MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32): 16-bit unsharded parameters and
  // gradients, fp32 reduce-scatter. false: unsharded parameters in the master dtype.
  bool fsdp_mixed_precision = true;
  bool fsdp_reshard_after_forward = true;  // fully_shard(reshard_after_forward=...)
  Backend backend = Backend::nccl;
  // DistributedDataParallel (engine/workload/ddp.h): the Reducer's gradient buckets on each rank.
  bool ddp = false;
  int ddp_bucket_cap_mb = 25;  // bucket_cap_mb
};

struct Workload {
  Model model;
  Training training;
  Parallel parallel;
};

struct MicroBatch {
  int batch_size = 0;
  int seq_len = 0;
  friend bool operator==(const MicroBatch&, const MicroBatch&) = default;
};

// The shape of every micro-batch, in order (steps × grad_accum of them). Lengths are drawn with
// CPython's Mersenne Twister and random.lognormvariate/randint, so seed 7, median e^6.2, sigma
// 0.6, clip [32, 2048] gives the fixtures' micro_batches exactly.
std::vector<MicroBatch> micro_batches(const Training& training);

// Number of parameters (elements), counted tensor by tensor as the generator allocates them.
std::uint64_t parameter_count(const Model& model);

// Throws fragscope::InputError naming the knob when the combination cannot be modelled.
void validate(const Workload& workload);

// The whole training run as an allocator request stream (step_begin markers per optimizer step).
RequestStream generate(const Workload& workload);

// Time per optimizer step relative to the same global batch as one micro-batch, eager, no
// recompute (the FLOP rule of workload-model.md §3 plus documented accumulation and compile
// factors; see experiments/README.md).
double estimated_step_time_ratio(const Workload& workload);

}  // namespace fragscope::workload
