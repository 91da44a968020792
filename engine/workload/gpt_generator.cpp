// The GPT training-step generator (GPT-2 / nanoGPT-style blocks: LayerNorm, GeLU MLP, fused QKV,
// eager or SDPA attention, optional biases, dropout, learned positions). Comments cite the fixture
// trace where the order is not obvious from autograd semantics; sizes are requested bytes.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "engine/workload/step_generator.h"

namespace fragscope::workload::detail {
namespace {

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

class GptGenerator final : public StepGenerator {
 public:
  GptGenerator(const Workload& w, RequestStream& out) : StepGenerator(w, out) {
    f_ = static_cast<std::int64_t>(m_.ffn_mult) * m_.hidden;
    a_ = m_.heads;
    compiled_ = {CompiledModel::gpt, a_, f_, a_, true};
    p_drop_ = m_.dropout > 0;
    build_params();
    finish_params();
  }

 private:
  // ---- parameters -------------------------------------------------------------------------
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

  // ---- shapes -------------------------------------------------------------------------------
  Bytes btf(Bytes elem) const { return elem * static_cast<Bytes>(n_) * static_cast<Bytes>(f_); }
  Bytes abtt(Bytes elem) const {
    return elem * static_cast<Bytes>(a_) * static_cast<Bytes>(bsz_) * static_cast<Bytes>(seq_) *
           static_cast<Bytes>(seq_);
  }

  // ---- building blocks ----------------------------------------------------------------------
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
    if (m_.bias || !in_backward_)
      after_forward_matmul(m_.bias);
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

  // ---- one micro-batch ----------------------------------------------------------------------
  void micro_batch(const MicroBatch& shape) {
    if (t_.compile.whole_model()) {
      compiled_micro_batch(shape);
      return;
    }
    begin_micro_batch(shape);
    const TensorId idx = b_.alloc(bt(8), Category::input, "input.tokens", -1);
    fsdp_pre_forward(0);
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
      fsdp_pre_forward(block_unit(l));
      attention_forward(l, s, ckpt_block);
      ffn_forward(l, s, ckpt_block || t_.checkpointing == Checkpointing::ffn, false, ckpt_block);
      fsdp_post_forward(block_unit(l));
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
    const TensorId logits = b_.alloc(btv(d_.act), Category::activation, "logits", -1);
    if (head_in_is_copy)
      b_.free(head_source);  // forward() returns; x (or ln_f's output) dies
    autocast_exit();
    fsdp_end_forward();

    // loss = cross_entropy(logits.float()) / accum, then loss.backward()
    LossState loss = loss_forward(logits);
    const TensorId grad_logits = loss_backward(loss);
    fsdp_pre_backward(0, m_.layers > 0 ? block_unit(m_.layers - 1) : units_);
    lm_head_backward(grad_logits, head_w, head_in, head_in_is_copy);
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
      fsdp_pre_backward(block_unit(l), l > 0 ? block_unit(l - 1) : units_);
      ffn_backward(l, s);
      attention_backward(l, s);
      fsdp_post_backward(block_unit(l));
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
    fsdp_post_backward(0);
    fsdp_end_backward();
    end_micro_batch(loss, idx);
  }

  std::int64_t f_ = 0, a_ = 0;
  bool p_drop_ = false;
  std::vector<BlockParams> blocks_;
  int pos_ = -1, lnfw_ = -1, lnfb_ = -1;
  std::vector<TensorId> attn_return_frees_;
};

}  // namespace

void generate_gpt(const Workload& workload, RequestStream& out) {
  GptGenerator(workload, out).run();
}

}  // namespace fragscope::workload::detail
