// The GPT training-step generator. Comments cite the fixture trace where the order is not obvious
// from autograd semantics; sizes are requested bytes (the allocator model rounds them).
#include <algorithm>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/core/error.h"
#include "engine/workload/workload.h"

namespace fragscope::workload {
namespace {

using literals::operator""_MiB;

// cuBLAS keeps one workspace per (thread, stream): the forward's at the first matmul, the
// autograd thread's at the first backward matmul; cuBLASLt adds 1 MiB. Never freed.
constexpr Bytes kCublasWorkspace = 32_MiB;
constexpr Bytes kCublasLtWorkspace = 1_MiB;
// cuBLASLt's bias-gradient epilogue (BGRADB) asks for a split-K buffer of roundup(2n, 128) rows
// of fp32 per output feature, capped at 132 MiB; for small token counts it uses none. Fitted
// exactly on every biased linear backward of the four GPT fixtures.
constexpr Bytes kBiasGradWorkspaceCap = 138412032;
constexpr std::int64_t kBiasGradWorkspaceMinTokens = 1024;
// embedding_dense_backward sorts the indices when there are more than 3072 of them.
constexpr std::int64_t kEmbeddingSortThreshold = 3072;

struct Dtypes {
  Bytes param = 4;  // parameters, gradients, optimizer states
  Bytes act = 2;    // matmul inputs/outputs, saved activations
  Bytes res = 4;    // residual stream and LayerNorm inputs/outputs
  Bytes soft = 4;   // eager softmax/dropout of attention scores
  bool autocast = true;
};

Dtypes dtypes_for(Precision precision) {
  switch (precision) {
    case Precision::fp32:
      return {4, 4, 4, 4, false};
    case Precision::bf16_autocast:
    case Precision::fp16_autocast:
      return {4, 2, 4, 4, true};
    case Precision::bf16:
      return {2, 2, 2, 2, false};
  }
  return {};
}

constexpr TensorId kNone{};

class Builder {
 public:
  explicit Builder(RequestStream& out) : out_(out) {}

  TensorId alloc(Bytes size, Category category, const char* op, int layer) {
    const TensorId id{next_++};
    Request r;
    r.op = RequestOp::malloc;
    r.tensor = id;
    r.size = size;
    r.label = label(category, op, layer);
    out_.requests.push_back(r);
    return id;
  }

  void free(TensorId id) {
    if (id == kNone)
      return;
    Request r;
    r.op = RequestOp::free;
    r.tensor = id;
    out_.requests.push_back(r);
  }

  void marker(RequestOp op, Bytes value) {
    Request r;
    r.op = op;
    r.size = value;
    out_.requests.push_back(r);
  }

 private:
  LabelId label(Category category, const char* op, int layer) {
    key_.assign(op);
    key_.push_back('\x1f');
    key_.append(std::to_string(layer));
    key_.push_back('\x1f');
    key_.push_back(static_cast<char>('0' + static_cast<int>(category)));
    const auto [it, inserted] =
        ids_.try_emplace(key_, LabelId{static_cast<std::uint32_t>(out_.labels.size())});
    if (inserted)
      out_.labels.push_back(RequestLabel{category, op, layer});
    return it->second;
  }

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

struct BlockParams {
  int ln1w = -1, ln1b = -1, ln2w = -1, ln2b = -1, qkvw = -1, qkvb = -1, projw = -1, projb = -1,
      fc1w = -1, fc1b = -1, fc2w = -1, fc2b = -1;
};

// What one block's forward leaves for its backward (kNone where nothing is kept).
struct BlockState {
  TensorId x_in, ln1_out, ln1_mean, ln1_rstd, qkv_in, qkv_w, qkv_out, q, k, v, triu, softmax,
      drop_mask, probs, probs16, y_t, attn_o, lse, proj_w, rdrop1;
  TensorId x1, ln2_out, ln2_mean, ln2_rstd, fc1_in, fc1_w, fc1_out, gelu_out, fc2_w, rdrop2;
  TensorId x2;
};

class GptGenerator {
 public:
  GptGenerator(const Workload& w, RequestStream& out)
      : w_(w), m_(w.model), t_(w.training), d_(dtypes_for(w.training.precision)), b_(out) {
    h_ = m_.hidden;
    f_ = static_cast<std::int64_t>(m_.ffn_mult) * m_.hidden;
    a_ = m_.heads;
    v_ = m_.vocab;
    p_drop_ = m_.dropout > 0;
    shards_ = static_cast<Bytes>(w.parallel.fsdp_shards);
    fsdp_ = shards_ > 1;
    // FSDP all-gathers 16-bit parameters: there is nothing left for autocast to cast
    casts_weights_ = d_.autocast && !fsdp_;
    grad_bytes_ = fsdp_ ? d_.act : d_.param;
    build_params();
    units_ = static_cast<std::size_t>(m_.layers) + 1;
    unit_numel_.assign(units_, 0);
    for (const Param& p : params_)
      unit_numel_[unit_of(p)] += p.numel;
    unit_grad_.assign(units_, kNone);
    pending_.assign(units_, {});
  }

  void run() {
    if (fsdp_) {
      // one flat shard per FSDP unit (the root: embeddings, ln_f, head; each block)
      for (std::size_t u = 0; u < units_; ++u)
        param_ids_.push_back(b_.alloc(shard(u) * d_.param, Category::parameter,
                                      "fsdp.flat_param_shard", static_cast<int>(u) - 1));
    } else {
      for (std::size_t i = 0; i < params_.size(); ++i)
        param_ids_.push_back(b_.alloc(params_[i].numel * d_.param, Category::parameter,
                                      params_[i].name, params_[i].layer));
    }
    grads_.assign(params_.size(), kNone);
    const std::vector<MicroBatch> shapes = micro_batches(t_);
    std::size_t mb = 0;
    for (int step = 0; step < t_.steps; ++step) {
      b_.marker(RequestOp::step_begin, static_cast<Bytes>(step));
      for (int micro = 0; micro < t_.grad_accum; ++micro)
        micro_batch(shapes[mb++]);
      optimizer_step(step == 0);
      zero_grad();
      if (t_.empty_cache_every > 0 && (step + 1) % t_.empty_cache_every == 0)
        b_.marker(RequestOp::empty_cache, 0);
    }
    // The training function returns: the optimizer's state goes first, then the model's
    // parameters in reverse order (fixture teardown order).
    if (!t_.teardown)
      return;
    for (TensorId id : state_ids_)
      b_.free(id);
    for (auto it = param_ids_.rbegin(); it != param_ids_.rend(); ++it)
      b_.free(*it);
  }

