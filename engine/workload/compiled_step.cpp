// torch.compile of the whole model (StepGenerator's compiled path, one for every family): the
// forward and backward are Inductor graphs run from the recorded plans of compiled_plan.h, the
// loss and the optimizer stay eager; reduce-overhead runs the graphs under cudagraph trees.
#include <algorithm>
#include <iterator>
#include <vector>

#include "engine/workload/step_generator.h"

namespace fragscope::workload::detail {

// One Inductor graph run from its plan (compiled_plan.h). Forward: returns the logits and keeps
// what the backward saves (saved_, by size). Backward: frees the saved tensors as it uses them
// and returns one fp32 gradient per parameter.
TensorId StepGenerator::run_graph(CompiledGraph graph) {
  const PlanDims dims{
      bsz_, seq_, h_, v_, compiled_.heads, compiled_.ffn, m_.layers, compiled_.kv_heads};
  const bool fw = graph == CompiledGraph::forward;
  std::vector<TensorId> ids;
  std::vector<Bytes> sizes;
  std::vector<int> slots;
  std::vector<bool> live;
  std::vector<TensorId> first_ids;  // indexed by first_* event
  TensorId logits = kNone;
  const bool first_run = (fw ? forward_runs_ : backward_runs_)++ == 0;
  for (const PlanStep& s : compiled_plan(compiled_.model, graph, dims, first_run)) {
    switch (s.op) {
      case PlanOp::alloc:
        ids.push_back(b_.alloc(s.size, fw ? Category::activation : Category::temporary,
                               fw ? "compiled.forward" : "compiled.backward", -1));
        sizes.push_back(s.size);
        slots.push_back(s.ref);
        live.push_back(true);
        break;
      case PlanOp::free: {
        const auto i = static_cast<std::size_t>(s.ref);
        if (i < ids.size() && live[i]) {
          b_.free(ids[i]);
          live[i] = false;
        }
        break;
      }
      case PlanOp::free_saved: {
        // the latest saved tensor of that size and place in the block (the backward visits
        // blocks in reverse), else the latest of that size
        auto it = std::find_if(saved_.rbegin(), saved_.rend(), [&](const SavedTensor& t) {
          return t.size == s.size && t.slot == s.ref;
        });
        if (it == saved_.rend())
          it = std::find_if(saved_.rbegin(), saved_.rend(),
                            [&](const SavedTensor& t) { return t.size == s.size; });
        if (it != saved_.rend()) {
          b_.free(it->id);
          saved_.erase(std::next(it).base());
        }
        break;
      }
      case PlanOp::tangent:
        // the wrapper's `del` drops one reference; the autograd engine's input buffer holds
        // the gradient until the graph returns (compiled_micro_batch frees it then); a
        // capture's copy of it dies here
        b_.free(static_gradient_);
        static_gradient_ = kNone;
        break;
      case PlanOp::mm:
        if (fw)
          after_forward_matmul(compiled_.lt_matmuls);
        else
          after_backward_matmul();
        break;
      case PlanOp::logits:
        logits = ids[static_cast<std::size_t>(s.ref)];
        live[static_cast<std::size_t>(s.ref)] = false;
        break;
      case PlanOp::attention_workspace:
        b_.free(b_.alloc(s.size, Category::temporary,
                         fw ? "compiled.attention_workspace" : "compiled.attention_grad_workspace",
                         -1));
        break;
      case PlanOp::kernel:
        break;
      case PlanOp::tokens:  // the loop still holds idx; a capture's copy dies here
        b_.free(static_tokens_);
        static_tokens_ = kNone;
        break;  // compiled_plan puts a first launch's autotuning in its place
      case PlanOp::first_alloc:
        // Under reduce-overhead the first call is cudagraph trees' warm-up, which routes every
        // allocation of its stream to the graph's pool: the autotuning's L2-flush buffers and
        // argument clones land there too (60 MiB segments in pool (0, 1) in the recordings),
        // so the capture's empty_cache cannot return them.
        first_ids.push_back(b_.alloc(s.size, Category::temporary, "compile.autotune", -1));
        break;
      case PlanOp::first_free: {
        const auto i = static_cast<std::size_t>(s.ref);
        first_ids.push_back(kNone);
        if (i < first_ids.size()) {
          b_.free(first_ids[i]);
          first_ids[i] = kNone;
        }
        break;
      }
    }
  }
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (!live[i])
      continue;
    if (fw)
      saved_.push_back({sizes[i], slots[i], ids[i]});
    else
      backward_outputs_.emplace_back(sizes[i], ids[i]);
  }
  if (!fw) {
    // Autograd releases the compiled node's saved tensors when its backward returns: those the
    // plan's `del`s did not reach (a repeated block whose frees a window does not carry) die here.
    for (const SavedTensor& t : saved_)
      b_.free(t.id);
    saved_.clear();
  }
  return logits;
}

