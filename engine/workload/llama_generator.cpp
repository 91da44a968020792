// The Llama-family training-step generator, in the Hugging Face LlamaForCausalLM layout: RMSNorm
// (pre-norm and final), q/k/v/o projections without biases (Qwen2: q/k/v with biases), rotary
// embeddings computed per forward in fp32 and applied with rotate_half, grouped-query attention
// through F.scaled_dot_product_attention(is_causal=True, enable_gqa=True), SwiGLU MLP
// down(silu(gate(x)) * up(x)), untied or tied LM head, no dropout. The order and sizes of
// requests are the ones of the recording llama_l8_h1024_varlen (PyTorch 2.11, H200): e.g. under
// autocast every projection casts its fp32 input again (the cast cache holds only weights), the
// rotary products are fp32 (fp32 cos/sin), and SDPA casts k before q.
#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <iterator>
#include <vector>

#include "engine/workload/step_generator.h"

namespace fragscope::workload::detail {
namespace {

struct LayerParams {
  int in_norm = -1, q = -1, qb = -1, k = -1, kb = -1, v = -1, vb = -1, o = -1, post_norm = -1,
      gate = -1, up = -1, down = -1;
};

// What one layer's forward leaves for its backward (kNone where nothing is kept).
struct LayerState {
  TensorId x_in, rms1_out, rms1_rstd, qw, qin, kw, kin, vw, vin, v, q_sdpa, k_sdpa, rng_seed,
      rng_offset, attn_o, lse, ow;
  TensorId x1, rms2_out, rms2_rstd, gw, gin, gate_out, silu_out, uw, uin, up_out, prod, dw;
  TensorId x2;
};

// SDPA's backward workspace with enable_gqa: one buffer of n·heads·(head_dim·(4 + 2·act) + 4)
// + 256 bytes (an fp32 dq accumulator, k/v gradients expanded to every query head, fp32 row
// sums, a scratch block). Fitted exactly on the 30 lengths of llama_l8_h1024_varlen
// (8256·n + 256 bytes at 16 heads of 64).
Bytes sdpa_backward_workspace(Bytes tokens, Bytes heads, Bytes head_dim, Bytes act) {
  return tokens * heads * (head_dim * (4 + 2 * act) + 4) + 256;
}
// SDPA's forward asks for a 256-byte scratch block right after the log-sum-exp, freed at once.
constexpr Bytes kSdpaForwardScratch = 256;

class LlamaGenerator final : public StepGenerator {
 public:
  LlamaGenerator(const Workload& w, RequestStream& out) : StepGenerator(w, out) {
    a_ = m_.heads;
    kvh_ = m_.effective_kv_heads();
    hd_ = m_.effective_head_dim();
    qw_ = m_.query_width();
    kvw_ = m_.kv_width();
    inter_ = m_.intermediate;
    // cos/sin take the embedding output's dtype: fp32 under autocast, so the rotary products
    // and their gradients are fp32 there
    rot_ = std::max(d_.act, d_.param);
    casts_inputs_ = d_.autocast;
    // a compiled Llama's graphs use plain mm (no biases): no cuBLASLt workspace
    compiled_ = {CompiledModel::llama, a_, inter_, kvh_, false};
    build_params();
    finish_params();
  }