 private:
  // ---- parameters -------------------------------------------------------------------------
  int add_param(Bytes numel, int layer, const char* name) {
    params_.push_back(Param{numel, layer, name});
    return static_cast<int>(params_.size() - 1);
  }

  void build_params() {
    const auto h = static_cast<Bytes>(h_);
    const auto f = static_cast<Bytes>(f_);
    emb_ = add_param(static_cast<Bytes>(v_) * h, -1, "wte.weight");
    if (m_.positions > 0)
      pos_ = add_param(static_cast<Bytes>(m_.positions) * h, -1, "wpe.weight");
    for (int l = 0; l < m_.layers; ++l) {
      BlockParams p;
      p.ln1w = add_param(h, l, "ln1.weight");
      if (m_.bias)
        p.ln1b = add_param(h, l, "ln1.bias");
      p.ln2w = add_param(h, l, "ln2.weight");
      if (m_.bias)
        p.ln2b = add_param(h, l, "ln2.bias");
      p.qkvw = add_param(3 * h * h, l, "qkv.weight");
      if (m_.bias)
        p.qkvb = add_param(3 * h, l, "qkv.bias");
      p.projw = add_param(h * h, l, "proj.weight");
      if (m_.bias)
        p.projb = add_param(h, l, "proj.bias");
      p.fc1w = add_param(f * h, l, "fc1.weight");
      if (m_.bias)
        p.fc1b = add_param(f, l, "fc1.bias");
      p.fc2w = add_param(h * f, l, "fc2.weight");
      if (m_.bias)
        p.fc2b = add_param(h, l, "fc2.bias");
      blocks_.push_back(p);
    }
    if (m_.final_layernorm) {
      lnfw_ = add_param(h, -1, "ln_f.weight");
      if (m_.bias)
        lnfb_ = add_param(h, -1, "ln_f.bias");
    }
    head_ = m_.tied_embeddings ? emb_ : add_param(static_cast<Bytes>(v_) * h, -1, "lm_head.weight");
  }

  Bytes numel(int param) const { return params_[static_cast<std::size_t>(param)].numel; }

  // ---- FSDP units ---------------------------------------------------------------------------
  static std::size_t unit_of(const Param& p) { return static_cast<std::size_t>(p.layer + 1); }
  Bytes shard(std::size_t unit) const { return (unit_numel_[unit] + shards_ - 1) / shards_; }
  TensorId all_gather(std::size_t unit) {
    return b_.alloc(unit_numel_[unit] * d_.act, Category::temporary, "fsdp.all_gather",
                    static_cast<int>(unit) - 1);
  }
  // After a unit's backward: its gradients are copied into one flat buffer and reduce-scattered
  // (in fp32) into the rank's gradient shard.
  void reduce_scatter(std::size_t unit) {
    std::vector<TensorId>& grads = pending_[unit];
    if (grads.empty())
      return;
    const int layer = static_cast<int>(unit) - 1;
    const TensorId flat =
        b_.alloc(unit_numel_[unit] * d_.act, Category::temporary, "fsdp.grad_flat", layer);
    for (TensorId g : grads)
      b_.free(g);
    grads.clear();
    const Category cat = unit_grad_[unit] == kNone ? Category::gradient : Category::temporary;
    const TensorId out = b_.alloc(shard(unit) * 4, cat, "fsdp.reduce_scatter", layer);
    b_.free(flat);
    if (unit_grad_[unit] == kNone)
      unit_grad_[unit] = out;
    else
      b_.free(out);
  }

  // AccumulateGrad: the first gradient becomes .grad; later ones are added in place and freed.
  // Under FSDP the gradients of a unit wait for its reduce-scatter.
  void accumulate(int param, TensorId grad) {
    if (fsdp_) {
      pending_[unit_of(params_[static_cast<std::size_t>(param)])].push_back(grad);
      return;
    }
    TensorId& slot = grads_[static_cast<std::size_t>(param)];
    if (slot == kNone)
      slot = grad;
    else
      b_.free(grad);
  }
  Category grad_category(int param) const {
    if (fsdp_)
      return Category::temporary;
    return grads_[static_cast<std::size_t>(param)] == kNone ? Category::gradient
                                                            : Category::temporary;
  }

  // ---- shapes -------------------------------------------------------------------------------
  Bytes bth(Bytes elem) const { return elem * static_cast<Bytes>(n_) * static_cast<Bytes>(h_); }
  Bytes btf(Bytes elem) const { return elem * static_cast<Bytes>(n_) * static_cast<Bytes>(f_); }
  Bytes abtt(Bytes elem) const {
    return elem * static_cast<Bytes>(a_) * static_cast<Bytes>(bsz_) * static_cast<Bytes>(seq_) *
           static_cast<Bytes>(seq_);
  }
  Bytes btv(Bytes elem) const { return elem * static_cast<Bytes>(n_) * static_cast<Bytes>(v_); }
  Bytes bt(Bytes elem) const { return elem * static_cast<Bytes>(n_); }

