#include "engine/snapshot/event_spool.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>

#include "engine/core/varint.h"

namespace fragscope::snapshot {
namespace {

static_assert(std::endian::native == std::endian::little,
              "an event's fields are stored as the low bytes of little-endian words");

// A packed event is a 3-byte head, then its five fields (the address, size, stream, time and
// stack id, as pack_tail folds them), each as the low bytes of a little-endian word. The head
// holds the action (bits 0-3) and each field's code (3 bits each from bit 4): how many bytes it
// takes, 0-6 or all 8. Reading a field is then a load and a mask, not a loop with a branch a
// byte as a varint's, and where the next event starts is known from the head alone.
constexpr std::size_t kHeadBytes = 3;
constexpr std::uint32_t kAction = 0xf;
constexpr int kFirstCodeShift = 4;  // the codes follow the action's four bits
static_assert(kTraceActionCount <= kAction + 1, "an event's action takes its head's low four bits");
constexpr int kFields = 5;
constexpr int kCodeBits = 3;
constexpr std::uint32_t kCode = 0x7;
constexpr std::size_t kMaxEventBytes = kHeadBytes + kFields * sizeof(std::uint64_t);
// Bytes a block's buffer keeps after its last event, so that reading a word at its last field
// stays inside the buffer.
constexpr std::size_t kTailBytes = sizeof(std::uint64_t);

// The bytes a field of each code takes, and the low bytes of a word it keeps.
constexpr std::array<std::uint32_t, 8> kCodeBytes = {0, 1, 2, 3, 4, 5, 6, 8};
constexpr std::array<std::uint64_t, 8> kCodeMask = {
    0, 0xff, 0xffff, 0xffffff, 0xffffffff, 0xffffffffff, 0xffffffffffff, ~std::uint64_t{0},
};

// The code of a field holding `value`.
std::uint32_t code_of(std::uint64_t value) {
  const auto bytes = static_cast<std::uint32_t>((std::bit_width(value) + 7) / 8);
  return bytes >= 7 ? 7 : bytes;
}

// The difference b - a modulo 2^64, folded so that small steps either way take few bytes.
std::uint64_t zigzag_delta(std::uint64_t a, std::uint64_t b) {
  return zigzag(static_cast<std::int64_t>(b - a));
}

// What zigzag_delta folded, as the step to add modulo 2^64.
std::uint64_t unzigzag_delta(std::uint64_t value) {
  return static_cast<std::uint64_t>(unzigzag(value));
}

}  // namespace

// An unnamed temporary file: created and unlinked at once, closed with the last spool using it.
class EventSpool::File {
 public:
  // nullptr when no file can be made (no writable temporary directory).
  static std::shared_ptr<File> make() {
    std::error_code error;
    const std::filesystem::path dir = std::filesystem::temp_directory_path(error);
    if (error)
      return nullptr;
    std::string name = (dir / "fragscope-spool-XXXXXX").string();
    const int fd = ::mkstemp(name.data());
    if (fd < 0)
      return nullptr;
    ::unlink(name.c_str());
    return std::shared_ptr<File>(new File(fd));
  }
  ~File() { ::close(fd_); }
  File(const File&) = delete;
  File& operator=(const File&) = delete;

  // Appends `bytes`; returns where they went, or nullopt when the write failed (disk full).
  std::optional<std::uint64_t> append(std::span<const std::uint8_t> bytes) {
    const std::uint64_t at = end_;
    std::size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t n =
          ::pwrite(fd_, bytes.data() + done, bytes.size() - done, static_cast<off_t>(at + done));
      if (n < 0 && errno == EINTR)
        continue;
      if (n <= 0)
        return std::nullopt;
      done += static_cast<std::size_t>(n);
    }
    end_ += bytes.size();
    return at;
  }

  void read(std::uint64_t offset, std::span<std::uint8_t> out) const {
    std::size_t done = 0;
    while (done < out.size()) {
      const ssize_t n =
          ::pread(fd_, out.data() + done, out.size() - done, static_cast<off_t>(offset + done));
      if (n < 0 && errno == EINTR)
        continue;
      if (n <= 0)
        throw std::runtime_error("the trace's temporary file could not be read back");
      done += static_cast<std::size_t>(n);
    }
  }

 private:
  explicit File(int fd) : fd_(fd) {}
  int fd_;
  std::uint64_t end_ = 0;
};

void EventSpool::push_back(const TraceEvent& event) {
  if (tail_.empty())
    tail_.reserve(kBlockEvents);
  // Segment entries are a few in a thousand: one test keeps the rest of the trace off their notes.
  if (is_segment_action(event.action)) [[unlikely]] {
    const bool segment_free = event.action == TraceAction::segment_free;
    if (segment_free && !last_was_segment_free_ && !too_many_bursts_) {
      if (segment_free_bursts_.size() == kMaxNotedBursts) {
        too_many_bursts_ = true;
        segment_free_bursts_ = {};
      } else {
        segment_free_bursts_.push_back(size());
      }
    }
    last_was_segment_free_ = segment_free;
    if (!too_many_segment_events_) {
      if (segment_events_.size() == kMaxNotedSegmentEvents) {
        too_many_segment_events_ = true;
        segment_events_ = {};
      } else {
        segment_events_.push_back(event);
      }
    }
  } else {
    last_was_segment_free_ = false;
  }
  if (first_stream_count_ < first_streams_.size()) {
    const auto known = std::span(first_streams_).first(first_stream_count_);
    if (std::find(known.begin(), known.end(), event.stream) == known.end())
      first_streams_[first_stream_count_++] = event.stream;
  }
  tail_.push_back(event);
  if (const auto a = static_cast<std::size_t>(event.action); a < action_counts_.size())
    ++action_counts_[a];
  if (tail_.size() == kBlockEvents)
    pack_tail();
}

