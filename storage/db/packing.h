#pragma once
// Byte packing shared by the blob formats of storage/db (event chunks, timeline levels, segment
// keyframes): LEB128 varints and zigzag for signed deltas (engine/core/varint.h, the encoding the
// import's event spool writes too), and zstd (or, in older databases, zlib) around a whole
// payload. Readers never trust a blob: a truncated or overlong value is a DatabaseError naming
// the blob.
#include <cassert>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/core/varint.h"

namespace fragscope::storage {

// Deltas between stored integers (times, addresses, series) wrap modulo 2^64 instead of
// overflowing: a hostile trace's time_us of -2^63 and 2^63-1 still encodes and decodes exactly.
inline std::int64_t wrapping_sub(std::int64_t a, std::int64_t b) {
  return static_cast<std::int64_t>(static_cast<std::uint64_t>(a) - static_cast<std::uint64_t>(b));
}
inline std::int64_t wrapping_add(std::int64_t a, std::int64_t b) {
  return static_cast<std::int64_t>(static_cast<std::uint64_t>(a) + static_cast<std::uint64_t>(b));
}
inline std::int64_t wrapping_neg(std::int64_t a) {
  return static_cast<std::int64_t>(std::uint64_t{0} - static_cast<std::uint64_t>(a));
}

inline void put_signed(std::vector<std::uint8_t>& out, std::int64_t value) {
  put_varint(out, zigzag(value));
}
// Writes `value` at `at`, which has room for kMaxVarintBytes; returns the byte after it.
inline std::uint8_t* put_signed(std::uint8_t* at, std::int64_t value) {
  return put_varint(at, zigzag(value));
}

// A growing byte buffer written through raw pointers: room() for as many bytes as a batch of
// values may take, the values written through the pointer it returns (put_varint, put_signed),
// commit() with where they ended. A check of the capacity and an update of the size per value
// (or per byte, as std::vector::push_back does) were most of the cost of packing a column: stores
// through a byte pointer may alias anything, so the buffer's members were reloaded after every
// byte.
class ByteColumn {
 public:
  void clear() { size_ = 0; }
  // Where the next `bytes` bytes go, valid until the next room() or clear().
  std::uint8_t* room(std::size_t bytes) {
    if (bytes > capacity_ - size_)
      grow(size_ + bytes);
    return data_.get() + size_;
  }
  // The bytes written since room() end at `end`.
  void commit(const std::uint8_t* end) {
    assert(end >= data_.get() + size_ && end <= data_.get() + capacity_);
    size_ = static_cast<std::size_t>(end - data_.get());
  }
  std::span<const std::uint8_t> bytes() const { return {data_.get(), size_}; }
  std::size_t size() const { return size_; }

 private:
  void grow(std::size_t needed);

  std::unique_ptr<std::uint8_t[]> data_;
  std::size_t size_ = 0;
  std::size_t capacity_ = 0;
};

// Reads values from a blob, remembering what the blob is for error messages.
class ByteReader {
 public:
  ByteReader(std::span<const std::uint8_t> bytes, std::string what)
      : bytes_(bytes), what_(std::move(what)) {}

  std::uint64_t varint() {
    std::uint64_t value = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (pos_ >= bytes_.size())
        fail("truncated value");
      const std::uint8_t byte = bytes_[pos_++];
      value |= static_cast<std::uint64_t>(byte & 0x7f) << shift;
      if ((byte & 0x80) == 0)
        return value;
    }
    fail("overlong value");
  }
  std::int64_t signed_varint() { return unzigzag(varint()); }
  std::uint8_t byte() {
    if (pos_ >= bytes_.size())
      fail("truncated value");
    return bytes_[pos_++];
  }
  // The next `count` bytes as a sub-span, for a column of known length.
  std::span<const std::uint8_t> take(std::uint64_t count) {
    if (count > bytes_.size() - pos_)
      fail("truncated column");
    auto part = bytes_.subspan(pos_, static_cast<std::size_t>(count));
    pos_ += static_cast<std::size_t>(count);
    return part;
  }
  bool at_end() const { return pos_ == bytes_.size(); }
  std::size_t remaining() const { return bytes_.size() - pos_; }
  const std::string& what() const { return what_; }
  [[noreturn]] void fail(const std::string& problem) const;

 private:
  std::span<const std::uint8_t> bytes_;
  std::size_t pos_ = 0;
  std::string what_;
};

// The codecs of stored blobs. zstd (level 1) is what ingest writes: zlib was ~78 % of ingest time;
// zlib blobs from older databases stay readable (inflate_bytes tells them apart by zstd's frame
// magic, so a blob needs no codec tag and no migration rewrites old rows).
enum class BlobCodec : std::uint8_t { zlib, zstd };
std::vector<std::uint8_t> compress_bytes(std::span<const std::uint8_t> raw, BlobCodec codec);

// compress_bytes into a caller's buffer with a zstd context of its own, both reused from blob to
// blob: a context costs more to create than a small blob costs to compress, and a fresh output
// buffer for every 64k-event chunk is fresh pages to fault in. One compressor per thread.
class Compressor {
 public:
  Compressor();
  ~Compressor();
  Compressor(const Compressor&) = delete;
  Compressor& operator=(const Compressor&) = delete;
  // Appends the compressed bytes of `raw` to `out` (what compress_bytes returns).
  void append(std::span<const std::uint8_t> raw, BlobCodec codec, std::vector<std::uint8_t>& out);

 private:
  struct Context;
  std::unique_ptr<Context> zstd_;  // created on first use
};
// compress_bytes with the codec new blobs are written in (zstd).
std::vector<std::uint8_t> deflate_bytes(std::span<const std::uint8_t> raw);
// Either codec; `expected_size` comes from the blob's header; a mismatch means a corrupt blob.
std::vector<std::uint8_t> inflate_bytes(std::span<const std::uint8_t> compressed,
                                        std::size_t expected_size, const std::string& what);

}  // namespace fragscope::storage