  // ---- building blocks ----------------------------------------------------------------------
  TensorId cast_weight(int param, const char* op, int layer, bool discard) {
    if (!casts_weights_ || param < 0)
      return kNone;
    const TensorId id = b_.alloc(numel(param) * d_.act, Category::temporary, op, layer);
    // Not saved for backward inside a checkpointed region: it lives in the autocast cache.
    if (discard)
      autocast_cache_.push_back(id);
    return id;
  }
  void cast_bias(int param, const char* op, int layer) {
    if (!casts_weights_ || param < 0)
      return;
    autocast_cache_.push_back(b_.alloc(numel(param) * d_.act, Category::temporary, op, layer));
  }
  void autocast_exit() {
    for (TensorId id : autocast_cache_)
      b_.free(id);
    autocast_cache_.clear();
  }
  // After a biased linear's forward (addmm through cuBLASLt). A checkpoint recompute runs on the
  // autograd thread, whose handles are separate from the forward thread's.
  void after_forward_matmul() {
    if (in_backward_) {
      after_backward_matmul();
      if (!backward_lt_workspace_) {
        backward_lt_workspace_ = true;
        b_.alloc(kCublasLtWorkspace, Category::temporary, "cublaslt.workspace.backward", -1);
      }
      return;
    }
    if (forward_workspace_)
      return;
    forward_workspace_ = true;
    b_.alloc(kCublasWorkspace, Category::temporary, "cublas.workspace", -1);
    if (m_.bias)
      b_.alloc(kCublasLtWorkspace, Category::temporary, "cublaslt.workspace", -1);
  }
  void after_backward_matmul() {
    if (backward_workspace_)
      return;
    backward_workspace_ = true;
    b_.alloc(kCublasWorkspace, Category::temporary, "cublas.workspace.backward", -1);
  }

  struct LayerNormOut {
    TensorId out, mean, rstd;
  };
  LayerNormOut layernorm_forward(const char* op, int layer, bool discard) {
    LayerNormOut r;
    // A compiled LayerNorm writes its 16-bit output directly (the cast is fused into it).
    r.out =
        b_.alloc(t_.compile.layernorm ? bth(d_.act) : bth(d_.res), Category::activation, op, layer);
    r.mean = b_.alloc(bt(4), Category::activation, "layernorm.mean", layer);
    r.rstd = b_.alloc(bt(4), Category::activation, "layernorm.rstd", layer);
    if (discard) {
      b_.free(r.mean);
      b_.free(r.rstd);
      r.mean = r.rstd = kNone;
    }
    return r;
  }

  // The matmul input under autocast: a 16-bit copy of a 32-bit LayerNorm output, saved.
  TensorId matmul_input(TensorId source, const char* op, int layer) {
    if (!d_.autocast || t_.compile.layernorm)
      return source;
    return b_.alloc(bth(d_.act), Category::activation, op, layer);
  }

  // cuBLASLt bias-gradient workspace for a biased linear's backward.
  void bias_grad_workspace(Bytes out_features, int layer) {
    if (n_ <= kBiasGradWorkspaceMinTokens)
      return;
    const Bytes rows = (static_cast<Bytes>(2 * n_) + 127) / 128 * 128;
    const Bytes size = std::min(rows * out_features * 4, kBiasGradWorkspaceCap);
    const TensorId ws = b_.alloc(size, Category::temporary, "cublaslt.bgrad_workspace", layer);
    const TensorId sem =
        b_.alloc(out_features / 32, Category::temporary, "cublaslt.bgrad_sem", layer);
    b_.free(sem);
    b_.free(ws);
  }

  // Parameter gradient from a matmul: 16-bit under autocast, then cast to the fp32 .grad.
  void weight_grad_cast(int param, TensorId grad16, const char* op, int layer) {
    if (!d_.autocast || fsdp_) {
      accumulate(param, grad16);
      return;
    }
    const TensorId g32 = b_.alloc(numel(param) * 4, grad_category(param), op, layer);
    b_.free(grad16);
    accumulate(param, g32);
  }

  // Backward of a biased linear: grad input, grad weight, grad bias (+workspace), then frees of
  // the incoming gradient and the saved tensors (fixture order).
  struct LinearGrads {
    TensorId input, weight, bias;
  };
  LinearGrads linear_backward(int wparam, int bparam, Bytes in_bytes, Bytes out_features,
                              TensorId grad_out, TensorId saved_input, TensorId saved_weight,
                              int layer, const char* name) {
    LinearGrads g;
    const Category wcat = d_.autocast || fsdp_ ? Category::temporary : grad_category(wparam);
    g.input = b_.alloc(in_bytes, Category::temporary, name, layer);
    g.weight = b_.alloc(numel(wparam) * d_.act, wcat, name, layer);
    after_backward_matmul();
    if (recomputed_) {
      // a checkpoint's recomputed tensors are released as soon as the node unpacks them
      b_.free(saved_input);
      b_.free(saved_weight);
      saved_input = saved_weight = kNone;
    }
    if (bparam >= 0) {
      g.bias =
          b_.alloc(numel(bparam) * d_.act,
                   d_.autocast || fsdp_ ? Category::temporary : grad_category(bparam), name, layer);
      bias_grad_workspace(out_features, layer);
    }
    b_.free(grad_out);
    b_.free(saved_input);
    b_.free(saved_weight);
    return g;
  }
  void finish_linear_grads(int wparam, int bparam, LinearGrads& g, int layer) {
    weight_grad_cast(wparam, g.weight, "grad.weight", layer);
    if (bparam >= 0)
      weight_grad_cast(bparam, g.bias, "grad.bias", layer);
  }

  // grad input of a linear whose input was an autocast copy of a 32-bit tensor: cast it back.
  TensorId input_grad_to_residual(TensorId grad, bool input_was_cast, int layer) {
    if (!input_was_cast)
      return grad;
    const TensorId g32 = b_.alloc(bth(d_.res), Category::temporary, "grad.input_fp32", layer);
    b_.free(grad);
    return g32;
  }

  void layernorm_backward(int wparam, int bparam, TensorId grad, TensorId saved_input,
                          TensorId mean, TensorId rstd, int layer, bool into_residual) {
    const TensorId gx = b_.alloc(bth(d_.res), Category::temporary, "grad.layernorm", layer);
    const TensorId gw = b_.alloc(numel(wparam) * grad_bytes_, grad_category(wparam),
                                 "grad.layernorm.weight", layer);
    TensorId gb = kNone;
    if (bparam >= 0)
      gb = b_.alloc(numel(bparam) * grad_bytes_, grad_category(bparam), "grad.layernorm.bias",
                    layer);
    b_.free(grad);
    b_.free(saved_input);
    b_.free(mean);
    b_.free(rstd);
    if (into_residual)
      b_.free(gx);  // added in place into the residual gradient
    else
      residual_grad_ = gx;
    accumulate(wparam, gw);
    if (bparam >= 0)
      accumulate(bparam, gb);
  }

