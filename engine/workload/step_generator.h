#pragma once
// What every decoder family's training-step generator shares (engine-internal): the request
// builder, dtypes per precision, the parameter list with its gradients and FSDP units, autocast
// weight casts, cuBLAS workspaces, the loss and LM-head backward, the embedding backward, the
// optimizer step and zero_grad. A family (gpt_generator.cpp, llama_generator.cpp) adds its
// parameters and its blocks' forward and backward; the order of requests is the one the real
// PyTorch 2.11 recordings show (tests/fixtures/torch-2.11-h200*).
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "engine/core/request.h"
#include "engine/core/units.h"
#include "engine/workload/compiled_plan.h"
#include "engine/workload/workload.h"

namespace fragscope::workload::detail {

// cuBLAS keeps one workspace per (thread, stream): the forward's at the first matmul, the
// autograd thread's at the first backward matmul; cuBLASLt adds 1 MiB. Never freed.
inline constexpr Bytes kCublasWorkspace = 32 * kMiB;
inline constexpr Bytes kCublasLtWorkspace = 1 * kMiB;
// cuBLASLt's bias-gradient epilogue (BGRADB) asks for a split-K buffer of roundup(2n, 128) rows
// of fp32 per output feature, capped at the fewest multiple-of-128 rows holding 132 MiB; for small
// token counts it uses none. Fitted exactly on every biased linear backward of the GPT fixtures
// (3072, 4096, 1024 outputs) and the held-out hidden-1536 recording (4608, 6144, 1536 outputs).
inline constexpr Bytes kBiasGradWorkspaceCap = 138412032;
inline constexpr std::int64_t kBiasGradWorkspaceMinTokens = 1024;
// embedding_dense_backward sorts the indices when there are more than 3072 of them.
inline constexpr std::int64_t kEmbeddingSortThreshold = 3072;

struct Dtypes {
  Bytes param = 4;  // parameters, gradients, optimizer states
  Bytes act = 2;    // matmul inputs/outputs, saved activations
  Bytes res = 4;    // residual stream and norm inputs/outputs
  Bytes soft = 4;   // eager softmax/dropout of attention scores
  bool autocast = true;
};
Dtypes dtypes_for(Precision precision);

inline constexpr TensorId kNone{};
class DdpBuckets;  // ddp.h

class Builder {
 public:
  explicit Builder(RequestStream& out) : out_(out) {}
  TensorId alloc(Bytes size, Category category, const char* op, int layer);
  // On a side stream (FSDP's collectives): its blocks are cached for that stream only.
  TensorId alloc_on(Bytes size, StreamId stream, Category category, const char* op, int layer);
  void free(TensorId id);
  void marker(RequestOp op, Bytes value);
  // A private-pool request (pool_create, pool_begin on the default stream, pool_end, ...).
  void pool_request(RequestOp op, MempoolId pool);

 private:
  LabelId label(Category category, const char* op, int layer);

  RequestStream& out_;
  std::uint64_t next_ = 1;
  std::string key_;
  std::unordered_map<std::string, LabelId> ids_;
};

struct Param {
  Bytes numel = 0;
  int layer = -1;
  const char* name = "";
};

// The loss of one micro-batch: cross_entropy(logits.float()) / accum, eager or compiled.
struct LossState {
  TensorId logits, log_probs, total_weight, stats, loss, ones;
};

class StepGenerator {
 public:
  StepGenerator(const Workload& w, RequestStream& out);
  virtual ~StepGenerator() = default;
  StepGenerator(const StepGenerator&) = delete;
  StepGenerator& operator=(const StepGenerator&) = delete;

  // Parameter init, every step (micro-batches, optimizer, zero_grad), teardown.
  void run();

 protected:
  virtual void micro_batch(const MicroBatch& shape) = 0;

  // ---- parameters -------------------------------------------------------------------------
  int add_param(Bytes numel, int layer, const char* name);
  // Call once every parameter is added: sizes the FSDP units (one per block plus the root).
  void finish_params();
  Bytes numel(int param) const { return params_[static_cast<std::size_t>(param)].numel; }
  // Buffers registered after the parameters (allocated at init, freed at teardown).
  void add_buffer(Bytes bytes, const char* name) { buffers_.push_back({bytes, -1, name}); }

