#include "storage/db/packing.h"

#include <algorithm>

#include <zlib.h>
#include <zstd.h>

#include "storage/db/database.h"

namespace fragscope::storage {

void ByteColumn::grow(std::size_t needed) {
  const std::size_t capacity = std::max({needed, 2 * capacity_, std::size_t{4096}});
  auto data = std::make_unique_for_overwrite<std::uint8_t[]>(capacity);
  std::copy(data_.get(), data_.get() + size_, data.get());
  data_ = std::move(data);
  capacity_ = capacity;
}

void ByteReader::fail(const std::string& problem) const {
  throw DatabaseError(what_ + ": corrupt data (" + problem + " at byte " + std::to_string(pos_) +
                      ")");
}

namespace {

// A zstd frame starts with 28 b5 2f fd; a zlib stream's first byte has 8 (deflate) in its low
// nibble, so the two never collide and the codec needs no tag of its own.
bool is_zstd_frame(std::span<const std::uint8_t> bytes) {
  return bytes.size() >= 4 && bytes[0] == 0x28 && bytes[1] == 0xb5 && bytes[2] == 0x2f &&
         bytes[3] == 0xfd;
}

std::vector<std::uint8_t> inflate_zlib(std::span<const std::uint8_t> compressed,
                                       std::size_t expected_size, const std::string& what) {
  std::vector<std::uint8_t> out(expected_size);
  uLongf size = static_cast<uLongf>(expected_size);
  const int rc =
      uncompress(out.data(), &size, compressed.data(), static_cast<uLong>(compressed.size()));
  if (rc != Z_OK || size != expected_size) {
    throw DatabaseError(what + ": corrupt data (zlib " +
                        (rc == Z_OK ? "size mismatch" : std::string(zError(rc))) + ")");
  }
  return out;
}

}  // namespace

// The frame carries a checksum, as zlib's stream does, so a damaged blob is an error and never
// silently different events.
struct Compressor::Context {
  ZSTD_CCtx* cctx = ZSTD_createCCtx();
  Context() {
    ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, 1);
    ZSTD_CCtx_setParameter(cctx, ZSTD_c_checksumFlag, 1);
  }
  ~Context() { ZSTD_freeCCtx(cctx); }
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;
};

Compressor::Compressor() = default;

Compressor::~Compressor() = default;

void Compressor::append(std::span<const std::uint8_t> raw, BlobCodec codec,
                        std::vector<std::uint8_t>& out) {
  const std::size_t at = out.size();
  if (codec == BlobCodec::zlib) {
    uLongf size = compressBound(static_cast<uLong>(raw.size()));
    out.resize(at + size);
    const int rc = compress2(out.data() + at, &size, raw.data(), static_cast<uLong>(raw.size()), 1);
    if (rc != Z_OK)
      throw DatabaseError("zlib compression failed (" + std::to_string(rc) + ")");
    out.resize(at + size);
    return;
  }
  if (zstd_ == nullptr)
    zstd_ = std::make_unique<Context>();
  if (zstd_->cctx == nullptr)
    throw DatabaseError("zstd compression failed (no memory for a context)");
  out.resize(at + ZSTD_compressBound(raw.size()));
  const std::size_t size =
      ZSTD_compress2(zstd_->cctx, out.data() + at, out.size() - at, raw.data(), raw.size());
  if (ZSTD_isError(size) != 0)
    throw DatabaseError(std::string("zstd compression failed (") + ZSTD_getErrorName(size) + ")");
  out.resize(at + size);
}

std::vector<std::uint8_t> compress_bytes(std::span<const std::uint8_t> raw, BlobCodec codec) {
  thread_local Compressor compressor;
  std::vector<std::uint8_t> out;
  compressor.append(raw, codec, out);
  return out;
}

std::vector<std::uint8_t> deflate_bytes(std::span<const std::uint8_t> raw) {
  return compress_bytes(raw, BlobCodec::zstd);
}

std::vector<std::uint8_t> inflate_bytes(std::span<const std::uint8_t> compressed,
                                        std::size_t expected_size, const std::string& what) {
  if (!is_zstd_frame(compressed))
    return inflate_zlib(compressed, expected_size, what);
  // The frame's own content size must agree with the blob header's before anything is sized.
  const unsigned long long content = ZSTD_getFrameContentSize(compressed.data(), compressed.size());
  if (content != expected_size)
    throw DatabaseError(what + ": corrupt data (zstd frame holds " +
                        (content == ZSTD_CONTENTSIZE_ERROR || content == ZSTD_CONTENTSIZE_UNKNOWN
                             ? std::string("an unreadable size")
                             : std::to_string(content) + " bytes") +
                        ", the header says " + std::to_string(expected_size) + ")");
  std::vector<std::uint8_t> out(expected_size);
  const std::size_t size =
      ZSTD_decompress(out.data(), out.size(), compressed.data(), compressed.size());
  if (ZSTD_isError(size) != 0)
    throw DatabaseError(what + ": corrupt data (zstd " + ZSTD_getErrorName(size) + ")");
  if (size != expected_size)
    throw DatabaseError(what + ": corrupt data (zstd size mismatch)");
  return out;
}

}  // namespace fragscope::storage