  // ---- forward ------------------------------------------------------------------------------
  void attention_forward(int l, BlockState& s, bool discard) {
    const BlockParams& p = blocks_[static_cast<std::size_t>(l)];
    const LayerNormOut ln = layernorm_forward("ln1.out", l, discard);
    s.ln1_out = ln.out;
    s.ln1_mean = ln.mean;
    s.ln1_rstd = ln.rstd;
    cast_bias(p.qkvb, "qkv.bias_cast", l);
    s.qkv_w = cast_weight(p.qkvw, "qkv.weight_cast", l, discard);
    s.qkv_in = matmul_input(s.ln1_out, "qkv.input", l);
    s.qkv_out = b_.alloc(3 * bth(d_.act), Category::activation, "qkv.out", l);
    if (m_.bias)
      after_forward_matmul();
    else if (!in_backward_)
      after_forward_matmul();
    const bool qkv_in_is_copy = s.qkv_in != s.ln1_out;
    if (discard && qkv_in_is_copy) {
      b_.free(s.qkv_in);
      s.qkv_in = kNone;
    }
    TensorId proj_input = kNone;
    if (m_.attention == Attention::eager) {
      s.q = b_.alloc(bth(d_.act), Category::activation, "attn.q", l);
      s.k = b_.alloc(bth(d_.act), Category::activation, "attn.k", l);
      const TensorId scores = b_.alloc(abtt(d_.act), Category::temporary, "attn.scores", l);
      if (discard) {
        b_.free(s.k);
        b_.free(s.q);
        s.k = s.q = kNone;
      }
      const TensorId scaled = b_.alloc(abtt(d_.act), Category::temporary, "attn.scaled", l);
      b_.free(scores);
      const TensorId ones = b_.alloc(static_cast<Bytes>(seq_) * static_cast<Bytes>(seq_),
                                     Category::temporary, "attn.mask_ones", l);
      s.triu = b_.alloc(static_cast<Bytes>(seq_) * static_cast<Bytes>(seq_), Category::activation,
                        "attn.causal_mask", l);
      b_.free(ones);
      const TensorId masked = b_.alloc(abtt(d_.act), Category::temporary, "attn.masked", l);
      if (d_.soft > d_.act) {
        // autocast runs softmax in fp32: a 32-bit copy of its input, then the output
        const TensorId in32 = b_.alloc(abtt(4), Category::temporary, "attn.softmax_input", l);
        s.softmax = b_.alloc(abtt(d_.soft), Category::activation, "attn.softmax", l);
        b_.free(in32);
      } else {
        s.softmax = b_.alloc(abtt(d_.soft), Category::activation, "attn.softmax", l);
      }
      b_.free(masked);
      b_.free(scaled);
      s.probs = s.softmax;
      if (p_drop_) {
        s.drop_mask = b_.alloc(abtt(1), Category::activation, "attn.dropout_mask", l);
        s.probs = b_.alloc(abtt(d_.soft), Category::activation, "attn.dropout", l);
        if (discard) {
          b_.free(s.drop_mask);
          b_.free(s.softmax);
          s.drop_mask = s.softmax = kNone;
        }
      }
      s.probs16 = s.probs;
      if (d_.soft > d_.act)
        s.probs16 = b_.alloc(abtt(d_.act), Category::activation, "attn.probs_cast", l);
      s.v = b_.alloc(bth(d_.act), Category::activation, "attn.v", l);
      const TensorId y = b_.alloc(bth(d_.act), Category::temporary, "attn.y", l);
      if (discard) {
        b_.free(s.v);
        s.v = kNone;
        if (s.probs16 != s.probs) {
          b_.free(s.probs16);
          s.probs16 = kNone;
        }
      }
      s.y_t = b_.alloc(bth(d_.act), Category::activation, "attn.y_transposed", l);
      proj_input = s.y_t;
      // proj happens below; `y` and the 32-bit probabilities die when attn() returns
      attn_return_frees_ = {y};
      // the 32-bit dropout output is not saved when its 16-bit copy is; the softmax output is
      if ((s.probs16 != s.probs && s.probs != s.softmax) || discard)
        attn_return_frees_.push_back(s.probs);
      if (discard)
        attn_return_frees_.push_back(s.triu);
    } else {
      // Flash SDPA: q, k, v are views of qkv.out (kept), the output O feeds proj as a view, plus
      // one fp32 log-sum-exp per (row, head). No s² tensor, no dropout mask.
      s.attn_o = b_.alloc(bth(d_.act), Category::activation, "attn.sdpa_out", l);
      s.lse = b_.alloc(4 * static_cast<Bytes>(a_) * static_cast<Bytes>(n_), Category::activation,
                       "attn.sdpa_lse", l);
      proj_input = s.attn_o;
      attn_return_frees_.clear();
      if (discard)
        attn_return_frees_ = {s.lse, s.attn_o};
    }
    cast_bias(p.projb, "proj.bias_cast", l);
    s.proj_w = cast_weight(p.projw, "proj.weight_cast", l, discard);
    const TensorId proj_out = b_.alloc(bth(d_.act), Category::temporary, "proj.out", l);
    if (discard && m_.attention == Attention::eager) {
      b_.free(s.y_t);
      s.y_t = kNone;
    }
    // attn() returns: its locals die
    if (qkv_in_is_copy || discard)
      b_.free(s.ln1_out);
    if (m_.attention == Attention::eager || discard)
      b_.free(s.qkv_out);
    if (qkv_in_is_copy || discard)
      s.ln1_out = kNone;
    if (m_.attention == Attention::eager || discard)
      s.qkv_out = kNone;
    for (TensorId id : attn_return_frees_)
      b_.free(id);
    if (discard) {
      s.probs = s.probs16 = s.triu = s.lse = s.attn_o = kNone;
    } else if (s.probs16 != s.probs && s.probs != s.softmax) {
      s.probs = kNone;
    }
    attn_return_frees_.clear();
    TensorId branch = proj_out;
    if (m_.residual_dropout && p_drop_) {
      s.rdrop1 = b_.alloc(bth(1), Category::activation, "attn.resid_dropout_mask", l);
      branch = b_.alloc(bth(d_.act), Category::temporary, "attn.resid_dropout", l);
      b_.free(proj_out);
      if (discard) {
        b_.free(s.rdrop1);
        s.rdrop1 = kNone;
      }
    }
    s.x1 = b_.alloc(bth(d_.res), Category::activation, "residual.attn", l);
    b_.free(branch);
  }

