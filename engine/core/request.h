#pragma once
// A request stream is what a program asks of an allocator, independent of how any allocator
// answers: the workload generator produces one, the replay of a PyTorch trace produces one, and
// every allocator policy (the caching-allocator model, plain cudaMalloc, cudaMallocAsync, a real
// GPU) consumes one. What-if analysis is "the same request stream under another policy".
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "engine/core/mempool_id.h"
#include "engine/core/strong_id.h"
#include "engine/core/units.h"

namespace fragscope {

enum class RequestOp : std::uint8_t {
  malloc,         // allocate `size` bytes on `stream` for `tensor`
  free,           // free `tensor` (PyTorch: free_requested; completed at once unless stream uses)
  record_stream,  // tensor.record_stream(stream): `stream` used `tensor`
  events_ready,   // the events recorded when `tensor` was freed have completed (record_stream)
  empty_cache,    // torch.cuda.empty_cache()
  step_begin,     // marker: training step `size` begins (no allocator effect)
  reset_peak,     // torch.cuda.reset_peak_memory_stats()
  // Private pools (CUDA graphs, torch.cuda.MemPool); `pool` indexes RequestStream::pools.
  pool_create,       // createOrIncrefPool: MemPool(...) or a graph pool handle (a user)
  pool_begin,        // beginAllocateToPool: a capture on `stream` (size 0), or every stream of
                     // the thread (size 1, use_mem_pool); adds a user until pool_end + release
  pool_end,          // endAllocateToPool
  pool_release,      // releasePool: one user fewer (graph reset, MemPool deleted, context exit)
  pool_empty_cache,  // empty_cache of that one pool (MemPool's destructor)
};

// What a tensor is for, so plots can stack memory by category.
enum class Category : std::uint8_t {
  unknown,
  parameter,
  gradient,
  optimizer_state,
  activation,
  temporary,
  input,
};
std::string_view to_string(Category category);

struct Request {
  RequestOp op{};
  TensorId tensor{};
  Bytes size = 0;     // malloc: requested bytes (unrounded); step_begin: step index
  StreamId stream{};  // malloc: allocation stream; record_stream: the stream that used the tensor
  LabelId label{};    // malloc: index into RequestStream::labels (0 = unlabelled)
  std::uint32_t pool = 0;  // pool_*: index into RequestStream::pools
};

// A private pool a request stream uses, with the MemPool options it was made with.
struct RequestPool {
  MempoolId id;
  bool use_on_oom = false;
  bool no_split = false;
};

struct RequestLabel {
  Category category = Category::unknown;
  std::string op;  // e.g. "attn.softmax", "adamw.exp_avg"
  int layer = -1;  // transformer block index, -1 when not per-layer
};

struct RequestStream {
  std::vector<Request> requests;
  // labels[0] is the "unlabelled" entry, so LabelId{0} is always valid.
  std::vector<RequestLabel> labels{RequestLabel{}};
  std::vector<RequestPool> pools;
  // The index of `id` in pools, added (with default options) when it is not there yet.
  std::uint32_t pool_index(MempoolId id) {
    for (std::size_t i = 0; i < pools.size(); ++i)
      if (pools[i].id == id)
        return static_cast<std::uint32_t>(i);
    pools.push_back(RequestPool{id});
    return static_cast<std::uint32_t>(pools.size() - 1);
  }
};

}  // namespace fragscope