void EventSpool::pack_tail() {
  // Packed into a buffer of the most a block can take, left unzeroed (a vector of that size was
  // 176 KiB of memset a block for ~60 KiB of bytes), then copied out at its packed size.
  const auto packed =
      std::make_unique_for_overwrite<std::uint8_t[]>(tail_.size() * kMaxEventBytes + kTailBytes);
  std::uint8_t* const begin = packed.get();
  std::uint8_t* at = begin;
  TraceEvent previous;
  for (const TraceEvent& event : tail_) {
    const std::array<std::uint64_t, kFields> fields = {
        zigzag_delta(previous.addr, event.addr),
        event.size,
        zigzag_delta(previous.stream.value, event.stream.value),
        zigzag_delta(static_cast<std::uint64_t>(previous.time_us),
                     static_cast<std::uint64_t>(event.time_us)),
        event.frames.value,
    };
    std::uint32_t head = static_cast<std::uint32_t>(event.action);
    std::uint8_t* field = at + kHeadBytes;
    for (int f = 0; f < kFields; ++f) {
      const std::uint32_t code = code_of(fields[f]);
      head |= code << (kFirstCodeShift + kCodeBits * f);
      // The word's bytes above the field are zero: the next field overwrites them, or they
      // stay as the block's tail.
      std::memcpy(field, &fields[f], sizeof fields[f]);
      field += kCodeBytes[code];
    }
    std::memcpy(at, &head, kHeadBytes);
    at = field;
    previous = event;
  }
  std::memset(at, 0, kTailBytes);
  const std::span<const std::uint8_t> bytes(begin,
                                            static_cast<std::size_t>(at - begin) + kTailBytes);
  Block block;
  if (memory_packed_ + bytes.size() > memory_limit_ && !no_file_) {
    if (!file_)
      file_ = File::make();
    if (const auto at = file_ ? file_->append(bytes) : std::nullopt) {
      block.file_offset = *at;
      block.file_size = static_cast<std::uint32_t>(bytes.size());
      file_bytes_ += bytes.size();
    } else {
      no_file_ = true;  // kept in memory from here on, as a spool without a file
    }
  }
  if (block.file_size == 0) {
    // Each block its own allocation of its own size: one growing buffer would hold up to twice
    // the bytes, and copy them all at every growth.
    memory_packed_ += bytes.size();
    block.bytes.assign(bytes.begin(), bytes.end());
  }
  blocks_.push_back(std::move(block));
  packed_events_ += tail_.size();
  tail_.clear();  // keeps its capacity for the next block
}

std::span<const TraceEvent> EventSpool::block(std::size_t b, Scratch& scratch) const {
  if (b == blocks_.size())
    return tail_;
  const Block& packed = blocks_[b];
  const std::uint8_t* at = packed.bytes.data();
  if (packed.file_size > 0) {
    scratch.bytes.resize(packed.file_size);
    file_->read(packed.file_offset, scratch.bytes);
    at = scratch.bytes.data();
  }
  scratch.events.resize(kBlockEvents);
  // Each field read as a masked word; no branch depends on the values.
  auto field = [&at](std::uint32_t head, int f) {
    const std::uint32_t code = (head >> (kFirstCodeShift + kCodeBits * f)) & kCode;
    std::uint64_t word;
    std::memcpy(&word, at, sizeof word);
    at += kCodeBytes[code];
    return word & kCodeMask[code];
  };
  TraceEvent previous;
  for (TraceEvent& event : scratch.events) {
    std::uint32_t head = 0;
    std::memcpy(&head, at, kHeadBytes);
    at += kHeadBytes;
    event.action = static_cast<TraceAction>(head & kAction);
    event.addr = previous.addr + unzigzag_delta(field(head, 0));
    event.size = field(head, 1);
    event.stream = StreamId{previous.stream.value + unzigzag_delta(field(head, 2))};
    event.time_us = static_cast<std::int64_t>(static_cast<std::uint64_t>(previous.time_us) +
                                              unzigzag_delta(field(head, 3)));
    event.frames = FrameStackId{static_cast<std::uint32_t>(field(head, 4))};
    previous = event;
  }
  return scratch.events;
}

TraceEvent EventSpool::at(std::size_t index) const {
  if (index >= size())
    throw std::out_of_range("EventSpool::at: event " + std::to_string(index) + " of " +
                            std::to_string(size()));
  Scratch scratch;
  return block(index / kBlockEvents, scratch)[index % kBlockEvents];
}

std::size_t EventSpool::memory_bytes() const {
  std::size_t bytes = blocks_.capacity() * sizeof(Block) + tail_.capacity() * sizeof(TraceEvent);
  for (const Block& block : blocks_)
    bytes += block.bytes.capacity();
  return bytes + segment_free_bursts_.capacity() * sizeof(std::size_t) +
         segment_events_.capacity() * sizeof(TraceEvent);
}

std::vector<TraceEvent> EventSpool::to_vector() const {
  std::vector<TraceEvent> out;
  out.reserve(size());
  for_each_block(false, [&out](std::span<const TraceEvent> block, std::size_t) {
    out.insert(out.end(), block.begin(), block.end());
  });
  return out;
}

std::span<const TraceEvent> TraceWindow::decode(std::size_t b) const {
  const std::size_t other = 1 - last_;
  if (kept_[other].block != b) {
    kept_[other].events = spool_->block(b, kept_[other].scratch);
    kept_[other].block = b;
  }
  last_ = other;
  return kept_[other].events;
}

}  // namespace fragscope::snapshot