  // stop_early: a checkpoint recompute stops once the last saved tensor (fc2's inputs) exists.
  void ffn_forward(int l, BlockState& s, bool discard, bool stop_early, bool free_region_input) {
    const BlockParams& p = blocks_[static_cast<std::size_t>(l)];
    const LayerNormOut ln = layernorm_forward("ln2.out", l, discard);
    s.ln2_out = ln.out;
    s.ln2_mean = ln.mean;
    s.ln2_rstd = ln.rstd;
    cast_bias(p.fc1b, "fc1.bias_cast", l);
    s.fc1_w = cast_weight(p.fc1w, "fc1.weight_cast", l, discard);
    s.fc1_in = matmul_input(s.ln2_out, "fc1.input", l);
    const bool fc1_in_is_copy = s.fc1_in != s.ln2_out;
    s.fc1_out = b_.alloc(btf(d_.act), Category::activation, "fc1.out", l);
    if (discard && fc1_in_is_copy) {
      b_.free(s.fc1_in);
      s.fc1_in = kNone;
    }
    if (fc1_in_is_copy || discard) {
      b_.free(s.ln2_out);
      s.ln2_out = kNone;
      if (discard)
        s.fc1_in = kNone;
    }
    s.gelu_out = b_.alloc(btf(d_.act), Category::activation, "gelu.out", l);
    if (discard) {
      b_.free(s.fc1_out);
      s.fc1_out = kNone;
    }
    cast_bias(p.fc2b, "fc2.bias_cast", l);
    s.fc2_w = cast_weight(p.fc2w, "fc2.weight_cast", l, discard);
    if (stop_early)
      return;
    const TensorId fc2_out = b_.alloc(bth(d_.act), Category::temporary, "fc2.out", l);
    if (discard) {
      b_.free(s.gelu_out);
      s.gelu_out = kNone;
    }
    TensorId branch = fc2_out;
    if (m_.residual_dropout && p_drop_) {
      s.rdrop2 = b_.alloc(bth(1), Category::activation, "mlp.resid_dropout_mask", l);
      if (!t_.compile.mlp) {  // a compiled MLP fuses dropout into the residual add
        branch = b_.alloc(bth(d_.act), Category::temporary, "mlp.resid_dropout", l);
        b_.free(fc2_out);
      }
      if (discard) {
        b_.free(s.rdrop2);
        s.rdrop2 = kNone;
      }
    }
    s.x2 = b_.alloc(bth(d_.res), Category::activation, "residual.mlp", l);
    b_.free(branch);
    if (free_region_input) {
      b_.free(s.x1);
      s.x1 = kNone;
    }
  }

  bool block_checkpointed(int l) const {
    return t_.checkpointing == Checkpointing::blocks && l % t_.checkpoint_every == 0;
  }

  // ---- backward -----------------------------------------------------------------------------
  // The residual-add backward hands the (32-bit) residual gradient to a 16-bit branch.
  TensorId branch_grad(TensorId rdrop_mask, int l) {
    TensorId g = residual_grad_;
    bool owned = false;
    if (d_.res != d_.act) {
      g = b_.alloc(bth(d_.act), Category::temporary, "grad.branch_cast", l);
      owned = true;
    }
    if (rdrop_mask != kNone) {
      const TensorId gd = b_.alloc(bth(d_.act), Category::temporary, "grad.resid_dropout", l);
      if (owned)
        b_.free(g);
      b_.free(rdrop_mask);
      g = gd;
      owned = true;
    }
    return owned ? g : kNone;
  }

  void ffn_backward(int l, BlockState& s) {
    const BlockParams& p = blocks_[static_cast<std::size_t>(l)];
    TensorId g = branch_grad(s.rdrop2, l);
    recomputed_ = t_.checkpointing == Checkpointing::ffn || block_checkpointed(l);
    if (t_.checkpointing == Checkpointing::ffn) {
      ffn_forward(l, s, false, true, false);
      autocast_exit();
    } else if (block_checkpointed(l)) {
      attention_forward_recompute(l, s);
    }
    LinearGrads g2 = linear_backward(p.fc2w, p.fc2b, btf(d_.act), static_cast<Bytes>(h_), g,
                                     s.gelu_out, s.fc2_w, l, "grad.fc2");
    finish_linear_grads(p.fc2w, p.fc2b, g2, l);
    const TensorId gg = b_.alloc(btf(d_.act), Category::temporary, "grad.gelu", l);
    b_.free(g2.input);
    b_.free(s.fc1_out);
    const bool fc1_in_was_copy = s.ln2_out == kNone;
    LinearGrads g1 = linear_backward(p.fc1w, p.fc1b, bth(d_.act), static_cast<Bytes>(f_), gg,
                                     s.fc1_in, s.fc1_w, l, "grad.fc1");
    const TensorId gln = input_grad_to_residual(g1.input, fc1_in_was_copy && d_.autocast, l);
    finish_linear_grads(p.fc1w, p.fc1b, g1, l);
    layernorm_backward(p.ln2w, p.ln2b, gln, s.x1, s.ln2_mean, s.ln2_rstd, l, true);
  }

  void attention_forward_recompute(int l, BlockState& s) {
    attention_forward(l, s, false);
    ffn_forward(l, s, false, true, false);
    autocast_exit();
  }