  // ---- FSDP2 units (fully_shard on every block, then the root) -----------------------------
  // Unit 0 is the root (embeddings, final norm, head), unit l + 1 block l. The hooks do nothing
  // on one GPU. Forward: pre_forward (all-gather, copy-out) ... post_forward (reshard); the root's
  // post-forward is end_forward, after the logits. Backward: pre_backward(unit, next) also
  // prefetches `next`'s all-gather; post_backward reshards and reduce-scatters the gradients;
  // end_backward after the root's.
  static std::size_t unit_of(const Param& p) { return static_cast<std::size_t>(p.layer) + 1; }
  static std::size_t block_unit(int layer) { return static_cast<std::size_t>(layer) + 1; }
  Bytes param_shard(const Param& p) const { return (p.numel + shards_ - 1) / shards_; }
  void fsdp_pre_forward(std::size_t unit);
  void fsdp_post_forward(std::size_t unit);
  void fsdp_end_forward();
  void fsdp_pre_backward(std::size_t unit, std::size_t next);
  void fsdp_post_backward(std::size_t unit);
  void fsdp_end_backward();
  void fsdp_all_gather(std::size_t unit);
  void fsdp_copy_out(std::size_t unit, bool forward);
  void fsdp_reshard(std::size_t unit);
  void fsdp_reduce_scatter(std::size_t unit);
  void fsdp_shard_parameters();

  // ---- gradients ----------------------------------------------------------------------------
  void accumulate(int param, TensorId grad);
  Category grad_category(int param) const;
  // Parameter gradient from a matmul: 16-bit under autocast, then cast to the fp32 .grad.
  void weight_grad_cast(int param, TensorId grad16, const char* op, int layer);
  // grad input of a linear whose input was an autocast copy of a 32-bit tensor: cast it back.
  TensorId input_grad_to_residual(TensorId grad, bool input_was_cast, int layer);
  // Backward of a LayerNorm/RMSNorm (bparam, mean may be absent): grad input, grad weight(s),
  // then the saved tensors go; the grad input is added into the residual gradient or becomes it.
  void layernorm_backward(int wparam, int bparam, TensorId grad, TensorId saved_input,
                          TensorId mean, TensorId rstd, int layer, bool into_residual);

  // ---- shapes of the current micro-batch ----------------------------------------------------
  Bytes bth(Bytes elem) const { return elem * static_cast<Bytes>(n_) * static_cast<Bytes>(h_); }
  Bytes btv(Bytes elem) const { return elem * static_cast<Bytes>(n_) * static_cast<Bytes>(v_); }
  Bytes bt(Bytes elem) const { return elem * static_cast<Bytes>(n_); }
  Bytes tokens_times(Bytes width, Bytes elem) const {
    return elem * static_cast<Bytes>(n_) * width;
  }

  // ---- autocast and cuBLAS ------------------------------------------------------------------
  TensorId cast_weight(int param, const char* op, int layer, bool discard);
  void cast_bias(int param, const char* op, int layer);
  void autocast_exit();
  // After a forward matmul's output: the forward thread's workspaces at the first one (`lt`:
  // cuBLASLt's too, for addmm). A checkpoint recompute runs on the autograd thread.
  void after_forward_matmul(bool lt);
  void after_backward_matmul();
  // torch._C._cuda_clearCublasWorkspaces(): every thread's workspaces are freed, the next matmul
  // takes new ones (cudagraph trees do it before each warm-up and capture).
  void clear_cublas_workspaces();
  void bias_grad_workspace(Bytes out_features, int layer);

  // ---- input, loss, LM head, embedding ------------------------------------------------------
  void begin_micro_batch(const MicroBatch& shape);
  // Loss forward on `logits` (the 16-bit LM-head output) and its backward up to grad logits.
  LossState loss_forward(TensorId logits);
  TensorId loss_backward(LossState& loss);
  // LM head (no bias) backward: grad weight first, then grad input (fixture order); leaves the
  // 32-bit grad input in residual_grad_.
  void lm_head_backward(TensorId grad_logits, TensorId head_w, TensorId head_in,
                        bool head_in_is_copy);
  void embedding_backward();
  // del logits, loss, idx after the backward.
  void end_micro_batch(LossState& loss, TensorId idx);

