// The parts of a training step every decoder family shares. Comments cite the fixture trace where
// the order is not obvious from autograd semantics; sizes are requested bytes (the allocator
// model rounds them).
#include "engine/workload/step_generator.h"

#include "engine/workload/ddp.h"

#include <algorithm>

namespace fragscope::workload::detail {

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

// ---- Builder ----------------------------------------------------------------------------------
TensorId Builder::alloc(Bytes size, Category category, const char* op, int layer) {
  return alloc_on(size, StreamId{}, category, op, layer);
}

TensorId Builder::alloc_on(Bytes size, StreamId stream, Category category, const char* op,
                           int layer) {
  const TensorId id{next_++};
  Request r;
  r.op = RequestOp::malloc;
  r.tensor = id;
  r.size = size;
  r.stream = stream;
  r.label = label(category, op, layer);
  out_.requests.push_back(r);
  return id;
}

void Builder::free(TensorId id) {
  if (id == kNone)
    return;
  Request r;
  r.op = RequestOp::free;
  r.tensor = id;
  out_.requests.push_back(r);
}

void Builder::marker(RequestOp op, Bytes value) {
  Request r;
  r.op = op;
  r.size = value;
  out_.requests.push_back(r);
}

void Builder::pool_request(RequestOp op, MempoolId pool) {
  Request r;
  r.op = op;
  r.pool = out_.pool_index(pool);
  out_.requests.push_back(r);
}

LabelId Builder::label(Category category, const char* op, int layer) {
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

// ---- StepGenerator ----------------------------------------------------------------------------
StepGenerator::StepGenerator(const Workload& w, RequestStream& out)
    : w_(w), m_(w.model), t_(w.training), d_(dtypes_for(w.training.precision)), b_(out) {
  h_ = m_.hidden;
  v_ = m_.vocab;
  shards_ = static_cast<Bytes>(w.parallel.fsdp_shards);
  fsdp_ = shards_ > 1;
  const bool sixteen_bit_params = fsdp_ && w.parallel.fsdp_mixed_precision;
  // FSDP's mixed precision all-gathers 16-bit parameters: there is nothing left for autocast to
  // cast, and autograd makes 16-bit gradients
  casts_weights_ = d_.autocast && !sixteen_bit_params;
  grad_bytes_ = sixteen_bit_params ? d_.act : d_.param;
  unsharded_bytes_ = sixteen_bit_params ? d_.act : d_.param;
}

int StepGenerator::add_param(Bytes numel, int layer, const char* name) {
  params_.push_back(Param{numel, layer, name});
  return static_cast<int>(params_.size() - 1);
}

void StepGenerator::finish_params() {
  units_ = static_cast<std::size_t>(m_.layers) + 1;
  unit_params_.assign(units_, {});
  unit_shard_numel_.assign(units_, 0);
  for (std::size_t i = 0; i < params_.size(); ++i) {
    unit_params_[unit_of(params_[i])].push_back(static_cast<int>(i));
    unit_shard_numel_[unit_of(params_[i])] += param_shard(params_[i]);
  }
  unit_grad_.assign(units_, kNone);
  pending_.assign(units_, {});
  unsharded_.assign(units_, {});
  gathered_.assign(units_, kNone);
}

void StepGenerator::run() {
  for (const Param& p : params_)
    param_ids_.push_back(b_.alloc(p.numel * d_.param, Category::parameter, p.name, p.layer));
  if (fsdp_)
    fsdp_shard_parameters();
  for (const Param& p : buffers_)
    buffer_ids_.push_back(b_.alloc(p.numel, Category::parameter, p.name, p.layer));
  grads_.assign(params_.size(), kNone);
  if (w_.parallel.ddp) {
    std::vector<Bytes> grad_bytes;
    for (const Param& p : params_)
      grad_bytes.push_back(p.numel * d_.param);
    ddp_ = std::make_shared<DdpBuckets>(b_, std::move(grad_bytes),
                                        static_cast<Bytes>(w_.parallel.ddp_bucket_cap_mb) * kMiB);
    ddp_->construct();
  }
  const std::vector<MicroBatch> shapes = micro_batches(t_);
  std::size_t mb = 0;
  for (int step = 0; step < t_.steps; ++step) {
    b_.marker(RequestOp::step_begin, static_cast<Bytes>(step));
    if (ddp_)
      ddp_->step_begins(step);
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
  if (ddp_)
    ddp_->teardown();
  for (auto it = buffer_ids_.rbegin(); it != buffer_ids_.rend(); ++it)
    b_.free(*it);
  for (auto it = param_ids_.rbegin(); it != param_ids_.rend(); ++it)
    b_.free(*it);
}

// ---- FSDP2 ------------------------------------------------------------------------------------
// What torch.distributed.fsdp.fully_shard (PyTorch 2.11, _fsdp_param_group.py /
// _fsdp_collectives.py) asks of the caching allocator, as the 2-rank recordings in
// tests/fixtures/fsdp2-gloo-2.11-h200 show it. Each parameter is sharded on its own (dim-0 chunks;
// the padding of a dim 0 that does not divide by the rank count is left out). Streams: the
// all-gather copy-in and output are allocated on the copy-in stream, the reduce-scatter output on
// the reduce-scatter stream, so their cached blocks are never reused by the compute stream.
namespace {
constexpr StreamId kAllGatherStream{1};
constexpr StreamId kGlooAllGatherStream{2};
constexpr StreamId kReduceScatterStream{3};
}  // namespace

// fully_shard on every block in order, then on the root: a unit's shards are allocated (fp32,
// one per parameter), then its full parameters freed (the model was built on the GPU).
void StepGenerator::fsdp_shard_parameters() {
  std::vector<std::size_t> order;
  for (std::size_t u = 1; u < units_; ++u)
    order.push_back(u);
  order.push_back(0);
  for (std::size_t u : order) {
    std::vector<TensorId> full;
    for (int i : unit_params_[u]) {
      const Param& p = params_[static_cast<std::size_t>(i)];
      full.push_back(param_ids_[static_cast<std::size_t>(i)]);
      param_ids_[static_cast<std::size_t>(i)] =
          b_.alloc(param_shard(p) * d_.param, Category::parameter, "fsdp.param_shard", p.layer);
    }
    for (TensorId id : full)
      b_.free(id);
  }
}

void StepGenerator::fsdp_all_gather(std::size_t unit) {
  if (!unsharded_[unit].empty() || gathered_[unit] != kNone)
    return;
  const int layer = static_cast<int>(unit) - 1;
  const Bytes in_bytes = unit_shard_numel_[unit] * unsharded_bytes_;
  const TensorId in =
      b_.alloc_on(in_bytes, kAllGatherStream, Category::temporary, "fsdp.all_gather_input", layer);
  gathered_[unit] = b_.alloc_on(in_bytes * shards_, kAllGatherStream, Category::temporary,
                                "fsdp.all_gather_output", layer);
  if (w_.parallel.backend == Backend::gloo)
    b_.free(b_.alloc_on(in_bytes * shards_, kGlooAllGatherStream, Category::temporary,
                        "gloo.all_gather_temp", layer));
  b_.free(in);
}

// The unsharded parameters are copied out of the all-gather output. In forward the output is
// kept until the next unit's copy-out (FSDP2's all_gather_state); in backward it goes at once.
void StepGenerator::fsdp_copy_out(std::size_t unit, bool forward) {
  if (!unsharded_[unit].empty())
    return;
  fsdp_all_gather(unit);
  for (int i : unit_params_[unit]) {
    const Param& p = params_[static_cast<std::size_t>(i)];
    unsharded_[unit].push_back(
        b_.alloc(p.numel * unsharded_bytes_, Category::parameter, "fsdp.unsharded_param", p.layer));
  }
  if (forward) {
    b_.free(held_gather_);
    held_gather_ = gathered_[unit];
  } else {
    b_.free(gathered_[unit]);
  }
  gathered_[unit] = kNone;
}

void StepGenerator::fsdp_reshard(std::size_t unit) {
  for (TensorId id : unsharded_[unit])
    b_.free(id);
  unsharded_[unit].clear();
}

// After a unit's backward: its unsharded gradients are copied into one reduce-scatter input (in
// the reduce dtype, fp32), freed, and reduce-scattered into a shard that becomes the unit's
// gradient (or is added into it and freed when accumulating). The input lives until the next
// reduce-scatter.
void StepGenerator::fsdp_reduce_scatter(std::size_t unit) {
  std::vector<TensorId>& grads = pending_[unit];
  if (grads.empty())
    return;
  const int layer = static_cast<int>(unit) - 1;
  b_.free(held_reduce_input_);
  const Bytes out_bytes = unit_shard_numel_[unit] * d_.param;
  held_reduce_input_ =
      b_.alloc(out_bytes * shards_, Category::temporary, "fsdp.reduce_scatter_input", layer);
  for (TensorId g : grads)
    b_.free(g);
  grads.clear();
  const Category cat = unit_grad_[unit] == kNone ? Category::gradient : Category::temporary;
  const TensorId out =
      b_.alloc_on(out_bytes, kReduceScatterStream, cat, "fsdp.reduce_scatter_output", layer);
  if (w_.parallel.backend == Backend::gloo)
    b_.free(b_.alloc_on(out_bytes * shards_, kReduceScatterStream, Category::temporary,
                        "gloo.reduce_scatter_temp", layer));
  if (unit_grad_[unit] == kNone)
    unit_grad_[unit] = out;
  else
    b_.free(out);
}

void StepGenerator::fsdp_pre_forward(std::size_t unit) {
  if (fsdp_)
    fsdp_copy_out(unit, true);
}

void StepGenerator::fsdp_post_forward(std::size_t unit) {
  if (fsdp_ && w_.parallel.fsdp_reshard_after_forward)
    fsdp_reshard(unit);
}

void StepGenerator::fsdp_end_forward() {
  if (!fsdp_)
    return;
  fsdp_post_forward(0);
  b_.free(held_gather_);
  held_gather_ = kNone;
}

void StepGenerator::fsdp_pre_backward(std::size_t unit, std::size_t next) {
  if (!fsdp_)
    return;
  fsdp_copy_out(unit, false);
  if (next < units_)
    fsdp_all_gather(next);  // backward prefetch of the next unit
}

void StepGenerator::fsdp_post_backward(std::size_t unit) {
  if (!fsdp_)
    return;
  fsdp_reshard(unit);
  fsdp_reduce_scatter(unit);
}

void StepGenerator::fsdp_end_backward() {
  b_.free(held_reduce_input_);
  held_reduce_input_ = kNone;
}

// AccumulateGrad: the first gradient becomes .grad; later ones are added in place and freed.
// Under FSDP the gradients of a unit wait for its reduce-scatter.
void StepGenerator::accumulate(int param, TensorId grad) {
  if (ddp_)
    ddp_->gradient_ready(param);
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

Category StepGenerator::grad_category(int param) const {
  if (fsdp_)
    return Category::temporary;
  return grads_[static_cast<std::size_t>(param)] == kNone ? Category::gradient
                                                          : Category::temporary;
}

void StepGenerator::weight_grad_cast(int param, TensorId grad16, const char* op, int layer) {
  if (!d_.autocast || grad_bytes_ == d_.act) {
    accumulate(param, grad16);
    return;
  }
  const TensorId g32 = b_.alloc(numel(param) * 4, grad_category(param), op, layer);
  b_.free(grad16);
  accumulate(param, g32);
}

TensorId StepGenerator::input_grad_to_residual(TensorId grad, bool input_was_cast, int layer) {
  if (!input_was_cast)
    return grad;
  const TensorId g32 = b_.alloc(bth(d_.res), Category::temporary, "grad.input_fp32", layer);
  b_.free(grad);
  return g32;
}

void StepGenerator::layernorm_backward(int wparam, int bparam, TensorId grad, TensorId saved_input,
                                       TensorId mean, TensorId rstd, int layer,
                                       bool into_residual) {
  const TensorId gx = b_.alloc(bth(d_.res), Category::temporary, "grad.layernorm", layer);
  const TensorId gw =
      b_.alloc(numel(wparam) * grad_bytes_, grad_category(wparam), "grad.layernorm.weight", layer);
  TensorId gb = kNone;
  if (bparam >= 0)
    gb = b_.alloc(numel(bparam) * grad_bytes_, grad_category(bparam), "grad.layernorm.bias", layer);
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

TensorId StepGenerator::cast_weight(int param, const char* op, int layer, bool discard) {
  if (!casts_weights_ || param < 0)
    return kNone;
  const TensorId id = b_.alloc(numel(param) * d_.act, Category::temporary, op, layer);
  // Not saved for backward inside a checkpointed region: it lives in the autocast cache.
  if (discard)
    autocast_cache_.push_back(id);
  return id;
}

void StepGenerator::cast_bias(int param, const char* op, int layer) {
  if (!casts_weights_ || param < 0)
    return;
  autocast_cache_.push_back(b_.alloc(numel(param) * d_.act, Category::temporary, op, layer));
}

void StepGenerator::autocast_exit() {
  for (TensorId id : autocast_cache_)
    b_.free(id);
  autocast_cache_.clear();
}

void StepGenerator::after_forward_matmul(bool lt) {
  if (in_backward_) {
    after_backward_matmul();
    if (!backward_lt_workspace_) {
      backward_lt_workspace_ = true;
      workspace_ids_.push_back(
          b_.alloc(kCublasLtWorkspace, Category::temporary, "cublaslt.workspace.backward", -1));
    }
    return;
  }
  if (forward_workspace_)
    return;
  forward_workspace_ = true;
  workspace_ids_.push_back(b_.alloc(kCublasWorkspace, Category::temporary, "cublas.workspace", -1));
  if (lt)
    workspace_ids_.push_back(
        b_.alloc(kCublasLtWorkspace, Category::temporary, "cublaslt.workspace", -1));
}

void StepGenerator::after_backward_matmul() {
  if (backward_workspace_)
    return;
  backward_workspace_ = true;
  workspace_ids_.push_back(
      b_.alloc(kCublasWorkspace, Category::temporary, "cublas.workspace.backward", -1));
}

void StepGenerator::clear_cublas_workspaces() {
  for (TensorId id : workspace_ids_)
    b_.free(id);
  workspace_ids_.clear();
  forward_workspace_ = backward_workspace_ = backward_lt_workspace_ = false;
}

void StepGenerator::bias_grad_workspace(Bytes out_features, int layer) {
  if (n_ <= kBiasGradWorkspaceMinTokens)
    return;
  // the cap is on rows, in blocks of 128: the fewest that hold kBiasGradWorkspaceCap bytes
  const Bytes row_bytes = out_features * 4;
  const Bytes rows = (static_cast<Bytes>(2 * n_) + 127) / 128 * 128;
  const Bytes cap_rows = (kBiasGradWorkspaceCap + 128 * row_bytes - 1) / (128 * row_bytes) * 128;
  const Bytes size = std::min(rows, cap_rows) * row_bytes;
  const TensorId ws = b_.alloc(size, Category::temporary, "cublaslt.bgrad_workspace", layer);
  const TensorId sem =
      b_.alloc(out_features / 32, Category::temporary, "cublaslt.bgrad_sem", layer);
  b_.free(sem);
  b_.free(ws);
}

void StepGenerator::begin_micro_batch(const MicroBatch& shape) {
  bsz_ = shape.batch_size;
  seq_ = shape.seq_len;
  n_ = static_cast<std::int64_t>(bsz_) * seq_;
}

LossState StepGenerator::loss_forward(TensorId logits) {
  LossState s;
  s.logits = logits;
  TensorId logits32 = kNone, nll = kNone;
  if (t_.compile.loss) {
    s.stats = b_.alloc(bt(4), Category::activation, "loss.row_stats", -1);
    nll = b_.alloc(4, Category::temporary, "loss.nll", -1);
  } else {
    if (d_.act != 4)
      logits32 = b_.alloc(btv(4), Category::temporary, "loss.logits_fp32", -1);
    s.log_probs = b_.alloc(btv(4), Category::activation, "loss.log_softmax", -1);
    nll = b_.alloc(4, Category::temporary, "loss.nll", -1);
    s.total_weight = b_.alloc(4, Category::activation, "loss.total_weight", -1);
    b_.free(logits32);
  }
  s.loss = b_.alloc(4, Category::temporary, "loss", -1);
  b_.free(nll);
  if (!t_.hold_logits && !t_.compile.loss) {
    b_.free(s.logits);
    s.logits = kNone;
  }
  return s;
}

TensorId StepGenerator::loss_backward(LossState& s) {
  in_backward_ = true;
  s.ones = b_.alloc(4, Category::temporary, "grad.loss", -1);
  TensorId grad_logits = kNone;
  if (t_.compile.loss) {
    grad_logits = b_.alloc(btv(d_.act), Category::temporary, "grad.logits", -1);
    b_.free(s.stats);
    if (!t_.hold_logits) {
      b_.free(s.logits);
      s.logits = kNone;
    }
    return grad_logits;
  }
  const TensorId gdiv = b_.alloc(4, Category::temporary, "grad.loss_div", -1);
  const TensorId gnll = b_.alloc(btv(4), Category::temporary, "grad.nll", -1);
  b_.free(gdiv);
  b_.free(s.total_weight);
  const TensorId gls = b_.alloc(btv(4), Category::temporary, "grad.log_softmax", -1);
  b_.free(gnll);
  b_.free(s.log_probs);
  grad_logits = gls;
  if (d_.act != 4) {
    grad_logits = b_.alloc(btv(d_.act), Category::temporary, "grad.logits", -1);
    b_.free(gls);
  }
  return grad_logits;
}

void StepGenerator::lm_head_backward(TensorId grad_logits, TensorId head_w, TensorId head_in,
                                     bool head_in_is_copy) {
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
}

void StepGenerator::embedding_backward() {
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

void StepGenerator::end_micro_batch(LossState& loss, TensorId idx) {
  in_backward_ = false;
  b_.free(residual_grad_);
  residual_grad_ = kNone;
  b_.free(loss.ones);
  b_.free(loss.logits);  // del logits, loss, idx
  b_.free(loss.loss);
  b_.free(idx);
}

void StepGenerator::optimizer_step(bool first) {
  if (t_.optimizer == OptimizerKind::sgd)
    return;  // plain SGD (no momentum): in-place foreach add, no state, no temporaries
  if (first) {
    // lazy state: exp_avg and exp_avg_sq (zeros_like) per parameter, in parameter order
    for (const Param& p : params_) {
      const Bytes bytes = (fsdp_ ? param_shard(p) : p.numel) * d_.param;
      state_ids_.push_back(b_.alloc(bytes, Category::optimizer_state, "adam.exp_avg", p.layer));
      state_ids_.push_back(b_.alloc(bytes, Category::optimizer_state, "adam.exp_avg_sq", p.layer));
    }
  }
  if (t_.fused_optimizer)
    return;
  // foreach: one parameter-sized temporary per tensor (sqrt(exp_avg_sq) / ...), freed in reverse
  std::vector<TensorId> temps;
  temps.reserve(params_.size());
  for (const Param& p : params_)
    temps.push_back(b_.alloc((fsdp_ ? param_shard(p) : p.numel) * d_.param, Category::temporary,
                             "adam.foreach_tmp", p.layer));
  for (auto it = temps.rbegin(); it != temps.rend(); ++it)
    b_.free(*it);
}

void StepGenerator::zero_grad() {
  for (TensorId& g : unit_grad_) {
    b_.free(g);
    g = kNone;
  }
  for (TensorId& g : grads_) {
    b_.free(g);
    g = kNone;
  }
}

}  // namespace fragscope::workload::detail