  void attention_backward(int l, BlockState& s) {
    const BlockParams& p = blocks_[static_cast<std::size_t>(l)];
    const TensorId g = branch_grad(s.rdrop1, l);
    recomputed_ = block_checkpointed(l);
    const TensorId proj_saved = m_.attention == Attention::eager ? s.y_t : kNone;
    LinearGrads gp = linear_backward(p.projw, p.projb, bth(d_.act), static_cast<Bytes>(h_), g,
                                     proj_saved, s.proj_w, l, "grad.proj");
    finish_linear_grads(p.projw, p.projb, gp, l);
    TensorId gqkv = kNone;
    if (m_.attention == Attention::eager) {
      const TensorId gy = b_.alloc(bth(d_.act), Category::temporary, "grad.attn_y", l);
      b_.free(gp.input);
      const TensorId gv = b_.alloc(bth(d_.act), Category::temporary, "grad.attn_v", l);
      TensorId gprob = b_.alloc(abtt(d_.act), Category::temporary, "grad.attn_probs", l);
      b_.free(gy);
      b_.free(s.v);
      b_.free(s.probs16);
      if (d_.soft > d_.act) {
        const TensorId g32 = b_.alloc(abtt(4), Category::temporary, "grad.attn_probs_fp32", l);
        b_.free(gprob);
        gprob = g32;
      }
      if (p_drop_) {
        const TensorId gd = b_.alloc(abtt(d_.soft), Category::temporary, "grad.attn_dropout", l);
        b_.free(gprob);
        b_.free(s.drop_mask);
        gprob = gd;
      }
      TensorId gs = b_.alloc(abtt(d_.soft), Category::temporary, "grad.softmax", l);
      const TensorId tmp = b_.alloc(abtt(d_.soft), Category::temporary, "grad.softmax_tmp", l);
      b_.free(tmp);
      b_.free(gprob);
      b_.free(s.softmax);
      if (d_.soft > d_.act) {
        const TensorId g16 = b_.alloc(abtt(d_.act), Category::temporary, "grad.softmax_cast", l);
        b_.free(gs);
        gs = g16;
      }
      const TensorId gm = b_.alloc(abtt(d_.act), Category::temporary, "grad.masked_fill", l);
      b_.free(gs);
      b_.free(s.triu);
      const TensorId gdiv = b_.alloc(abtt(d_.act), Category::temporary, "grad.scale", l);
      b_.free(gm);
      const TensorId gq = b_.alloc(bth(d_.act), Category::temporary, "grad.attn_q", l);
      const TensorId gk = b_.alloc(bth(d_.act), Category::temporary, "grad.attn_k", l);
      b_.free(gdiv);
      b_.free(s.k);
      b_.free(s.q);
      const TensorId gcat = b_.alloc(3 * bth(d_.act), Category::temporary, "grad.qkv_view", l);
      b_.free(gk);
      b_.free(gq);
      b_.free(gv);
      gqkv = b_.alloc(3 * bth(d_.act), Category::temporary, "grad.qkv_permute", l);
      b_.free(gcat);
    } else {
      // Flash backward: dq, dk, dv, an fp32 dq accumulator and the softmax row sums.
      const TensorId dq = b_.alloc(bth(d_.act), Category::temporary, "grad.sdpa_q", l);
      const TensorId dk = b_.alloc(bth(d_.act), Category::temporary, "grad.sdpa_k", l);
      const TensorId dv = b_.alloc(bth(d_.act), Category::temporary, "grad.sdpa_v", l);
      const TensorId acc = b_.alloc(bth(4), Category::temporary, "grad.sdpa_dq_accum", l);
      const TensorId rows = b_.alloc(4 * static_cast<Bytes>(a_) * static_cast<Bytes>(n_),
                                     Category::temporary, "grad.sdpa_softmax_d", l);
      b_.free(acc);
      b_.free(rows);
      b_.free(gp.input);
      gqkv = b_.alloc(3 * bth(d_.act), Category::temporary, "grad.qkv_cat", l);
      b_.free(dq);
      b_.free(dk);
      b_.free(dv);
      b_.free(s.qkv_out);
      b_.free(s.attn_o);
      b_.free(s.lse);
    }
    const bool qkv_in_was_copy = s.ln1_out == kNone;
    LinearGrads gq = linear_backward(p.qkvw, p.qkvb, bth(d_.act), 3 * static_cast<Bytes>(h_), gqkv,
                                     s.qkv_in, s.qkv_w, l, "grad.qkv");
    const TensorId gln = input_grad_to_residual(gq.input, qkv_in_was_copy && d_.autocast, l);
    finish_linear_grads(p.qkvw, p.qkvb, gq, l);
    layernorm_backward(p.ln1w, p.ln1b, gln, s.x_in, s.ln1_mean, s.ln1_rstd, l, true);
    recomputed_ = false;
  }

  // ---- embedding ----------------------------------------------------------------------------
  void embedding_backward() {
    const Category cat = grad_category(emb_);
    const Bytes grad_bytes = numel(emb_) * grad_bytes_;
    if (n_ <= kEmbeddingSortThreshold) {
      accumulate(emb_, b_.alloc(grad_bytes, cat, "grad.embedding", -1));
      return;
    }
    // Sort-based path of embedding_dense_backward (fixture order); P = min(n, V) + n/10 partial
    // segments of up to NROWS_PER_THREAD rows. cub's radix-sort temporary storage is fitted as
    // 16n + 18175 bytes: exact for n = 3184 and 4176, up to 2% small for other n (a small-pool
    // block, freed at once).
    const auto n = static_cast<Bytes>(n_);
    // at most min(n, V) distinct indices
    const Bytes unique = std::min(n, static_cast<Bytes>(v_));
    const Bytes segments = unique + n / 10;
    const auto tmp = [&](Bytes size) {
      return b_.alloc(size, Category::temporary, "embedding_backward.sort", -1);
    };
    const TensorId sorted = tmp(8 * n);
    const TensorId order = tmp(8 * n);
    const TensorId range = tmp(8 * n);
    const TensorId cub =
        b_.alloc(16 * n + 18175, Category::temporary, "embedding_backward.cub_temp", -1);
    b_.free(cub);
    b_.free(range);
    const TensorId grad = b_.alloc(grad_bytes, cat, "grad.embedding", -1);
    const TensorId offsets = tmp(8 * n);
    const TensorId count = tmp(8);
    const TensorId flags = tmp(8 * n);
    const TensorId scan = tmp(1279);
    b_.free(scan);
    b_.free(flags);
    const TensorId starts = tmp(8 * unique);
    const TensorId ends = tmp(8 * unique);
    const TensorId scan2 = tmp(1279);
    b_.free(scan2);
    const TensorId partial_count = tmp(8);
    const TensorId partial_offsets = tmp(8 * segments);
    const TensorId partials = tmp(segments * static_cast<Bytes>(h_) * 4);
    b_.free(partials);
    b_.free(partial_offsets);
    b_.free(partial_count);
    b_.free(ends);
    b_.free(starts);
    b_.free(count);
    b_.free(offsets);
    b_.free(order);
    b_.free(sorted);
    accumulate(emb_, grad);
  }