 private:
  // ---- parameters (module registration order) ----------------------------------------------
  void build_params() {
    const auto h = static_cast<Bytes>(h_);
    const auto q = static_cast<Bytes>(qw_);
    const auto kv = static_cast<Bytes>(kvw_);
    const auto inter = static_cast<Bytes>(inter_);
    emb_ = add_param(static_cast<Bytes>(v_) * h, -1, "embed_tokens.weight");
    for (int l = 0; l < m_.layers; ++l) {
      LayerParams p;
      p.in_norm = add_param(h, l, "input_layernorm.weight");
      p.q = add_param(q * h, l, "q_proj.weight");
      if (m_.qkv_bias)
        p.qb = add_param(q, l, "q_proj.bias");
      p.k = add_param(kv * h, l, "k_proj.weight");
      if (m_.qkv_bias)
        p.kb = add_param(kv, l, "k_proj.bias");
      p.v = add_param(kv * h, l, "v_proj.weight");
      if (m_.qkv_bias)
        p.vb = add_param(kv, l, "v_proj.bias");
      p.o = add_param(h * q, l, "o_proj.weight");
      p.post_norm = add_param(h, l, "post_attention_layernorm.weight");
      p.gate = add_param(inter * h, l, "gate_proj.weight");
      p.up = add_param(inter * h, l, "up_proj.weight");
      p.down = add_param(h * inter, l, "down_proj.weight");
      layers_.push_back(p);
    }
    norm_ = add_param(h, -1, "norm.weight");
    head_ = m_.tied_embeddings ? emb_ : add_param(static_cast<Bytes>(v_) * h, -1, "lm_head.weight");
    // the rotary inverse frequencies, a non-persistent fp32 buffer of head_dim / 2
    add_buffer(4 * static_cast<Bytes>(hd_ / 2), "rotary.inv_freq");
  }

  const LayerParams& params(int l) const { return layers_[static_cast<std::size_t>(l)]; }
  Bytes tok(std::int64_t width, Bytes elem) const {
    return tokens_times(static_cast<Bytes>(width), elem);
  }
  Bytes seq_times(std::int64_t width, Bytes elem) const {
    return elem * static_cast<Bytes>(seq_) * static_cast<Bytes>(width);
  }

  // ---- rotary table ---------------------------------------------------------------------------
  // HF LlamaRotaryEmbedding: positions → fp32 inv_freq @ positions (a matmul: the forward's cuBLAS
  // workspace comes here) → cat(freqs, freqs) → cos, sin (each "* attention_scaling", a copy).
  void rotary_table() {
    const TensorId pos = b_.alloc(seq_times(1, 8), Category::input, "rope.positions", -1);
    const TensorId posf = b_.alloc(seq_times(1, 4), Category::temporary, "rope.positions_fp32", -1);
    const TensorId freqs = b_.alloc(seq_times(hd_ / 2, 4), Category::temporary, "rope.freqs", -1);
    after_forward_matmul(false);
    b_.free(posf);
    const TensorId emb = b_.alloc(seq_times(hd_, 4), Category::temporary, "rope.emb", -1);
    const TensorId cos_raw = b_.alloc(seq_times(hd_, 4), Category::temporary, "rope.cos_raw", -1);
    cos_ = b_.alloc(seq_times(hd_, 4), Category::activation, "rope.cos", -1);
    b_.free(cos_raw);
    const TensorId sin_raw = b_.alloc(seq_times(hd_, 4), Category::temporary, "rope.sin_raw", -1);
    sin_ = b_.alloc(seq_times(hd_, 4), Category::activation, "rope.sin", -1);
    b_.free(sin_raw);
    if (d_.param != 4) {
      // cos.to(x.dtype), sin.to(x.dtype) for 16-bit parameters
      const TensorId cos16 =
          b_.alloc(seq_times(hd_, d_.param), Category::activation, "rope.cos", -1);
      const TensorId sin16 =
          b_.alloc(seq_times(hd_, d_.param), Category::activation, "rope.sin", -1);
      b_.free(cos_);
      b_.free(sin_);
      cos_ = cos16;
      sin_ = sin16;
    }
    b_.free(pos);
    b_.free(freqs);
    b_.free(emb);
  }

  // q * cos + rotate_half(q) * sin for a (tokens × width) projection output; frees it.
  TensorId rotate(TensorId x, std::int64_t width, int l) {
    const TensorId xc = b_.alloc(tok(width, rot_), Category::temporary, "rope.x_cos", l);
    const TensorId neg = b_.alloc(tok(width / 2, d_.act), Category::temporary, "rope.neg", l);
    const TensorId cat = b_.alloc(tok(width, d_.act), Category::temporary, "rope.rotate_half", l);
    b_.free(neg);
    const TensorId xs = b_.alloc(tok(width, rot_), Category::temporary, "rope.x_sin", l);
    b_.free(cat);
    const TensorId out = b_.alloc(tok(width, rot_), Category::activation, "rope.out", l);
    b_.free(xc);
    b_.free(xs);
    b_.free(x);  // the projection output: the products saved only cos and sin
    return out;
  }

