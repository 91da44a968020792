#pragma once
// The bytes of a pickle, from a file or from memory, plain or gzip (detected by the magic bytes
// 1f 8b). Reads in chunks, so a 1 GB file never sits in memory at once. Offsets count
// decompressed bytes, which is what a pickle disassembler (python -m pickletools) shows.
#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace fragscope::snapshot {

class ByteSource {
 public:
  // Throws fragscope::InputError when the file cannot be opened.
  ByteSource(const std::filesystem::path& path, std::uint64_t max_decompressed);
  ByteSource(std::span<const std::uint8_t> data, std::string name, std::uint64_t max_decompressed);
  ~ByteSource();
  ByteSource(const ByteSource&) = delete;
  ByteSource& operator=(const ByteSource&) = delete;

  // Consumes `n` bytes and returns them (valid until the next call), or nullptr when the input
  // ends first. `n` should be small (opcode arguments); large payloads use read_into.
  // Inline: it runs for every opcode and argument (a tenth of reading a snapshot as a call).
  const std::uint8_t* take(std::size_t n) {
    if (end_ - begin_ < n) [[unlikely]]
      return take_slow(n);
    const std::uint8_t* p = buf_.data() + begin_;
    begin_ += n;
    return p;
  }
  // The next byte without consuming it, or -1 when none is buffered (the input may still go on).
  int peek_buffered() const { return begin_ < end_ ? buf_[begin_] : -1; }
  // The bytes read ahead and not consumed yet, valid until the next call that consumes or reads:
  // a caller may decode a whole run of opcodes from them, then consume it with skip(n) (n at most
  // their size).
  std::span<const std::uint8_t> buffered() const {
    return std::span<const std::uint8_t>(buf_.data() + begin_, end_ - begin_);
  }
  // buffered(), read ahead first to at least `n` bytes where the input has them (`n` at most a
  // few KiB), for a caller that decodes runs of opcodes: one that ends at the buffer's edge would
  // otherwise go the slow way. Reading ahead never throws: a corrupt or over-limit stretch past
  // what was asked for (gzip junk after the pickle's STOP, say) is an error only once a read
  // needs those bytes, as it was without the read-ahead.
  std::span<const std::uint8_t> buffered(std::size_t n) {
    if (end_ - begin_ < n) [[unlikely]]
      read_ahead(n);
    return buffered();
  }
  void skip(std::size_t n) { begin_ += n; }
  // Appends exactly `n` bytes to `out`; false when the input ends first.
  bool read_into(std::string& out, std::uint64_t n);
  std::uint64_t offset() const { return dropped_ + begin_; }
  // About how many bytes the pickle has (gzip's recorded size, mod 4 GiB, for a compressed
  // input), for sizing buffers up front; never trusted as a limit. 0 when unknown.
  std::uint64_t size_hint() const { return size_hint_; }
  bool compressed() const { return gzip_; }
  const std::string& name() const { return name_; }

 private:
  void start();
  const std::uint8_t* take_slow(std::size_t n);
  void read_ahead(std::size_t n);
  std::size_t read_raw(std::uint8_t* dst, std::size_t n);
  // Appends decompressed bytes after end_; returns how many (0 = end of input).
  std::size_t fill();
  [[noreturn]] void fail(const std::string& what) const;

  std::string name_;
  std::uint64_t max_decompressed_;
  std::FILE* file_ = nullptr;
  std::span<const std::uint8_t> memory_;
  std::size_t memory_pos_ = 0;
  bool raw_eof_ = false;
  bool gzip_ = false;
  bool gzip_done_ = false;  // the current gzip member ended
  struct Inflater;
  std::unique_ptr<Inflater> inflater_;
  std::vector<std::uint8_t> raw_;  // compressed input buffer
  std::vector<std::uint8_t> buf_;  // decompressed bytes [begin_, end_)
  std::size_t begin_ = 0;
  std::size_t end_ = 0;
  std::uint64_t dropped_ = 0;  // bytes consumed and dropped from the front of buf_
  std::uint64_t produced_ = 0;
  std::uint64_t raw_read_ = 0;
  std::uint64_t size_hint_ = 0;
  std::exception_ptr deferred_;  // read_ahead's error, thrown by the next fill()
};

}  // namespace fragscope::snapshot
