#pragma once
// torch.compile of the whole model (engine-internal): the allocation plans of Inductor's forward
// and backward graphs, read from the wrapper code of real PyTorch 2.11 compiles (TORCH_LOGS=
// output_code) by tests/fixtures/torch-2.11-h200-turn4/tools/emit_plan.py: the recorder's GPT at
// 4..7 blocks (turn4, compiled_gpt_plan.inc) and Llama at 4 and 5 layers (turn5,
// compiled_llama_plan.inc, whose attention is the extern cuDNN kernel). A plan is the
// wrapper's `call` as allocator requests: every empty_strided_cuda, the `del` that frees a buffer
// (a `# reuse` hands a freed buffer's storage to a new name without a request), the extern
// matmuls (cuBLAS's workspaces), and where the backward frees what the forward saved for it.
// Sizes are monomials in batch, length, hidden, vocabulary, heads, MLP width, depth and key/value
// heads. The recorded depths are used as they are; more blocks repeat one block's window of the
// 4-block plan.
#include <cstdint>
#include <vector>

#include "engine/core/units.h"

namespace fragscope::workload::detail {

enum class PlanOp : std::uint8_t {
  alloc,       // a new buffer
  free,        // the buffer allocated `ref`-th in this graph loses its last name
  free_saved,  // backward: a tensor the forward saved dies (same size and place in the block
               // pattern, latest block first)
  tangent,     // backward: the incoming gradient of the logits dies
  tokens,      // backward: the token ids (a forward input it saved) die
  mm,          // an extern matmul ran (cuBLAS takes its workspace at the first one)
  logits,      // forward: the buffer allocated `ref`-th is the returned logits
  kernel,      // a Triton kernel (`ref`: its key) launches
  // the extern cuDNN attention takes its workspace and frees it (`ref` 0: forward, 1: backward;
  // its outputs are the plan's allocations before it)
  attention_workspace,
  // The graph's first run only: Triton autotunes each kernel at its first launch, benchmarking
  // every config (Inductor's benchmarker flushes the L2 with an L2-sized buffer first) on clones
  // of the arguments the kernel mutates. `ref` of a first_free: the index of the first_* step
  // that allocated it.
  first_alloc,
  first_free,
};

// The L2-flush buffer of Inductor's benchmarker: the L2 cache's size (60 MiB on the H200 the
// plans were recorded on).
inline constexpr Bytes kL2FlushBytes = 60 * kMiB;

enum class CompiledGraph : std::uint8_t { forward, backward };

// The quantities a plan's sizes are monomials of.
struct PlanDims {
  std::int64_t batch = 0, seq = 0, hidden = 0, vocab = 0, heads = 0, ffn = 0, layers = 0,
               kv_heads = 0;
};

// Whose recorded plans: the recorder's GPT or the Llama decoder.
enum class CompiledModel : std::uint8_t { gpt, llama };

struct PlanStep {
  PlanOp op = PlanOp::alloc;
  // free, logits: index of the allocation in this graph; alloc: its place in the block pattern
  // (allocation index minus the repeated window's start, modulo a block's allocations);
  // free_saved: the place of the forward's buffer it frees
  int ref = 0;
  Bytes size = 0;  // alloc, free_saved, attention_workspace
};

// Fewest blocks a plan is made for (the recorded plans repeat windows; they never drop one).
inline constexpr int kCompiledMinLayers = 4;

// The graph's requests for one micro-batch of `dims`; dims.layers >= kCompiledMinLayers.
// first_run: with the autotuning of the graph's first call.
std::vector<PlanStep> compiled_plan(CompiledModel model, CompiledGraph graph, const PlanDims& dims,
                                    bool first_run);

}  // namespace fragscope::workload::detail