  // ---- forward --------------------------------------------------------------------------------
  struct Linear {
    TensorId weight, input, out;
  };
  // A projection of the (32-bit under autocast) normed input: bias and weight casts, the input's
  // 16-bit copy (made again for every projection), the output.
  Linear project(int wparam, int bparam, TensorId source, std::int64_t out_width, const char* op,
                 int l, bool discard) {
    Linear r;
    cast_bias(bparam, op, l);
    r.weight = cast_weight(wparam, op, l, discard);
    r.input = casts_inputs_ ? b_.alloc(bth(d_.act), Category::activation, op, l) : source;
    r.out = b_.alloc(tok(out_width, d_.act), Category::activation, op, l);
    if (bparam >= 0 && !in_backward_ && !forward_lt_workspace_) {
      forward_lt_workspace_ = true;
      b_.alloc(kCublasLtWorkspace, Category::temporary, "cublaslt.workspace", -1);
    }
    if (discard && casts_inputs_) {
      b_.free(r.input);
      r.input = kNone;
    }
    return r;
  }

  void attention_forward(int l, LayerState& s, bool discard) {
    const LayerParams& p = params(l);
    s.rms1_out = b_.alloc(bth(d_.res), Category::activation, "input_layernorm.out", l);
    s.rms1_rstd = b_.alloc(bt(4), Category::activation, "input_layernorm.rstd", l);
    if (discard) {
      b_.free(s.rms1_rstd);
      s.rms1_rstd = kNone;
    }
    const Linear q = project(p.q, p.qb, s.rms1_out, qw_, "q_proj", l, discard);
    const Linear k = project(p.k, p.kb, s.rms1_out, kvw_, "k_proj", l, discard);
    const Linear v = project(p.v, p.vb, s.rms1_out, kvw_, "v_proj", l, discard);
    s.qw = q.weight;
    s.qin = q.input;
    s.kw = k.weight;
    s.kin = k.input;
    s.vw = v.weight;
    s.vin = v.input;
    s.v = v.out;
    const TensorId q_rot = rotate(q.out, qw_, l);
    const TensorId k_rot = rotate(k.out, kvw_, l);
    // autocast runs SDPA in 16 bits: casts of the fp32 rotated k and q (in that order), saved
    const bool sdpa_casts = rot_ != d_.act;
    if (sdpa_casts) {
      s.k_sdpa = b_.alloc(tok(kvw_, d_.act), Category::activation, "sdpa.k_cast", l);
      s.q_sdpa = b_.alloc(tok(qw_, d_.act), Category::activation, "sdpa.q_cast", l);
    } else {
      s.k_sdpa = k_rot;
      s.q_sdpa = q_rot;
    }
    s.rng_seed = b_.alloc(8, Category::activation, "sdpa.philox_seed", l);
    s.rng_offset = b_.alloc(8, Category::activation, "sdpa.philox_offset", l);
    s.attn_o = b_.alloc(tok(qw_, d_.act), Category::activation, "sdpa.out", l);
    s.lse = b_.alloc(tok(a_, 4), Category::activation, "sdpa.lse", l);
    b_.free(b_.alloc(kSdpaForwardScratch, Category::temporary, "sdpa.scratch", l));
    if (discard) {
      for (TensorId* t : {&s.lse, &s.rng_seed, &s.rng_offset}) {
        b_.free(*t);
        *t = kNone;
      }
      if (sdpa_casts) {
        b_.free(s.q_sdpa);
        b_.free(s.k_sdpa);
      }
      s.k_sdpa = s.q_sdpa = kNone;
    }
    s.ow = cast_weight(p.o, "o_proj", l, discard);
    const TensorId o_out = b_.alloc(bth(d_.act), Category::temporary, "o_proj.out", l);
    // attention() returns: its locals q, k, v, y die, then the normed input (the call's argument)
    if (sdpa_casts || discard) {
      b_.free(q_rot);
      b_.free(k_rot);
    }
    if (discard) {
      b_.free(s.v);
      b_.free(s.attn_o);
      s.v = s.attn_o = kNone;
    }
    if (casts_inputs_ || discard) {
      b_.free(s.rms1_out);
      s.rms1_out = kNone;
    }
    s.x1 = b_.alloc(bth(d_.res), Category::activation, "residual.attn", l);
    b_.free(o_out);
  }

