#include "engine/core/packed_requests.h"

#include <algorithm>

#include "engine/core/varint.h"

namespace fragscope {
namespace {

constexpr std::uint8_t kOp = 0x0f;
constexpr std::uint8_t kTensor = 0x10;
constexpr std::uint8_t kSize = 0x20;
constexpr std::uint8_t kStream = 0x40;
constexpr std::uint8_t kExtra = 0x80;
static_assert(static_cast<std::uint8_t>(RequestOp::pool_empty_cache) <= kOp,
              "a request's op takes the head byte's low four bits");

// The tensor id an absent kTensor stands for, `next` being one past the largest so far.
std::uint64_t implied_tensor(RequestOp op, std::uint64_t next) {
  return op == RequestOp::malloc ? next : 0;
}

}  // namespace

void PackedRequests::push_back(const Request& request) {
  std::uint8_t packed[1 + 5 * kMaxVarintBytes];
  std::uint8_t* at = packed + 1;
  std::uint8_t head = static_cast<std::uint8_t>(request.op);
  const std::uint64_t next = largest_tensor_ + 1;
  if (request.tensor.value != implied_tensor(request.op, next)) {
    head |= kTensor;
    at = put_varint(at, zigzag(static_cast<std::int64_t>(request.tensor.value - next)));
  }
  if (request.size != 0) {
    head |= kSize;
    at = put_varint(at, request.size);
  }
  if (request.stream.value != stream_) {
    head |= kStream;
    at = put_varint(at, request.stream.value);
    stream_ = request.stream.value;
  }
  if (request.label.value != 0 || request.pool != 0) {
    head |= kExtra;
    at = put_varint(at, request.label.value);
    at = put_varint(at, request.pool);
  }
  packed[0] = head;
  bytes_.insert(bytes_.end(), packed, at);
  largest_tensor_ = std::max(largest_tensor_, request.tensor.value);
  ++size_;
}

void PackedRequests::decode(Cursor& cursor, std::span<Request> out) const {
  const std::uint8_t* at = cursor.at;
  std::uint64_t largest = cursor.largest_tensor;
  std::uint64_t stream = cursor.stream;
  for (Request& request : out) {
    const std::uint8_t head = *at++;
    request = Request{};
    request.op = static_cast<RequestOp>(head & kOp);
    const std::uint64_t next = largest + 1;
    request.tensor.value = (head & kTensor) != 0
                               ? next + static_cast<std::uint64_t>(unzigzag(get_varint(at)))
                               : implied_tensor(request.op, next);
    if ((head & kSize) != 0)
      request.size = get_varint(at);
    if ((head & kStream) != 0)
      stream = get_varint(at);
    request.stream.value = stream;
    if ((head & kExtra) != 0) {
      request.label.value = static_cast<std::uint32_t>(get_varint(at));
      request.pool = static_cast<std::uint32_t>(get_varint(at));
    }
    largest = std::max(largest, request.tensor.value);
  }
  cursor = Cursor{at, largest, stream};
}

std::vector<Request> PackedRequests::to_vector() const {
  std::vector<Request> out;
  out.reserve(size_);
  for_each_block([&out](std::span<const Request> block, std::size_t) {
    out.insert(out.end(), block.begin(), block.end());
    return true;
  });
  return out;
}

}  // namespace fragscope
