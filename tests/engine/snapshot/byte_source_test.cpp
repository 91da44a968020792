// ByteSource's size hint sizes the reader's buffers up front (issue #19: growing them was a third
// of a large import, in page faults): it must be the pickle's size, for a file and for memory,
// plain or gzip, and a forged gzip size must not be trusted beyond the reader's limits.
#include "engine/snapshot/byte_source.h"

#include <gtest/gtest.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "engine/core/error.h"
#include "engine/snapshot/pickle_writer.h"
#include "engine/snapshot/snapshot.h"

namespace fragscope::snapshot {
namespace {

std::vector<std::uint8_t> read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::uint64_t decompressed_size(const std::filesystem::path& path) {
  gzFile file = gzopen(path.c_str(), "rb");
  std::vector<char> buffer(1 << 16);
  std::uint64_t total = 0;
  for (int got; (got = gzread(file, buffer.data(), static_cast<unsigned>(buffer.size()))) > 0;)
    total += static_cast<std::uint64_t>(got);
  gzclose(file);
  return total;
}

TEST(ByteSource, SizeHintIsThePickleSize) {
  const auto gz = std::filesystem::path(FRAGSCOPE_FIXTURES) / "gpt_oom_cap.pickle.gz";
  const std::uint64_t pickle_size = decompressed_size(gz);
  ASSERT_GT(pickle_size, std::filesystem::file_size(gz));
  EXPECT_EQ(ByteSource(gz, 1ull << 40).size_hint(), pickle_size);
  const auto bytes = read_file(gz);
  EXPECT_EQ(ByteSource(bytes, "memory", 1ull << 40).size_hint(), pickle_size);

  const std::string plain = write_snapshot_pickle(read_snapshot(gz));
  const std::span<const std::uint8_t> plain_bytes(
      reinterpret_cast<const std::uint8_t*>(plain.data()), plain.size());
  EXPECT_EQ(ByteSource(plain_bytes, "plain", 1ull << 40).size_hint(), plain.size());
}

TEST(ByteSource, AForgedGzipSizeOnlyCostsAddressSpaceWithinTheLimits) {
  const auto gz = std::filesystem::path(FRAGSCOPE_FIXTURES) / "gpt_oom_cap.pickle.gz";
  auto bytes = read_file(gz);
  // ISIZE 0xffffffff: the reader sizes its buffers from it, capped, and still reads the file.
  for (std::size_t i = bytes.size() - 4; i < bytes.size(); ++i)
    bytes[i] = 0xff;
  EXPECT_EQ(ByteSource(bytes, "forged", 1ull << 40).size_hint(), 0xffffffffull);
  // Either read (the pickle ends before the trailer is checked) or refused with an InputError;
  // never std::bad_alloc from a 4 GiB reservation.
  ReadLimits small;
  small.max_decompressed = 64ull << 20;
  for (const ReadLimits& limits : {ReadLimits{}, small}) {
    try {
      const Snapshot s = read_snapshot_from_memory(bytes, "forged", limits);
      EXPECT_GT(s.trace_entry_count(), 0u);
    } catch (const InputError&) {
    }
  }
}

}  // namespace
}  // namespace fragscope::snapshot
