#pragma once
// Strong index types (heaptrack's indices.h idea): a StreamId cannot be passed where a TensorId is
// expected, and the compiler says so.
#include <compare>
#include <cstdint>
#include <functional>

namespace fragscope {

template <typename Tag, typename Rep = std::uint64_t>
struct StrongId {
  using rep_type = Rep;
  Rep value{};

  constexpr StrongId() = default;
  constexpr explicit StrongId(Rep v) : value(v) {}
  constexpr auto operator<=>(const StrongId&) const = default;
};

struct StreamTag {};
struct TensorTag {};
struct FrameStackTag {};
struct StringTag {};
struct LabelTag {};

// The raw cudaStream_t value as PyTorch records it; 0 is the default (legacy) stream.
using StreamId = StrongId<StreamTag>;
// Names one allocation in a request stream (a tensor's storage), so a free can refer to it.
using TensorId = StrongId<TensorTag>;
// Index of an interned stack of frames; 0 means "no stack recorded".
using FrameStackId = StrongId<FrameStackTag, std::uint32_t>;
using StringId = StrongId<StringTag, std::uint32_t>;
// Index into RequestStream::labels; 0 means "unlabelled".
using LabelId = StrongId<LabelTag, std::uint32_t>;

}  // namespace fragscope

template <typename Tag, typename Rep>
struct std::hash<fragscope::StrongId<Tag, Rep>> {
  std::size_t operator()(const fragscope::StrongId<Tag, Rep>& id) const noexcept {
    return std::hash<Rep>{}(id.value);
  }
};