// The backward's outputs become the parameters' .grad (matched by size, in parameter order).
void StepGenerator::compiled_gradients() {
  std::vector<bool> taken(params_.size(), false);
  for (const auto& [size, g] : backward_outputs_) {
    bool matched = false;
    for (std::size_t p = 0; p < params_.size() && !matched; ++p) {
      if (!taken[p] && params_[p].numel * grad_bytes_ == size) {
        taken[p] = true;
        matched = true;
        accumulate(static_cast<int>(p), g);
      }
    }
    if (!matched)
      b_.free(g);
  }
  backward_outputs_.clear();
}

// torch.compile(model): the forward and backward are Inductor graphs, the loss and the optimizer
// stay eager. reduce-overhead: cudagraph trees run each graph in a private pool, eagerly at the
// first call (warm-up) and under capture at the second, clearing cuBLAS's workspaces before and
// after each (clear_cublas_manager) so that the graph takes its own from the pool; later calls
// replay the graphs in the pool's memory without asking the allocator.
// cudagraph trees around one graph run: cuBLAS's workspaces cleared, the run's allocations in
// the pool. A capture (the second call) first copies the graph's non-static input into the pool
// and empties the default pools' cache (torch.cuda.graph's __enter__); returns that copy.
TensorId StepGenerator::enter_graph_pool(Bytes static_input) {
  clear_cublas_workspaces();
  b_.pool_request(RequestOp::pool_begin, kCudaGraphPool);
  if (compiled_calls_ != 2)
    return kNone;
  const TensorId copy = b_.alloc(static_input, Category::input, "cudagraph.static_input", -1);
  b_.pool_request(RequestOp::pool_end, kCudaGraphPool);
  b_.marker(RequestOp::empty_cache, 0);
  b_.pool_request(RequestOp::pool_begin, kCudaGraphPool);
  return copy;
}

void StepGenerator::exit_graph_pool() {
  b_.pool_request(RequestOp::pool_end, kCudaGraphPool);
  clear_cublas_workspaces();
}

void StepGenerator::compiled_micro_batch(const MicroBatch& shape) {
  begin_micro_batch(shape);
  const TensorId idx = b_.alloc(bt(8), Category::input, "input.tokens", -1);
  const bool graphs = t_.compile.mode == CompileMode::reduce_overhead;
  const bool replay = graphs && compiled_calls_ >= 2;
  ++compiled_calls_;
  if (graphs && compiled_calls_ == 1)
    b_.pool_request(RequestOp::pool_create, kCudaGraphPool);
  TensorId logits = kNone;
  if (!replay) {
    // a capture's copy of the token ids is saved for the backward, which drops it
    if (graphs)
      static_tokens_ = enter_graph_pool(bt(8));
    logits = run_graph(CompiledGraph::forward);
    if (graphs)
      exit_graph_pool();
  }
  // the replayed logits live in the pool; the eager loss reads them in place
  LossState loss = loss_forward(logits);
  const TensorId grad_logits = loss_backward(loss);
  if (!replay) {
    // a capture's copy of the incoming gradient dies at the wrapper's `del`
    if (graphs)
      static_gradient_ = enter_graph_pool(btv(d_.act));
    run_graph(CompiledGraph::backward);
    b_.free(static_tokens_);
    static_tokens_ = kNone;
    if (graphs)
      exit_graph_pool();
    // the autograd engine's input buffer held the incoming gradient until the graph returned
    b_.free(grad_logits);
    compiled_gradients();
  } else {
    b_.free(grad_logits);  // copied into the graph's static input
  }
  end_micro_batch(loss, idx);
}

}  // namespace fragscope::workload::detail
