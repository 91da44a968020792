#include "engine/snapshot/pickle_writer.h"

#include <zlib.h>

#include <bit>
#include <cstdio>
#include <cstring>
#include <optional>
#include <unordered_map>

#include "engine/core/error.h"

namespace fragscope::snapshot {
namespace {

constexpr std::size_t kBatch = 1000;  // Python's pickler batches APPENDS/SETITEMS by 1000

class PickleWriter {
 public:
  PickleWriter() {
    out_.push_back(static_cast<char>(0x80));  // PROTO 4
    out_.push_back(4);
  }

  std::string finish() {
    out_.push_back('.');  // STOP
    return std::move(out_);
  }

  void none() { out_.push_back('N'); }
  void boolean(bool b) { out_.push_back(static_cast<char>(b ? 0x88 : 0x89)); }

  void integer(std::int64_t v) {
    if (v >= 0 && v < 256) {
      out_.push_back('K');
      out_.push_back(static_cast<char>(v));
    } else if (v >= 0 && v < 65536) {
      out_.push_back('M');
      put_le(static_cast<std::uint64_t>(v), 2);
    } else if (v >= INT32_MIN && v <= INT32_MAX) {
      out_.push_back('J');
      put_le(static_cast<std::uint64_t>(static_cast<std::uint32_t>(static_cast<std::int32_t>(v))),
             4);
    } else {
      long1(static_cast<std::uint64_t>(v), v < 0);
    }
  }

  void unsigned_integer(std::uint64_t v) {
    if (v <= static_cast<std::uint64_t>(INT64_MAX))
      integer(static_cast<std::int64_t>(v));
    else
      long1(v, false);
  }

  void floating(double d) {
    out_.push_back('G');
    std::uint64_t bits = __builtin_bswap64(std::bit_cast<std::uint64_t>(d));
    out_.append(reinterpret_cast<const char*>(&bits), 8);
  }

  // Strings are memoized: every repeat becomes a BINGET of the first copy.
  void string(std::string_view s) {
    auto it = string_memo_.find(std::string(s));
    if (it != string_memo_.end()) {
      get(it->second);
      return;
    }
    if (s.size() < 256) {
      out_.push_back(static_cast<char>(0x8c));
      out_.push_back(static_cast<char>(s.size()));
    } else {
      out_.push_back('X');
      put_le(s.size(), 4);
    }
    out_.append(s);
    string_memo_.emplace(std::string(s), memoize());
  }

  std::uint32_t memoize() {
    out_.push_back(static_cast<char>(0x94));
    return next_memo_++;
  }

  void get(std::uint32_t index) {
    if (index < 256) {
      out_.push_back('h');
      out_.push_back(static_cast<char>(index));
    } else {
      out_.push_back('j');
      put_le(index, 4);
    }
  }

  std::uint32_t empty_dict() {
    out_.push_back('}');
    return memoize();
  }
  std::uint32_t empty_list() {
    out_.push_back(']');
    return memoize();
  }
  void mark() { out_.push_back('('); }
  void setitems() { out_.push_back('u'); }
  void appends() { out_.push_back('e'); }
  void tuple2() {
    out_.push_back(static_cast<char>(0x86));
    memoize();
  }

  // Items: call `emit(i)` for each; batches them the way Python does.
  // Returns the list's memo index.
  template <typename Emit>
  std::uint32_t list(std::size_t count, Emit emit) {
    std::uint32_t memo = empty_list();
    for (std::size_t start = 0; start < count; start += kBatch) {
      mark();
      for (std::size_t i = start; i < std::min(count, start + kBatch); ++i)
        emit(i);
      appends();
    }
    return memo;
  }

  void json(const nlohmann::json& j) {
    switch (j.type()) {
      case nlohmann::json::value_t::null:
        none();
        break;
      case nlohmann::json::value_t::boolean:
        boolean(j.get<bool>());
        break;
      case nlohmann::json::value_t::number_integer:
        integer(j.get<std::int64_t>());
        break;
      case nlohmann::json::value_t::number_unsigned:
        unsigned_integer(j.get<std::uint64_t>());
        break;
      case nlohmann::json::value_t::number_float:
        floating(j.get<double>());
        break;
      case nlohmann::json::value_t::string:
        string(j.get_ref<const std::string&>());
        break;
      case nlohmann::json::value_t::array: {
        list(j.size(), [&](std::size_t i) { json(j[i]); });
        break;
      }
      case nlohmann::json::value_t::object: {
        empty_dict();
        std::size_t n = 0;
        for (auto it = j.begin(); it != j.end(); ++it, ++n) {
          if (n % kBatch == 0) {
            if (n > 0)
              setitems();
            mark();
          }
          string(it.key());
          json(it.value());
        }
        if (n > 0)
          setitems();
        break;
      }
      default:
        none();
        break;
    }
  }