  // stop_early: a checkpoint recompute stops once the last saved tensor (down's input) exists.
  void mlp_forward(int l, LayerState& s, bool discard, bool stop_early, bool free_region_input) {
    const LayerParams& p = params(l);
    s.rms2_out = b_.alloc(bth(d_.res), Category::activation, "post_attention_layernorm.out", l);
    s.rms2_rstd = b_.alloc(bt(4), Category::activation, "post_attention_layernorm.rstd", l);
    if (discard) {
      b_.free(s.rms2_rstd);
      s.rms2_rstd = kNone;
    }
    const Linear gate = project(p.gate, -1, s.rms2_out, inter_, "gate_proj", l, discard);
    s.gw = gate.weight;
    s.gin = gate.input;
    s.gate_out = gate.out;
    s.silu_out = b_.alloc(tok(inter_, d_.act), Category::activation, "mlp.silu", l);
    if (discard) {
      b_.free(s.gate_out);
      s.gate_out = kNone;
    }
    const Linear up = project(p.up, -1, s.rms2_out, inter_, "up_proj", l, discard);
    s.uw = up.weight;
    s.uin = up.input;
    s.up_out = up.out;
    s.prod = b_.alloc(tok(inter_, d_.act), Category::activation, "mlp.silu_times_up", l);
    if (discard) {
      b_.free(s.silu_out);
      b_.free(s.up_out);
      s.silu_out = s.up_out = kNone;
    }
    s.dw = cast_weight(p.down, "down_proj", l, discard);
    if (stop_early) {
      // the recompute stops here; the normed input was only needed for its 16-bit copies
      if (casts_inputs_) {
        b_.free(s.rms2_out);
        s.rms2_out = kNone;
      }
      return;
    }
    const TensorId down_out = b_.alloc(bth(d_.act), Category::temporary, "down_proj.out", l);
    if (discard) {
      b_.free(s.prod);
      s.prod = kNone;
    }
    if (casts_inputs_ || discard) {
      b_.free(s.rms2_out);
      s.rms2_out = kNone;
    }
    s.x2 = b_.alloc(bth(d_.res), Category::activation, "residual.mlp", l);
    b_.free(down_out);
    if (free_region_input) {
      b_.free(s.x1);
      s.x1 = kNone;
    }
  }

  bool layer_checkpointed(int l) const {
    return t_.checkpointing == Checkpointing::blocks && l % t_.checkpoint_every == 0;
  }

  // ---- backward -------------------------------------------------------------------------------
  // After a node's backward: the incoming gradient and the node's saved tensors go. A node of a
  // recomputed (checkpointed) layer releases its unpacked tensors first, in reverse.
  void release(TensorId grad, std::initializer_list<TensorId> saved) {
    if (recomputed_) {
      for (auto it = std::rbegin(saved); it != std::rend(saved); ++it)
        b_.free(*it);
      b_.free(grad);
      return;
    }
    b_.free(grad);
    for (TensorId t : saved)
      b_.free(t);
  }

  // RMSNorm backward: grad input, grad weight, then the saved tensors (rstd first in a recomputed
  // layer, where the input is a recomputed tensor unless it is the checkpoint's own input).
  void rms_backward(int wparam, TensorId grad, TensorId saved_input, TensorId rstd, int l,
                    bool input_recomputed, bool into_residual, bool releases_rotary = false) {
    const TensorId gx = b_.alloc(bth(d_.res), Category::temporary, "grad.rmsnorm", l);
    const TensorId gw =
        b_.alloc(numel(wparam) * grad_bytes_, grad_category(wparam), "grad.rmsnorm.weight", l);
    if (recomputed_) {
      b_.free(rstd);
      if (input_recomputed)
        b_.free(saved_input);
      b_.free(grad);
      if (!input_recomputed)
        b_.free(saved_input);
      if (releases_rotary) {
        // the first layer's checkpoint held cos and sin as inputs
        b_.free(cos_);
        b_.free(sin_);
        cos_ = sin_ = kNone;
      }
    } else {
      b_.free(grad);
      b_.free(saved_input);
      b_.free(rstd);
    }
    if (into_residual)
      b_.free(gx);  // added in place into the residual gradient
    else
      residual_grad_ = gx;
    accumulate(wparam, gw);
  }

