#pragma once
// A request stream is what a program asks of an allocator, independent of how any allocator
// answers: the workload generator produces one, the replay of a PyTorch trace produces one, and
// every allocator policy (the caching-allocator model, plain cudaMalloc, cudaMallocAsync, a real
// GPU) consumes one. What-if analysis is "the same request stream under another policy".
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

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
};

}  // namespace fragscope