 private:
  void put_le(std::uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i)
      out_.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  }
  // LONG1: minimal little-endian two's complement.
  void long1(std::uint64_t bits, bool negative) {
    char buf[9];
    int n = 0;
    for (; n < 8; ++n)
      buf[n] = static_cast<char>((bits >> (8 * n)) & 0xff);
    if (!negative && (bits >> 63) != 0)
      buf[n++] = 0;  // room for the sign bit
    while (n > 1) {
      auto top = static_cast<std::uint8_t>(buf[n - 1]);
      auto below = static_cast<std::uint8_t>(buf[n - 2]);
      if ((top == 0 && (below & 0x80) == 0) || (top == 0xff && (below & 0x80) != 0))
        --n;
      else
        break;
    }
    out_.push_back(static_cast<char>(0x8a));
    out_.push_back(static_cast<char>(n));
    out_.append(buf, static_cast<std::size_t>(n));
  }

  std::string out_;
  std::uint32_t next_memo_ = 0;
  std::unordered_map<std::string, std::uint32_t> string_memo_;
};

bool is_segment_change(TraceAction action) {
  return action == TraceAction::segment_alloc || action == TraceAction::segment_free;
}

class SnapshotWriter {
 public:
  SnapshotWriter(const Snapshot& s, const WriteOptions& options) : s_(s), options_(options) {}

  std::string run() {
    w_.empty_dict();
    w_.mark();
    w_.string("segments");
    w_.list(s_.segments.size(), [&](std::size_t i) { segment(s_.segments[i]); });
    w_.string("device_traces");
    w_.list(s_.device_traces.size(), [&](std::size_t d) {
      const auto& trace = s_.device_traces[d];
      calls_ = {};
      w_.list(trace.size(), [&](std::size_t i) { entry(trace[i], d, i); });
    });
    w_.string("allocator_settings");
    w_.json(s_.allocator_settings);
    w_.string("external_annotations");
    w_.json(s_.external_annotations);
    w_.setitems();
    return w_.finish();
  }

 private:
  void key_int(std::string_view key, std::uint64_t v) {
    w_.string(key);
    w_.unsigned_integer(v);
  }

  // A list written once, and the stack it holds.
  struct WrittenList {
    std::uint32_t memo = 0;
    FrameStackId stack;
  };

  // Whether a list of `id` is written per allocator call (per_call; empty stacks stay shared,
  // as PyTorch shares its one empty list).
  bool per_call(FrameStackId id) const {
    return options_.frames_lists == FramesLists::per_call && !s_.frames.stack(id).empty();
  }

  // The frames list of a block or a segment: shared per stack, or (per_call) one of its own.
  void frames(FrameStackId id) {
    if (per_call(id))
      fresh_frames(id);
    else
      shared_frames(id);
  }

  void shared_frames(FrameStackId id) {
    auto it = stack_memo_.find(id.value);
    if (it != stack_memo_.end()) {
      w_.get(it->second);
      return;
    }
    stack_memo_.emplace(id.value, fresh_frames(id));
  }

  // Frame dicts are shared per frame in every layout, as in PyTorch's own output.
  std::uint32_t fresh_frames(FrameStackId id) {
    auto items = s_.frames.stack(id);
    return w_.list(items.size(), [&](std::size_t i) { frame(items[i]); });
  }

  // A trace entry's frames list. per_call: the list of an earlier entry of its allocator call
  // when that one has the same stack, else a fresh one. A call's segment entries come just
  // before its alloc (a malloc that frees cached segments, maps a new one, then allocates; an
  // empty_cache's run of segment_free), and a free's free_requested before its free_completed.
  void entry_frames(const TraceEvent& e) {
    if (!per_call(e.frames)) {
      shared_frames(e.frames);
      return;
    }
    std::optional<WrittenList> call;
    if (e.action == TraceAction::alloc || is_segment_change(e.action))
      call = calls_.segment_change;
    if (e.action == TraceAction::free_completed) {
      if (auto it = calls_.free_requested.find(e.addr); it != calls_.free_requested.end()) {
        call = it->second;
        calls_.free_requested.erase(it);
      }
    }
    if (call && call->stack == e.frames) {
      w_.get(call->memo);
      return;
    }
    const WrittenList written{fresh_frames(e.frames), e.frames};
    if (is_segment_change(e.action))
      calls_.segment_change = written;
    if (e.action == TraceAction::free_requested)
      calls_.free_requested[e.addr] = written;
  }

  void frame(std::uint32_t index) {
    auto it = frame_memo_.find(index);
    if (it != frame_memo_.end()) {
      w_.get(it->second);
      return;
    }
    const Frame& f = s_.frames.frame(index);
    frame_memo_.emplace(index, w_.empty_dict());
    w_.mark();
    w_.string("name");
    w_.string(f.name);
    w_.string("filename");
    w_.string(f.filename);
    w_.string("line");
    w_.integer(f.line);
    w_.setitems();
  }