  // ---- one micro-batch ----------------------------------------------------------------------
  void micro_batch(const MicroBatch& shape) {
    bsz_ = shape.batch_size;
    seq_ = shape.seq_len;
    n_ = static_cast<std::int64_t>(bsz_) * seq_;
    const TensorId idx = b_.alloc(bt(8), Category::input, "input.tokens", -1);
    // FSDP's root unit stays unsharded from its forward to the end of the backward
    const TensorId root_gather = fsdp_ ? all_gather(0) : kNone;
    TensorId x = b_.alloc(bth(d_.param), Category::activation, "wte.out", -1);
    TensorId pos_ids = kNone;
    if (pos_ >= 0) {
      pos_ids = b_.alloc(8 * static_cast<Bytes>(seq_), Category::input, "input.positions", -1);
      const TensorId pe = b_.alloc(static_cast<Bytes>(seq_) * static_cast<Bytes>(h_) * d_.param,
                                   Category::temporary, "wpe.out", -1);
      const TensorId sum = b_.alloc(bth(d_.param), Category::activation, "embedding.sum", -1);
      b_.free(x);
      b_.free(pe);
      x = sum;
    }
    TensorId emb_drop_mask = kNone;
    if (m_.residual_dropout && p_drop_) {
      emb_drop_mask = b_.alloc(bth(1), Category::activation, "embedding.dropout_mask", -1);
      const TensorId dropped =
          b_.alloc(bth(d_.param), Category::activation, "embedding.dropout", -1);
      b_.free(x);
      x = dropped;
    }
    std::vector<BlockState> states(static_cast<std::size_t>(m_.layers));
    for (int l = 0; l < m_.layers; ++l) {
      BlockState& s = states[static_cast<std::size_t>(l)];
      s.x_in = x;
      const bool ckpt_block = block_checkpointed(l);
      const TensorId gathered = fsdp_ ? all_gather(static_cast<std::size_t>(l) + 1) : kNone;
      attention_forward(l, s, ckpt_block);
      ffn_forward(l, s, ckpt_block || t_.checkpointing == Checkpointing::ffn, false, ckpt_block);
      b_.free(gathered);  // reshard after forward
      x = s.x2;
      s.x2 = kNone;
    }
    // final LayerNorm and LM head
    LayerNormOut lnf{};
    TensorId head_source = x;
    if (lnfw_ >= 0) {
      lnf = layernorm_forward("ln_f.out", -1, false);
      head_source = lnf.out;
    }
    const TensorId head_w = cast_weight(head_, "lm_head.weight_cast", -1, false);
    const TensorId head_in = matmul_input(head_source, "lm_head.input", -1);
    const bool head_in_is_copy = head_in != head_source;
    TensorId logits = b_.alloc(btv(d_.act), Category::activation, "logits", -1);
    if (head_in_is_copy)
      b_.free(head_source);  // forward() returns; x (or ln_f's output) dies
    autocast_exit();

    // loss = cross_entropy(logits.float()) / accum
    TensorId logits32 = kNone, log_probs = kNone, nll = kNone, total_weight = kNone, stats = kNone;
    TensorId loss = kNone;
    if (t_.compile.loss) {
      stats = b_.alloc(bt(4), Category::activation, "loss.row_stats", -1);
      nll = b_.alloc(4, Category::temporary, "loss.nll", -1);
    } else {
      if (d_.act != 4)
        logits32 = b_.alloc(btv(4), Category::temporary, "loss.logits_fp32", -1);
      log_probs = b_.alloc(btv(4), Category::activation, "loss.log_softmax", -1);
      nll = b_.alloc(4, Category::temporary, "loss.nll", -1);
      total_weight = b_.alloc(4, Category::activation, "loss.total_weight", -1);
      b_.free(logits32);
    }
    loss = b_.alloc(4, Category::temporary, "loss", -1);
    b_.free(nll);
    if (!t_.hold_logits && !t_.compile.loss) {
      b_.free(logits);
      logits = kNone;
    }

    // loss.backward()
    in_backward_ = true;
    const TensorId ones = b_.alloc(4, Category::temporary, "grad.loss", -1);
    TensorId grad_logits = kNone;
    if (t_.compile.loss) {
      grad_logits = b_.alloc(btv(d_.act), Category::temporary, "grad.logits", -1);
      b_.free(stats);
      if (!t_.hold_logits) {
        b_.free(logits);
        logits = kNone;
      }
    } else {
      const TensorId gdiv = b_.alloc(4, Category::temporary, "grad.loss_div", -1);
      const TensorId gnll = b_.alloc(btv(4), Category::temporary, "grad.nll", -1);
      b_.free(gdiv);
      b_.free(total_weight);
      const TensorId gls = b_.alloc(btv(4), Category::temporary, "grad.log_softmax", -1);
      b_.free(gnll);
      b_.free(log_probs);
      grad_logits = gls;
      if (d_.act != 4) {
        grad_logits = b_.alloc(btv(d_.act), Category::temporary, "grad.logits", -1);
        b_.free(gls);
      }
    }
    // LM head backward (no bias): grad weight first, then grad input (fixture order)
    const TensorId ghw =
        b_.alloc(numel(head_) * d_.act, d_.autocast ? Category::temporary : grad_category(head_),
                 "grad.lm_head", -1);
    after_backward_matmul();
    const TensorId ghi = b_.alloc(bth(d_.act), Category::temporary, "grad.lm_head_input", -1);
    b_.free(grad_logits);
    b_.free(head_w);
    b_.free(head_in_is_copy ? head_in : kNone);
    residual_grad_ = input_grad_to_residual(ghi, head_in_is_copy && d_.autocast, -1);
    weight_grad_cast(head_, ghw, "grad.weight", -1);
    if (lnfw_ >= 0) {
      const TensorId g = residual_grad_;
      // ln_f's input (the last block's output) is freed by its backward
      layernorm_backward(lnfw_, lnfb_, g, x, lnf.mean, lnf.rstd, -1, false);
      if (!head_in_is_copy)
        b_.free(lnf.out);
    } else if (!head_in_is_copy) {
      b_.free(x);  // saved by the head matmul itself
    }
    for (int l = m_.layers - 1; l >= 0; --l) {
      BlockState& s = states[static_cast<std::size_t>(l)];
      const TensorId gathered = fsdp_ ? all_gather(static_cast<std::size_t>(l) + 1) : kNone;
      ffn_backward(l, s);
      attention_backward(l, s);
      if (fsdp_) {
        reduce_scatter(static_cast<std::size_t>(l) + 1);
        b_.free(gathered);
      }
    }
    if (emb_drop_mask != kNone) {
      const TensorId gd =
          b_.alloc(bth(d_.param), Category::temporary, "grad.embedding_dropout", -1);
      b_.free(residual_grad_);
      b_.free(emb_drop_mask);
      residual_grad_ = gd;
    }
    if (pos_ >= 0) {
      const TensorId gsum = b_.alloc(static_cast<Bytes>(seq_) * static_cast<Bytes>(h_) * d_.param,
                                     Category::temporary, "grad.wpe_sum", -1);
      accumulate(pos_, b_.alloc(numel(pos_) * grad_bytes_, grad_category(pos_), "grad.wpe", -1));
      b_.free(gsum);
      b_.free(pos_ids);
    }
    embedding_backward();
    if (fsdp_) {
      reduce_scatter(0);
      b_.free(root_gather);
    }
    in_backward_ = false;
    b_.free(residual_grad_);
    residual_grad_ = kNone;
    b_.free(ones);
    b_.free(logits);  // del logits, loss, idx
    b_.free(loss);
    b_.free(idx);
  }

