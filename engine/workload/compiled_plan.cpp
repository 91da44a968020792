#include "engine/workload/compiled_plan.h"

#include <array>
#include <cstddef>
#include <span>
#include <stdexcept>

namespace fragscope::workload::detail {
namespace {

// One event of a recorded plan; alloc and free_saved sizes are
// num / den * B^e[0] T^e[1] H^e[2] V^e[3] heads^e[4] F^e[5] L^e[6] kv_heads^e[7] bytes (rounded
// up).
struct PlanEvent {
  PlanOp op;
  int ref;
  std::int64_t num;
  std::int64_t den;
  std::array<int, 8> e;
};

// The plan has `base` blocks; allocations [window, window + per_block) with the events before
// each are one block, repeated for every block beyond `base`.
struct PlanShape {
  int base;
  int window;
  int per_block;
};

struct PlanTable {
  PlanShape shape;
  std::span<const PlanEvent> events;
};

// What the first launch of kernel `kernel` asks (first_alloc: ref -1 = the L2-flush buffer;
// first_free: ref = the how-manieth first_alloc of the same kernel).
struct AutotuneEvent {
  int kernel;
  PlanOp op;
  int ref;
  std::int64_t num;
  std::int64_t den;
  std::array<int, 8> e;
};

#include "engine/workload/compiled_gpt_plan.inc"
#include "engine/workload/compiled_llama_plan.inc"

// cuDNN's fused attention (PyTorch 2.11, H200): the forward asks a 256-byte workspace; the
// backward one of tokens·heads·(8·head_dim + 4) + 256 bytes (an fp32 dq accumulator, key/value
// gradients expanded to every query head in 16 bits, fp32 row sums), as in eager SDPA
// (llama_generator.cpp); both freed at once. Exact on every turn5 recording's steps.
Bytes attention_workspace(bool backward, const PlanDims& d) {
  if (!backward)
    return 256;
  const std::int64_t head_dim = d.hidden / d.heads;
  return static_cast<Bytes>(d.batch * d.seq * d.heads * (8 * head_dim + 4) + 256);
}

Bytes size_of(const PlanEvent& ev, const PlanDims& d) {
  const std::array<std::int64_t, 8> v{d.batch, d.seq, d.hidden, d.vocab,
                                      d.heads, d.ffn, d.layers, d.kv_heads};
  std::int64_t num = ev.num, den = ev.den;
  for (std::size_t i = 0; i < v.size(); ++i) {
    for (int k = 0; k < ev.e[i]; ++k)
      num *= v[i];
    for (int k = 0; k < -ev.e[i]; ++k)
      den *= v[i];
  }
  return static_cast<Bytes>((num + den - 1) / den);
}

}  // namespace

std::vector<PlanStep> compiled_plan(CompiledModel model, CompiledGraph graph, const PlanDims& dims,
                                    bool first_run) {
  const bool fw = graph == CompiledGraph::forward;
  const bool llama = model == CompiledModel::llama;
  std::span<const PlanTable> tables;
  std::span<const AutotuneEvent> autotune;
  if (llama) {
    tables = fw ? std::span<const PlanTable>(kLlamaForwardPlans)
                : std::span<const PlanTable>(kLlamaBackwardPlans);
    autotune = fw ? std::span<const AutotuneEvent>(kAutotuneLlamaForward)
                  : std::span<const AutotuneEvent>(kAutotuneLlamaBackward);
  } else {
    tables =
        fw ? std::span<const PlanTable>(kForwardPlans) : std::span<const PlanTable>(kBackwardPlans);
    autotune = fw ? std::span<const AutotuneEvent>(kAutotuneForward)
                  : std::span<const AutotuneEvent>(kAutotuneBackward);
  }
  if (dims.layers < tables.front().shape.base)
    throw std::invalid_argument("compiled_plan: fewer blocks than the recorded plans");
  // the recorded plan of that depth, else the first one with its window repeated
  const PlanTable* table = &tables.front();
  for (const PlanTable& t : tables)
    if (t.shape.base == dims.layers)
      table = &t;
  const PlanShape shape = table->shape;
  const int extra = static_cast<int>(dims.layers) - shape.base;
  const int w = shape.window, k = shape.per_block;

  // Segments: the events up to and including each allocation; the last holds what follows.
  std::vector<std::vector<const PlanEvent*>> segments(1);
  for (const PlanEvent& ev : table->events) {
    segments.back().push_back(&ev);
    if (ev.op == PlanOp::alloc)
      segments.emplace_back();
  }
  std::vector<PlanStep> out;
  int allocs = 0;
  int first_steps = 0;  // first_alloc and first_free steps so far
  std::vector<bool> launched;
  auto tune = [&](int kernel) {
    const auto i = static_cast<std::size_t>(kernel);
    if (launched.size() <= i)
      launched.resize(i + 1, false);
    if (launched[i])
      return;
    launched[i] = true;
    std::vector<int> step_of;  // the first_* step index of this kernel's n-th first_alloc
    for (const AutotuneEvent& ev : autotune) {
      if (ev.kernel != kernel)
        continue;
      if (ev.op == PlanOp::first_alloc) {
        step_of.push_back(first_steps);
        const PlanEvent sized{ev.op, ev.ref, ev.num, ev.den, ev.e};
        out.push_back({ev.op, 0, ev.ref < 0 ? kL2FlushBytes : size_of(sized, dims)});
      } else {
        out.push_back({ev.op, step_of.at(static_cast<std::size_t>(ev.ref)), 0});
      }
      ++first_steps;
    }
  };
  auto emit = [&](const std::vector<const PlanEvent*>& segment, auto&& shift_ref) {
    for (const PlanEvent* ev : segment) {
      if (ev->op == PlanOp::kernel) {
        if (first_run)
          tune(ev->ref);
        continue;
      }
      PlanStep s{ev->op, ev->ref, 0};
      if (ev->op == PlanOp::free || ev->op == PlanOp::logits)
        s.ref = shift_ref(ev->ref);
      if (ev->op == PlanOp::alloc)
        s.ref = ((allocs++ - w) % k + k) % k;
      if (ev->op == PlanOp::alloc || ev->op == PlanOp::free_saved)
        s.size = size_of(*ev, dims);
      if (ev->op == PlanOp::attention_workspace)
        s.size = attention_workspace(ev->ref == 1, dims);
      out.push_back(s);
    }
  };
  const auto n_segments = static_cast<int>(segments.size());
  auto segment = [&](int i) -> const std::vector<const PlanEvent*>& {
    return segments[static_cast<std::size_t>(i)];
  };
  for (int i = 0; i < w + k && i < n_segments; ++i)
    emit(segment(i), [](int r) { return r; });
  // A repeated block frees its own buffers and the previous block's, one block later.
  for (int c = 1; c <= extra; ++c)
    for (int i = w; i < w + k; ++i)
      emit(segment(i), [&](int r) { return r >= w - k ? r + c * k : r; });
  for (int i = w + k; i < n_segments; ++i)
    emit(segment(i), [&](int r) { return r >= w ? r + extra * k : r; });
  return out;
}

}  // namespace fragscope::workload::detail