  void entry(const TraceEvent& e, std::size_t device, std::size_t index) {
    w_.empty_dict();
    w_.mark();
    w_.string("action");
    w_.string(to_string(e.action));
    key_int(e.action == TraceAction::oom ? "device_free" : "addr", e.addr);
    key_int("size", e.size);
    key_int("stream", e.stream.value);
    if (s_.format == SnapshotFormat::v2_1) {
      w_.string("time_us");
      w_.integer(e.time_us);
    }
    if (e.frames.value != 0) {
      w_.string("frames");
      entry_frames(e);
    }
    if (!is_segment_change(e.action))
      calls_.segment_change.reset();
    if (device < s_.device_entry_texts.size() && index < s_.device_entry_texts[device].size()) {
      const TraceEntryText& text = s_.device_entry_texts[device][index];
      if (text.compile_context != 0) {
        w_.string("compile_context");
        w_.string(s_.entry_texts[text.compile_context]);
      }
      if (text.user_metadata != 0) {
        w_.string("user_metadata");
        w_.string(s_.entry_texts[text.user_metadata]);
      }
    }
    w_.setitems();
  }

  void block(const Block& b) {
    w_.empty_dict();
    w_.mark();
    key_int("address", b.address);
    key_int("size", b.size);
    key_int("requested_size", b.requested_size);
    w_.string("state");
    w_.string(to_string(b.state));
    w_.string("frames");
    frames(b.frames);
    w_.setitems();
  }

  void segment(const Segment& s) {
    w_.empty_dict();
    w_.mark();
    key_int("device", static_cast<std::uint64_t>(s.device));
    key_int("address", s.address);
    key_int("total_size", s.total_size);
    key_int("allocated_size", s.allocated_size);
    key_int("active_size", s.active_size);
    key_int("requested_size", s.requested_size);
    key_int("stream", s.stream.value);
    w_.string("segment_type");
    w_.string(to_string(s.pool));
    w_.string("segment_pool_id");
    w_.integer(s.pool_id.first);
    w_.integer(s.pool_id.second);
    w_.tuple2();
    w_.string("is_expandable");
    w_.boolean(s.is_expandable);
    w_.string("frames");
    frames(s.frames);
    w_.string("blocks");
    w_.list(s.blocks.size(), [&](std::size_t i) { block(s.blocks[i]); });
    w_.setitems();
  }

  const Snapshot& s_;
  const WriteOptions options_;
  PickleWriter w_;
  // The lists of the allocator calls still open in the device trace being written (per_call):
  // the segment entry just written, and each address's free_requested until its free_completed.
  struct OpenCalls {
    std::optional<WrittenList> segment_change;
    std::unordered_map<std::uint64_t, WrittenList> free_requested;
  };
  OpenCalls calls_;
  std::unordered_map<std::uint32_t, std::uint32_t> stack_memo_;
  std::unordered_map<std::uint32_t, std::uint32_t> frame_memo_;
};

}  // namespace

std::string write_snapshot_pickle(const Snapshot& snapshot, const WriteOptions& options) {
  return SnapshotWriter(snapshot, options).run();
}

void write_snapshot(const Snapshot& snapshot, const std::filesystem::path& path,
                    const WriteOptions& options) {
  std::string bytes = write_snapshot_pickle(snapshot, options);
  std::filesystem::path tmp = path;
  tmp += ".tmp";
  bool gz = path.extension() == ".gz";
  bool ok = true;
  if (gz) {
    gzFile f = gzopen(tmp.c_str(), "wb6");
    if (f == nullptr)
      throw InputError(path.string() + ": cannot create: " + std::strerror(errno));
    std::size_t pos = 0;
    while (ok && pos < bytes.size()) {
      unsigned chunk = static_cast<unsigned>(std::min<std::size_t>(bytes.size() - pos, 1u << 30));
      ok = gzwrite(f, bytes.data() + pos, chunk) == static_cast<int>(chunk);
      pos += chunk;
    }
    ok = gzclose(f) == Z_OK && ok;
  } else {
    std::FILE* f = std::fopen(tmp.c_str(), "wb");
    if (f == nullptr)
      throw InputError(path.string() + ": cannot create: " + std::strerror(errno));
    ok = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
    ok = std::fclose(f) == 0 && ok;
  }
  if (!ok) {
    std::error_code ec;
    std::filesystem::remove(tmp, ec);
    throw InputError(path.string() + ": write failed (disk full?)");
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec)
    throw InputError(path.string() +
                     ": cannot rename the finished file into place: " + ec.message());
}

}  // namespace fragscope::snapshot