  // ---- optimizer ----------------------------------------------------------------------------
  void optimizer_step(bool first) {
    if (t_.optimizer == OptimizerKind::sgd)
      return;  // plain SGD (no momentum): in-place foreach add, no state, no temporaries
    if (fsdp_) {
      // per-rank state and foreach temporaries of each unit's flat shard
      if (first) {
        for (std::size_t u = 0; u < units_; ++u) {
          const int layer = static_cast<int>(u) - 1;
          state_ids_.push_back(
              b_.alloc(shard(u) * d_.param, Category::optimizer_state, "adam.exp_avg", layer));
          state_ids_.push_back(
              b_.alloc(shard(u) * d_.param, Category::optimizer_state, "adam.exp_avg_sq", layer));
        }
      }
      if (t_.fused_optimizer)
        return;
      std::vector<TensorId> temps;
      for (std::size_t u = 0; u < units_; ++u)
        temps.push_back(b_.alloc(shard(u) * d_.param, Category::temporary, "adam.foreach_tmp",
                                 static_cast<int>(u) - 1));
      for (auto it = temps.rbegin(); it != temps.rend(); ++it)
        b_.free(*it);
      return;
    }
    if (first) {
      // lazy state: exp_avg and exp_avg_sq (zeros_like) per parameter, in parameter order
      for (std::size_t i = 0; i < params_.size(); ++i) {
        const Bytes bytes = params_[i].numel * d_.param;
        state_ids_.push_back(
            b_.alloc(bytes, Category::optimizer_state, "adam.exp_avg", params_[i].layer));
        state_ids_.push_back(
            b_.alloc(bytes, Category::optimizer_state, "adam.exp_avg_sq", params_[i].layer));
      }
    }
    if (t_.fused_optimizer)
      return;
    // foreach: one parameter-sized temporary per tensor (sqrt(exp_avg_sq) / ...), freed in reverse
    std::vector<TensorId> temps;
    temps.reserve(params_.size());
    for (const Param& p : params_)
      temps.push_back(
          b_.alloc(p.numel * d_.param, Category::temporary, "adam.foreach_tmp", p.layer));
    for (auto it = temps.rbegin(); it != temps.rend(); ++it)
      b_.free(*it);
  }

  void zero_grad() {
    for (TensorId& g : unit_grad_) {
      b_.free(g);
      g = kNone;
    }
    for (TensorId& g : grads_) {
      b_.free(g);
      g = kNone;
    }
  }

  const Workload& w_;
  const GptModel& m_;
  const Training& t_;
  Dtypes d_;
  Builder b_;
  std::int64_t h_ = 0, f_ = 0, a_ = 0, v_ = 0;
  bool p_drop_ = false;
  bool casts_weights_ = true;
  Bytes shards_ = 1;
  bool fsdp_ = false;
  Bytes grad_bytes_ = 4;
  std::size_t units_ = 0;
  std::vector<Bytes> unit_numel_;
  std::vector<TensorId> unit_grad_;  // each unit's fp32 gradient shard
  std::vector<std::vector<TensorId>> pending_;
  std::vector<Param> params_;
  std::vector<BlockParams> blocks_;
  int emb_ = -1, pos_ = -1, lnfw_ = -1, lnfb_ = -1, head_ = -1;
  std::vector<TensorId> param_ids_, grads_, state_ids_;
  std::vector<TensorId> autocast_cache_, attn_return_frees_;
  TensorId residual_grad_{};
  bool forward_workspace_ = false;
  bool backward_workspace_ = false;
  bool backward_lt_workspace_ = false;
  bool in_backward_ = false;
  bool recomputed_ = false;  // the region being differentiated was recomputed by a checkpoint
  int bsz_ = 0, seq_ = 0;
  std::int64_t n_ = 0;
};

}  // namespace

std::uint64_t parameter_count(const GptModel& model) {
  const auto h = static_cast<std::uint64_t>(model.hidden);
  const auto f = static_cast<std::uint64_t>(model.ffn_mult) * h;
  const std::uint64_t b = model.bias ? 1 : 0;
  const std::uint64_t per_layer =
      2 * h + 2 * h * b + 3 * h * h + 3 * h * b + h * h + h * b + 2 * f * h + f * b + h * b;
  std::uint64_t total = static_cast<std::uint64_t>(model.layers) * per_layer;
  total += static_cast<std::uint64_t>(model.vocab) * h * (model.tied_embeddings ? 1 : 2);
  total += static_cast<std::uint64_t>(model.positions) * h;
  if (model.final_layernorm)
    total += h + h * b;
  return total;
}

RequestStream generate(const Workload& workload) {
  validate(workload);
  RequestStream out;
  GptGenerator(workload, out).run();
  return out;
}

}  // namespace fragscope::workload