  // The residual add hands the residual gradient to a 16-bit branch: a cast when they differ.
  TensorId branch_grad(int l) {
    if (d_.res == d_.act)
      return kNone;
    return b_.alloc(bth(d_.act), Category::temporary, "grad.branch_cast", l);
  }

  // Backward of a projection (mm, no bias: grad weight first, then grad input; addmm with bias:
  // grad input, grad weight, grad bias). Returns the gradient of the projection's input in the
  // residual dtype; `accumulated` adds it into an earlier one (freed at once).
  TensorId linear_backward(int wparam, int bparam, TensorId grad, bool grad_owned,
                           TensorId saved_weight, TensorId saved_input, Bytes in_bytes,
                           std::int64_t out_width, int l, bool accumulated) {
    const Category wcat = d_.autocast || fsdp_ ? Category::temporary : grad_category(wparam);
    TensorId gw = kNone, gi = kNone, gb = kNone;
    if (bparam >= 0) {
      gi = b_.alloc(in_bytes, Category::temporary, "grad.input", l);
      gw = b_.alloc(numel(wparam) * d_.act, wcat, "grad.weight", l);
      gb = b_.alloc(numel(bparam) * d_.act,
                    d_.autocast || fsdp_ ? Category::temporary : grad_category(bparam), "grad.bias",
                    l);
      bias_grad_workspace(static_cast<Bytes>(out_width), l);
    } else {
      gw = b_.alloc(numel(wparam) * d_.act, wcat, "grad.weight", l);
      after_backward_matmul();
      gi = b_.alloc(in_bytes, Category::temporary, "grad.input", l);
    }
    release(grad_owned ? grad : kNone, {saved_weight, casts_inputs_ ? saved_input : kNone});
    const TensorId g_in = input_grad_to_residual(gi, casts_inputs_, l);
    if (accumulated)
      b_.free(g_in);
    weight_grad_cast(wparam, gw, "grad.weight", l);
    if (bparam >= 0)
      weight_grad_cast(bparam, gb, "grad.bias", l);
    return accumulated ? kNone : g_in;
  }

  void mlp_backward(int l, LayerState& s) {
    const LayerParams& p = params(l);
    const TensorId owned = branch_grad(l);
    recomputed_ = layer_checkpointed(l);
    if (recomputed_) {
      // non-reentrant checkpoint: the first unpack re-runs the layer up to down's input
      attention_forward(l, s, false);
      mlp_forward(l, s, false, true, false);
      autocast_exit();
    }
    // down_proj: its grad input is the gradient of silu(gate) * up
    const Category wcat = d_.autocast || fsdp_ ? Category::temporary : grad_category(p.down);
    const TensorId gdw = b_.alloc(numel(p.down) * d_.act, wcat, "grad.weight", l);
    after_backward_matmul();
    const TensorId gprod = b_.alloc(tok(inter_, d_.act), Category::temporary, "grad.input", l);
    release(owned, {s.dw, s.prod});
    weight_grad_cast(p.down, gdw, "grad.weight", l);
    // mul backward: grad of up's output (g · silu), grad of silu's output (g · up)
    const TensorId gup = b_.alloc(tok(inter_, d_.act), Category::temporary, "grad.up_out", l);
    const TensorId gsilu = b_.alloc(tok(inter_, d_.act), Category::temporary, "grad.silu_out", l);
    release(gprod, {s.up_out, s.silu_out});
    const TensorId gin =
        linear_backward(p.up, -1, gup, true, s.uw, s.uin, bth(d_.act), inter_, l, false);
    const TensorId ggate = b_.alloc(tok(inter_, d_.act), Category::temporary, "grad.gate_out", l);
    release(gsilu, {s.gate_out});
    linear_backward(p.gate, -1, ggate, true, s.gw, s.gin, bth(d_.act), inter_, l, true);
    if (!casts_inputs_)
      b_.free(s.rms2_out);  // saved by gate and up themselves
    rms_backward(p.post_norm, gin, s.x1, s.rms2_rstd, l, true, true);
  }

