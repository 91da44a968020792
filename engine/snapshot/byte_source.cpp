#include "engine/snapshot/byte_source.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "engine/core/error.h"
#include "engine/core/input_file.h"

namespace fragscope::snapshot {
namespace {
constexpr std::size_t kRawChunk = 256 * 1024;
constexpr std::size_t kBufferChunk = 1024 * 1024;
}  // namespace

struct ByteSource::Inflater {
  z_stream stream{};
  bool initialised = false;
  ~Inflater() {
    if (initialised)
      inflateEnd(&stream);
  }
};

ByteSource::ByteSource(const std::filesystem::path& path, std::uint64_t max_decompressed)
    : name_(path.string()), max_decompressed_(max_decompressed) {
  refuse_special_file(path, "snapshot");  // open() of a FIFO would block forever
  file_ = std::fopen(path.c_str(), "rb");
  if (file_ == nullptr)
    throw InputError(name_ + ": cannot open: " + std::strerror(errno));
  start();
}

ByteSource::ByteSource(std::span<const std::uint8_t> data, std::string name,
                       std::uint64_t max_decompressed)
    : name_(std::move(name)), max_decompressed_(max_decompressed), memory_(data) {
  start();
}

ByteSource::~ByteSource() {
  if (file_ != nullptr)
    std::fclose(file_);
}

void ByteSource::fail(const std::string& what) const {
  throw InputError(name_ + ": " + what);
}

std::size_t ByteSource::read_raw(std::uint8_t* dst, std::size_t n) {
  std::size_t got = 0;
  if (file_ != nullptr) {
    got = std::fread(dst, 1, n, file_);
    if (got < n && std::ferror(file_))
      fail(std::string("read error: ") + std::strerror(errno));
  } else {
    got = std::min(n, memory_.size() - memory_pos_);
    std::memcpy(dst, memory_.data() + memory_pos_, got);
    memory_pos_ += got;
  }
  raw_read_ += got;
  return got;
}

void ByteSource::start() {
  buf_.resize(kBufferChunk);
  raw_.resize(kRawChunk);
  // Peek at the first bytes through the raw buffer: they are either gzip's magic or pickle data.
  std::size_t got = read_raw(raw_.data(), raw_.size());
  if (got >= 2 && raw_[0] == 0x1f && raw_[1] == 0x8b) {
    gzip_ = true;
    inflater_ = std::make_unique<Inflater>();
    if (inflateInit2(&inflater_->stream, 15 + 16) != Z_OK)
      fail("cannot initialise zlib");
    inflater_->initialised = true;
    inflater_->stream.next_in = raw_.data();
    inflater_->stream.avail_in = static_cast<uInt>(got);
  } else {
    std::memcpy(buf_.data(), raw_.data(), got);
    end_ = got;
    produced_ = got;
  }
  if (got < raw_.size())
    raw_eof_ = true;
  // The pickle's size: the input's, or for gzip the last member's ISIZE trailer (the whole size
  // for the usual single member, mod 2^32), at least the compressed size.
  std::uint64_t input_size = memory_.size();
  if (file_ != nullptr) {
    std::error_code error;
    input_size = std::filesystem::file_size(name_, error);
    if (error)
      input_size = 0;
  }
  size_hint_ = input_size;
  if (gzip_ && input_size >= 4) {
    std::uint8_t trailer[4] = {};
    bool have_trailer = false;
    if (file_ == nullptr) {
      std::memcpy(trailer, memory_.data() + memory_.size() - 4, 4);
      have_trailer = true;
    } else if (raw_eof_) {
      have_trailer = got >= 4;
      if (have_trailer)
        std::memcpy(trailer, raw_.data() + got - 4, 4);
    } else if (const long here = std::ftell(file_);
               here >= 0 && std::fseek(file_, -4, SEEK_END) == 0) {
      have_trailer = std::fread(trailer, 1, 4, file_) == 4;
      std::fseek(file_, here, SEEK_SET);
    }
    if (have_trailer) {
      const std::uint64_t isize = std::uint64_t{trailer[0]} | std::uint64_t{trailer[1]} << 8 |
                                  std::uint64_t{trailer[2]} << 16 | std::uint64_t{trailer[3]} << 24;
      size_hint_ = std::max(isize, input_size);
    }
  }
}

std::size_t ByteSource::fill() {
  if (deferred_)
    std::rethrow_exception(deferred_);
  if (end_ == buf_.size()) {
    // Keep unread bytes, drop read ones; grow only when everything is unread.
    if (begin_ > 0) {
      std::memmove(buf_.data(), buf_.data() + begin_, end_ - begin_);
      end_ -= begin_;
      dropped_ += begin_;
      begin_ = 0;
    } else {
      buf_.resize(buf_.size() * 2);
    }
  }
  std::size_t room = buf_.size() - end_;
  std::size_t got = 0;
  if (!gzip_) {
    if (raw_eof_)
      return 0;
    got = read_raw(buf_.data() + end_, room);
    if (got < room)
      raw_eof_ = true;
  } else {
    z_stream& zs = inflater_->stream;
    while (got == 0) {
      if (gzip_done_) {
        // A gzip file may hold several members back to back; anything else after one is junk.
        if (zs.avail_in == 0 && !raw_eof_) {
          std::size_t n = read_raw(raw_.data(), raw_.size());
          if (n < raw_.size())
            raw_eof_ = true;
          zs.next_in = raw_.data();
          zs.avail_in = static_cast<uInt>(n);
        }
        if (zs.avail_in == 0)
          return 0;
        inflateReset(&zs);
        gzip_done_ = false;
      }
      if (zs.avail_in == 0) {
        if (raw_eof_)
          fail("truncated gzip stream: compressed data ends at byte " + std::to_string(raw_read_) +
               " before the end of the gzip member");
        std::size_t n = read_raw(raw_.data(), raw_.size());
        if (n < raw_.size())
          raw_eof_ = true;
        zs.next_in = raw_.data();
        zs.avail_in = static_cast<uInt>(n);
        continue;
      }
      zs.next_out = buf_.data() + end_;
      zs.avail_out = static_cast<uInt>(room);
      int rc = inflate(&zs, Z_NO_FLUSH);
      got = room - zs.avail_out;
      if (rc == Z_STREAM_END) {
        gzip_done_ = true;
      } else if (rc == Z_BUF_ERROR && zs.avail_in == 0) {
        continue;  // needs more input
      } else if (rc != Z_OK) {
        fail(std::string("corrupt gzip data near compressed byte ") +
             std::to_string(raw_read_ - zs.avail_in) + ": " + (zs.msg ? zs.msg : "zlib error"));
      }
    }
  }
  end_ += got;
  produced_ += got;
  if (produced_ > max_decompressed_)
    fail("decompressed size exceeds the limit of " + std::to_string(max_decompressed_) + " bytes");
  return got;
}

void ByteSource::read_ahead(std::size_t n) {
  if (deferred_)
    return;
  try {
    while (end_ - begin_ < n) {
      if (fill() == 0)
        return;
    }
  } catch (const InputError&) {
    deferred_ = std::current_exception();
  }
}

const std::uint8_t* ByteSource::take_slow(std::size_t n) {
  while (end_ - begin_ < n) {
    if (fill() == 0)
      return nullptr;
  }
  const std::uint8_t* p = buf_.data() + begin_;
  begin_ += n;
  return p;
}

bool ByteSource::read_into(std::string& out, std::uint64_t n) {
  while (n > 0) {
    if (begin_ == end_) {
      if (fill() == 0)
        return false;
    }
    std::size_t chunk = static_cast<std::size_t>(std::min<std::uint64_t>(n, end_ - begin_));
    out.append(reinterpret_cast<const char*>(buf_.data() + begin_), chunk);
    begin_ += chunk;
    n -= chunk;
  }
  return true;
}

}  // namespace fragscope::snapshot