  // ---- optimizer ----------------------------------------------------------------------------
  void optimizer_step(bool first);
  void zero_grad();
  // ---- torch.compile(model) (compiled_step.cpp) ---------------------------------------------
  // One micro-batch whose forward and backward are Inductor graphs from compiled_.model's plans.
  // reduce-overhead: cudagraph trees run each graph in a private pool, eagerly at the first call
  // (warm-up) and under capture at the second, clearing cuBLAS's workspaces before and after
  // each; later calls replay the graphs in the pool's memory without asking the allocator.
  void compiled_micro_batch(const MicroBatch& shape);
  // One graph run from its plan. Forward: returns the logits and keeps what the backward saves
  // (saved_). Backward: frees the saved tensors as it uses them, returns one gradient a parameter.
  TensorId run_graph(CompiledGraph graph);
  // The backward's outputs become the parameters' .grad (matched by size, in parameter order).
  void compiled_gradients();
  TensorId enter_graph_pool(Bytes static_input);
  void exit_graph_pool();
  // What the family's plans are sized by (set by its constructor).
  struct CompiledShape {
    CompiledModel model = CompiledModel::gpt;
    std::int64_t heads = 0, ffn = 0, kv_heads = 0;
    bool lt_matmuls = true;  // the graph's forward matmuls take cuBLASLt's workspace too
  };
  CompiledShape compiled_;
  static constexpr MempoolId kCudaGraphPool{0, 1};  // cudagraph trees' pool, as 2.11 numbers it
  struct SavedTensor {
    Bytes size = 0;
    int slot = 0;  // place in the forward's block pattern
    TensorId id;
  };
  std::vector<SavedTensor> saved_;  // what the compiled forward kept
  std::vector<std::pair<Bytes, TensorId>> backward_outputs_;
  int compiled_calls_ = 0;
  int forward_runs_ = 0, backward_runs_ = 0;
  TensorId static_tokens_{}, static_gradient_{};  // a capture's copies of the graph inputs

  const Workload& w_;
  const Model& m_;
  const Training& t_;
  Dtypes d_;
  Builder b_;
  std::int64_t h_ = 0, v_ = 0;
  bool casts_weights_ = true;
  Bytes shards_ = 1;
  bool fsdp_ = false;
  Bytes grad_bytes_ = 4;       // a parameter gradient as autograd makes it
  Bytes unsharded_bytes_ = 4;  // FSDP: an unsharded parameter element
  std::size_t units_ = 0;
  std::vector<std::vector<int>> unit_params_;
  std::vector<Bytes> unit_shard_numel_;           // the rank's shard of each unit's parameters
  std::vector<TensorId> unit_grad_;               // each unit's fp32 gradient shard
  std::vector<std::vector<TensorId>> pending_;    // unsharded gradients awaiting reduce-scatter
  std::vector<std::vector<TensorId>> unsharded_;  // each unit's unsharded parameters
  std::vector<TensorId> gathered_;                // an issued all-gather's output, per unit
  TensorId held_gather_{};  // the last forward all-gather output, kept until the next copy-out
  TensorId held_reduce_input_{};  // the last reduce-scatter input, kept until the next one
  std::vector<Param> params_;
  std::vector<Param> buffers_;
  int emb_ = -1, head_ = -1;
  std::vector<TensorId> param_ids_, buffer_ids_, grads_, state_ids_;
  std::shared_ptr<DdpBuckets> ddp_;  // parallel.ddp: the Reducer's buckets
  std::vector<TensorId> autocast_cache_;
  TensorId residual_grad_{};
  bool forward_workspace_ = false;
  bool backward_workspace_ = false;
  bool backward_lt_workspace_ = false;
  std::vector<TensorId> workspace_ids_;  // the cuBLAS workspaces taken so far
  bool in_backward_ = false;
  bool recomputed_ = false;  // the region being differentiated was recomputed by a checkpoint
  int bsz_ = 0, seq_ = 0;
  std::int64_t n_ = 0;
};

// One generator per model family.
void generate_gpt(const Workload& workload, RequestStream& out);
void generate_llama(const Workload& workload, RequestStream& out);

}  // namespace fragscope::workload::detail