  // Backward of q·cos + rotate_half(q)·sin for gradient g (rotary dtype): the gradient of the
  // projection output, 16-bit, in (batch, heads, tokens, head_dim) layout. The last user of the
  // rotary table frees cos and sin.
  TensorId rotary_backward(TensorId g, std::int64_t width, int l, bool last_user) {
    const auto to_act = [&](TensorId t) {
      if (rot_ == d_.act)
        return t;
      const TensorId c = b_.alloc(tok(width, d_.act), Category::temporary, "grad.rope_cast", l);
      b_.free(t);
      return c;
    };
    const TensorId gs = to_act(b_.alloc(tok(width, rot_), Category::temporary, "grad.rope_sin", l));
    if (last_user) {
      b_.free(sin_);
      sin_ = kNone;
    }
    const TensorId neg = b_.alloc(tok(width / 2, d_.act), Category::temporary, "grad.rope_neg", l);
    const TensorId out = b_.alloc(tok(width, d_.act), Category::temporary, "grad.rope", l);
    b_.free(neg);
    const TensorId half = b_.alloc(tok(width, d_.act), Category::temporary, "grad.rope_half", l);
    b_.free(gs);
    b_.free(half);
    const TensorId gc = to_act(b_.alloc(tok(width, rot_), Category::temporary, "grad.rope_cos", l));
    b_.free(g);
    if (last_user) {
      b_.free(cos_);
      cos_ = kNone;
    }
    b_.free(gc);
    return out;
  }

  void attention_backward(int l, LayerState& s) {
    const LayerParams& p = params(l);
    const TensorId owned = branch_grad(l);
    // o_proj (no bias): its input, SDPA's output, is released by SDPA's backward
    const Category wcat = d_.autocast || fsdp_ ? Category::temporary : grad_category(p.o);
    const TensorId gow = b_.alloc(numel(p.o) * d_.act, wcat, "grad.weight", l);
    after_backward_matmul();
    const TensorId gy = b_.alloc(tok(qw_, d_.act), Category::temporary, "grad.input", l);
    release(owned, {s.ow});
    weight_grad_cast(p.o, gow, "grad.weight", l);
    // SDPA backward
    TensorId dq = b_.alloc(tok(qw_, d_.act), Category::temporary, "grad.sdpa_q", l);
    TensorId dk = b_.alloc(tok(kvw_, d_.act), Category::temporary, "grad.sdpa_k", l);
    const TensorId dv = b_.alloc(tok(kvw_, d_.act), Category::temporary, "grad.sdpa_v", l);
    b_.free(b_.alloc(sdpa_backward_workspace(static_cast<Bytes>(n_), static_cast<Bytes>(a_),
                                             static_cast<Bytes>(hd_), d_.act),
                     Category::temporary, "grad.sdpa_workspace", l));
    release(gy, {s.k_sdpa, s.q_sdpa, s.v, s.lse, s.attn_o, s.rng_offset, s.rng_seed});
    if (rot_ != d_.act) {
      const TensorId dq32 = b_.alloc(tok(qw_, rot_), Category::temporary, "grad.sdpa_q_fp32", l);
      b_.free(dq);
      dq = dq32;
      const TensorId dk32 = b_.alloc(tok(kvw_, rot_), Category::temporary, "grad.sdpa_k_fp32", l);
      b_.free(dk);
      dk = dk32;
    }
    const TensorId gk = rotary_backward(dk, kvw_, l, false);
    const TensorId gq = rotary_backward(dq, qw_, l, l == 0 && !recomputed_);
    // v, k, q projections; the gradients of k and q are made contiguous for the views
    const TensorId gin =
        linear_backward(p.v, p.vb, dv, true, s.vw, s.vin, bth(d_.act), kvw_, l, false);
    const TensorId gkc = b_.alloc(tok(kvw_, d_.act), Category::temporary, "grad.k_contiguous", l);
    b_.free(gk);
    linear_backward(p.k, p.kb, gkc, true, s.kw, s.kin, bth(d_.act), kvw_, l, true);
    const TensorId gqc = b_.alloc(tok(qw_, d_.act), Category::temporary, "grad.q_contiguous", l);
    b_.free(gq);
    linear_backward(p.q, p.qb, gqc, true, s.qw, s.qin, bth(d_.act), qw_, l, true);
    if (!casts_inputs_)
      b_.free(s.rms1_out);  // saved by the projections themselves
    rms_backward(p.in_norm, gin, s.x_in, s.rms1_rstd, l, false, true, l == 0 && recomputed_);
    recomputed_ = false;
  }

