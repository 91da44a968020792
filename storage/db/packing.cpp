#include "storage/db/packing.h"

#include <zlib.h>

#include "storage/db/database.h"

namespace fragscope::storage {

void ByteReader::fail(const std::string& problem) const {
  throw DatabaseError(what_ + ": corrupt data (" + problem + " at byte " + std::to_string(pos_) +
                      ")");
}

std::vector<std::uint8_t> deflate_bytes(std::span<const std::uint8_t> raw) {
  uLongf size = compressBound(static_cast<uLong>(raw.size()));
  std::vector<std::uint8_t> out(size);
  const int rc = compress2(out.data(), &size, raw.data(), static_cast<uLong>(raw.size()), 1);
  if (rc != Z_OK)
    throw DatabaseError("zlib compression failed (" + std::to_string(rc) + ")");
  out.resize(size);
  return out;
}

std::vector<std::uint8_t> inflate_bytes(std::span<const std::uint8_t> compressed,
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

}  // namespace fragscope::storage