  // ---- one micro-batch ------------------------------------------------------------------------
  void micro_batch(const MicroBatch& shape) override {
    if (t_.compile.whole_model()) {
      compiled_micro_batch(shape);
      return;
    }
    begin_micro_batch(shape);
    const TensorId idx = b_.alloc(bt(8), Category::input, "input.tokens", -1);
    fsdp_pre_forward(0);
    TensorId x = b_.alloc(bth(d_.param), Category::activation, "embed_tokens.out", -1);
    rotary_table();
    std::vector<LayerState> states(static_cast<std::size_t>(m_.layers));
    for (int l = 0; l < m_.layers; ++l) {
      LayerState& s = states[static_cast<std::size_t>(l)];
      s.x_in = x;
      const bool ckpt = layer_checkpointed(l);
      fsdp_pre_forward(block_unit(l));
      attention_forward(l, s, ckpt);
      mlp_forward(l, s, ckpt, false, ckpt);
      fsdp_post_forward(block_unit(l));
      x = s.x2;
      s.x2 = kNone;
    }
    // final RMSNorm and LM head
    const TensorId norm_out = b_.alloc(bth(d_.res), Category::activation, "norm.out", -1);
    const TensorId norm_rstd = b_.alloc(bt(4), Category::activation, "norm.rstd", -1);
    const TensorId head_w = cast_weight(head_, "lm_head.weight_cast", -1, false);
    const TensorId head_in =
        casts_inputs_ ? b_.alloc(bth(d_.act), Category::activation, "lm_head.input", -1) : norm_out;
    const TensorId logits = b_.alloc(btv(d_.act), Category::activation, "logits", -1);
    if (casts_inputs_)
      b_.free(norm_out);
    autocast_exit();
    fsdp_end_forward();

    LossState loss = loss_forward(logits);
    const TensorId grad_logits = loss_backward(loss);
    fsdp_pre_backward(0, m_.layers > 0 ? block_unit(m_.layers - 1) : units_);
    lm_head_backward(grad_logits, head_w, head_in, casts_inputs_);
    if (!casts_inputs_)
      b_.free(norm_out);
    rms_backward(norm_, residual_grad_, x, norm_rstd, -1, false, false);
    for (int l = m_.layers - 1; l >= 0; --l) {
      LayerState& s = states[static_cast<std::size_t>(l)];
      fsdp_pre_backward(block_unit(l), l > 0 ? block_unit(l - 1) : units_);
      mlp_backward(l, s);
      attention_backward(l, s);
      fsdp_post_backward(block_unit(l));
    }
    b_.free(cos_);
    b_.free(sin_);
    cos_ = sin_ = kNone;
    embedding_backward();
    fsdp_post_backward(0);
    fsdp_end_backward();
    end_micro_batch(loss, idx);
  }

  std::int64_t a_ = 0, kvh_ = 0, hd_ = 0, qw_ = 0, kvw_ = 0, inter_ = 0;
  Bytes rot_ = 4;
  bool casts_inputs_ = true;
  bool forward_lt_workspace_ = false;
  std::vector<LayerParams> layers_;
  int norm_ = -1;
  TensorId cos_{}, sin_{};
};

}  // namespace

void generate_llama(const Workload& workload, RequestStream& out) {
  LlamaGenerator(workload, out).run();
}

}  // namespace fragscope::workload::detail
