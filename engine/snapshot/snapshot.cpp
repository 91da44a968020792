#include "engine/snapshot/snapshot.h"

#include <algorithm>
#include <cstring>

#include "engine/core/error.h"
#include "engine/snapshot/byte_source.h"
#include "engine/snapshot/pickle_vm.h"

namespace fragscope::snapshot {

// ---- FrameTable -------------------------------------------------------------------------------

std::size_t FrameTable::FrameHash::operator()(const Frame& f) const noexcept {
  std::size_t h = std::hash<std::string>{}(f.filename);
  h ^= std::hash<std::string>{}(f.name) + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  h ^= std::hash<std::int64_t>{}(f.line) + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return h;
}

FrameTable::FrameTable() : stack_offsets_{0, 0} {
  stack_index_.emplace(hash_stack({}), 0);
}

std::uint64_t FrameTable::hash_stack(std::span<const std::uint32_t> frame_indices) {
  std::uint64_t h = 0xcbf29ce484222325ull ^ frame_indices.size();
  for (std::uint32_t i : frame_indices)
    h = (h ^ i) * 0x100000001b3ull;
  return h;
}

std::uint32_t FrameTable::intern_frame(const Frame& frame) {
  auto it = frame_index_.find(frame);
  if (it != frame_index_.end())
    return it->second;
  auto index = static_cast<std::uint32_t>(frames_.size());
  frames_.push_back(frame);
  frame_index_.emplace(frame, index);
  return index;
}

FrameStackId FrameTable::intern_stack(std::span<const std::uint32_t> frame_indices) {
  const std::uint64_t h = hash_stack(frame_indices);
  auto [first, last] = stack_index_.equal_range(h);
  for (auto it = first; it != last; ++it) {
    auto existing = stack(FrameStackId{it->second});
    if (std::equal(existing.begin(), existing.end(), frame_indices.begin(), frame_indices.end()))
      return FrameStackId{it->second};
  }
  auto id = static_cast<std::uint32_t>(stack_offsets_.size() - 1);
  stack_items_.insert(stack_items_.end(), frame_indices.begin(), frame_indices.end());
  stack_offsets_.push_back(static_cast<std::uint32_t>(stack_items_.size()));
  stack_index_.emplace(h, id);
  return FrameStackId{id};
}

std::span<const std::uint32_t> FrameTable::stack(FrameStackId id) const {
  if (id.value >= stack_count())
    return {};
  return std::span<const std::uint32_t>(stack_items_)
      .subspan(stack_offsets_[id.value], stack_offsets_[id.value + 1] - stack_offsets_[id.value]);
}

std::vector<Frame> FrameTable::stack_frames(FrameStackId id) const {
  std::vector<Frame> out;
  for (std::uint32_t i : stack(id))
    out.push_back(frames_[i]);
  return out;
}

// ---- enums ------------------------------------------------------------------------------------

std::string_view to_string(PoolKind pool) {
  return pool == PoolKind::small ? "small" : "large";
}

std::size_t Snapshot::device_count() const {
  std::size_t n = device_traces.size();
  for (const Segment& s : segments)
    n = std::max(n, static_cast<std::size_t>(s.device) + 1);
  return n;
}

std::size_t Snapshot::trace_entry_count() const {
  std::size_t n = 0;
  for (const auto& t : device_traces)
    n += t.size();
  return n;
}

// ---- reading ----------------------------------------------------------------------------------

namespace {
using pickle::Kind;
using pickle::Machine;
using pickle::Node;
using pickle::Value;

// Interned ids of the keys the schema looks at, fixed before parsing starts.
struct Keys {
  std::uint32_t action, addr, device_free, size, stream, time_us, frames, filename, line, name;
  explicit Keys(Machine& vm)
      : action(vm.intern("action")),
        addr(vm.intern("addr")),
        device_free(vm.intern("device_free")),
        size(vm.intern("size")),
        stream(vm.intern("stream")),
        time_us(vm.intern("time_us")),
        frames(vm.intern("frames")),
        filename(vm.intern("filename")),
        line(vm.intern("line")),
        name(vm.intern("name")) {}
};

Kind node_kind(Machine& vm, const Value& v) {
  return v.is_node() ? vm.node(v).kind : v.kind;
}

const Value* find_key(Machine& vm, const Node& dict, std::uint32_t key) {
  for (std::size_t i = dict.items.size(); i >= 2; i -= 2) {
    const Value& k = dict.items[i - 2];
    if (k.kind == Kind::string && k.ref == key)
      return &dict.items[i - 1];
  }
  (void)vm;
  return nullptr;
}

// Turns interned frames into the snapshot's FrameTable entries. Frame dicts are shared between
// trace entries (PyTorch reuses the objects), so each one is converted once and its memo slot then
// reads as the compact frame.
class FrameInterner {
 public:
  FrameInterner(Machine& vm, const Keys& keys, FrameTable& table)
      : vm_(vm), keys_(keys), table_(table) {}

  FrameStackId stack(const Value& v, std::string_view where, bool retire) {
    if (v.kind == Kind::frame_stack)
      return FrameStackId{v.ref};
    if (v.kind == Kind::none)
      return FrameStackId{};
    if (v.kind != Kind::list)
      vm_.fail(std::string(where) + ": expected a list of frames, found " +
               std::string(to_string(v.kind)));
    Node& n = vm_.node(v);
    if (n.kind == Kind::frame_stack)
      return FrameStackId{n.aux};
    if (n.kind != Kind::list)
      vm_.fail(std::string(where) + ": expected a list of frames, found " +
               std::string(to_string(n.kind)));
    indices_.clear();
    for (std::size_t i = 0; i < n.items.size(); ++i)
      indices_.push_back(frame(vm_.node(v).items[i], where));
    FrameStackId id = table_.intern_stack(indices_);
    if (retire) {
      Value replacement;
      replacement.kind = Kind::frame_stack;
      replacement.ref = id.value;
      vm_.retire(v, replacement);
    }
    return id;
  }

 private:
  std::uint32_t frame(const Value& v, std::string_view where) {
    if (v.kind == Kind::frame)
      return v.ref;
    if (v.kind != Kind::dict)
      vm_.fail(std::string(where) + ": expected a frame dict, found " +
               std::string(to_string(v.kind)));
    Node& n = vm_.node(v);
    if (n.kind == Kind::frame)
      return n.aux;
    if (n.kind != Kind::dict)
      vm_.fail(std::string(where) + ": expected a frame dict, found " +
               std::string(to_string(n.kind)));
    Frame f;
    const Value* filename = find_key(vm_, n, keys_.filename);
    const Value* line = find_key(vm_, n, keys_.line);
    const Value* name = find_key(vm_, n, keys_.name);
    if (filename == nullptr || line == nullptr || name == nullptr)
      vm_.fail(std::string(where) + ": a frame dict needs the keys 'filename', 'line' and 'name'");
    if (filename->kind != Kind::string || name->kind != Kind::string || line->kind != Kind::integer)
      vm_.fail(std::string(where) + ": frame 'filename' and 'name' must be str and 'line' an int");
    f.filename = vm_.str(*filename);
    f.name = vm_.str(*name);
    f.line = line->i;
    std::uint32_t index = table_.intern_frame(f);
    Value replacement;
    replacement.kind = Kind::frame;
    replacement.ref = index;
    vm_.retire(v, replacement);
    return index;
  }

  Machine& vm_;
  const Keys& keys_;
  FrameTable& table_;
  std::vector<std::uint32_t> indices_;
};

std::uint64_t as_u64(Machine& vm, const Value& v, const std::string& where) {
  if (v.kind == Kind::integer) {
    if (v.i < 0)
      vm.fail(where + ": expected a non-negative int, found " + std::to_string(v.i));
    return static_cast<std::uint64_t>(v.i);
  }
  if (v.kind == Kind::big_integer) {
    const std::string& d = vm.node(v).data;
    // Python writes 2^63..2^64-1 as 9 bytes with a zero sign byte.
    if (d.size() == 9 && d[8] == 0) {
      std::uint64_t u;
      std::memcpy(&u, d.data(), 8);
      return u;
    }
    vm.fail(where + ": integer does not fit in 64 bits");
  }
  vm.fail(where + ": expected an int, found " + std::string(to_string(v.kind)));
}

std::int64_t as_i64(Machine& vm, const Value& v, const std::string& where) {
  if (v.kind != Kind::integer)
    vm.fail(where + ": expected an int that fits in 64 bits, found " +
            std::string(to_string(v.kind)));
  return v.i;
}

// Consumes trace entry dicts as their lists are filled, so the trace never exists as dicts.
class TraceSink : public pickle::ListSink {
 public:
  TraceSink(const Keys& keys, FrameTable& frames) : keys_(keys), frames_(frames) {}

  bool on_append(Machine& vm, Value list, std::span<Value> items) override {
    bool any = false;
    for (const Value& item : items) {
      if (is_trace_entry(vm, item)) {
        any = true;
        break;
      }
    }
    if (!any)
      return false;
    Node& ln = vm.node(list);
    if (ln.kind == Kind::list) {
      if (!ln.items.empty())
        vm.fail("a list mixes trace entry dicts with other objects");
      ln.kind = Kind::trace_list;
      ln.aux = vm.new_event_list();
    }
    std::uint32_t events_index = vm.node(list).aux;
    FrameInterner interner(vm, keys_, frames_);
    for (const Value& item : items) {
      if (!is_trace_entry(vm, item))
        vm.fail("a device trace holds a " + std::string(to_string(item.kind)) +
                " where a trace entry dict (with an 'action' key) was expected");
      TraceEvent ev = convert(vm, item, interner);
      vm.event_list(events_index).push_back(ev);
      Value consumed;
      consumed.kind = Kind::consumed;
      vm.retire(item, consumed);
    }
    return true;
  }

 private:
  bool is_trace_entry(Machine& vm, const Value& item) const {
    if (item.kind != Kind::dict)
      return false;
    const Node& n = vm.node(item);
    if (n.kind != Kind::dict)
      return false;
    const Value* a = find_key(vm, n, keys_.action);
    return a != nullptr && a->kind == Kind::string;
  }

  TraceEvent convert(Machine& vm, const Value& item, FrameInterner& interner) {
    TraceEvent ev;
    const Node& n = vm.node(item);
    const Value* action = nullptr;
    const Value* addr = nullptr;
    const Value* size = nullptr;
    const Value* stream = nullptr;
    const Value* time_us = nullptr;
    const Value* frames = nullptr;
    for (std::size_t i = 0; i + 1 < n.items.size(); i += 2) {
      const Value& k = n.items[i];
      if (k.kind != Kind::string)
        continue;
      const Value* v = &n.items[i + 1];
      if (k.ref == keys_.action)
        action = v;
      else if (k.ref == keys_.addr || k.ref == keys_.device_free)
        addr = v;
      else if (k.ref == keys_.size)
        size = v;
      else if (k.ref == keys_.stream)
        stream = v;
      else if (k.ref == keys_.time_us)
        time_us = v;
      else if (k.ref == keys_.frames)
        frames = v;
    }
    std::string_view name = vm.str(*action);
    auto parsed = trace_action_from_string(name);
    if (!parsed)
      vm.fail("trace entry with unknown action '" + std::string(name) +
              "' (expected alloc, free_requested, free_completed, segment_alloc, segment_free, "
              "segment_map, segment_unmap, snapshot or oom)");
    ev.action = *parsed;
    auto where = [&] { return "trace entry '" + std::string(name) + "'"; };
    if (addr == nullptr)
      vm.fail(where() + ": missing key '" +
              std::string(ev.action == TraceAction::oom ? "device_free" : "addr") + "'");
    if (size == nullptr)
      vm.fail(where() + ": missing key 'size'");
    // Plain non-negative ints are the rule; anything else takes the checked path.
    auto u64 = [&](const Value& v, const char* key) {
      return v.kind == Kind::integer && v.i >= 0 ? static_cast<std::uint64_t>(v.i)
                                                 : as_u64(vm, v, where() + " '" + key + "'");
    };
    ev.addr = u64(*addr, "addr");
    ev.size = u64(*size, "size");
    if (stream != nullptr)
      ev.stream = StreamId{u64(*stream, "stream")};
    if (time_us != nullptr)
      ev.time_us = time_us->kind == Kind::integer ? time_us->i
                                                  : as_i64(vm, *time_us, where() + " 'time_us'");
    if (frames != nullptr) {
      Value fv = *frames;  // the dict's item storage may move while frames are interned
      ev.frames = interner.stack(fv, "trace entry 'frames'", true);
    }
    return ev;
  }

  const Keys& keys_;
  FrameTable& frames_;
};

// Walks the parsed top level into the Snapshot model.
class SchemaReader {
 public:
  SchemaReader(Machine& vm, const Keys& keys, Snapshot& out, std::size_t max_depth)
      : vm_(vm), out_(out), max_depth_(max_depth), interner_(vm, keys, out.frames) {}

  void read_root(const Value& root) {
    Kind k = node_kind(vm_, root);
    if (k == Kind::list) {  // torch.cuda.memory_snapshot(): just the segments
      read_segments(root);
      return;
    }
    if (k != Kind::dict)
      vm_.fail("the top-level object is a " + std::string(to_string(k)) +
               ", expected the snapshot dict (keys 'segments', 'device_traces', ...)");
    const Node& n = vm_.node(root);
    const Value* segments = find(n, "segments");
    if (segments == nullptr)
      vm_.fail("the snapshot dict has no 'segments' key");
    Value segs = *segments;
    const Value* traces = find(n, "device_traces");
    Value tr = traces ? *traces : Value{};
    const Value* settings = find(n, "allocator_settings");
    if (settings != nullptr)
      out_.allocator_settings = to_json(*settings, "allocator_settings", 0);
    const Value* annotations = find(vm_.node(root), "external_annotations");
    if (annotations != nullptr)
      out_.external_annotations = to_json(*annotations, "external_annotations", 0);
    if (traces != nullptr)
      read_traces(tr);
    read_segments(segs);
  }

 private:
  const Value* find(const Node& dict, std::string_view key) {
    return find_key(vm_, dict, vm_.intern(key));
  }

  void read_traces(const Value& traces) {
    if (node_kind(vm_, traces) != Kind::list)
      vm_.fail("'device_traces' must be a list (one trace list per device)");
    std::size_t count = vm_.node(traces).items.size();
    out_.device_traces.resize(count);
    for (std::size_t d = 0; d < count; ++d) {
      Value t = vm_.node(traces).items[d];
      Kind k = node_kind(vm_, t);
      if (k == Kind::trace_list) {
        out_.device_traces[d] = std::move(vm_.event_list(vm_.node(t).aux));
      } else if (k == Kind::list && vm_.node(t).items.empty()) {
        // a device with no entries
      } else {
        vm_.fail("device_traces[" + std::to_string(d) +
                 "] must be a list of trace entry dicts, found " + std::string(to_string(k)));
      }
    }
  }

  std::int64_t int_field(const Node& d, std::string_view key, const std::string& where,
                         std::optional<std::int64_t> fallback = std::nullopt) {
    const Value* v = find(d, key);
    if (v == nullptr) {
      if (fallback)
        return *fallback;
      vm_.fail(where + ": missing key '" + std::string(key) + "'");
    }
    return static_cast<std::int64_t>(as_u64(vm_, *v, where + " '" + std::string(key) + "'"));
  }

  void read_segments(const Value& segments) {
    if (node_kind(vm_, segments) != Kind::list)
      vm_.fail("'segments' must be a list of segment dicts");
    std::size_t count = vm_.node(segments).items.size();
    out_.segments.reserve(count);
    for (std::size_t i = 0; i < count; ++i) {
      Value sv = vm_.node(segments).items[i];
      std::string where = "segments[" + std::to_string(i) + "]";
      if (node_kind(vm_, sv) != Kind::dict)
        vm_.fail(where + ": expected a segment dict");
      out_.segments.push_back(read_segment(sv, where));
    }
  }

  Segment read_segment(const Value& sv, const std::string& where) {
    Segment s;
    const Node& n = vm_.node(sv);
    const Value* device = find(n, "device");
    if (device != nullptr) {
      std::int64_t d = as_i64(vm_, *device, where + " 'device'");
      if (d < 0 || d > 1 << 16)
        vm_.fail(where + ": 'device' " + std::to_string(d) + " is not a device index");
      s.device = static_cast<int>(d);
    }
    s.address = static_cast<std::uint64_t>(int_field(n, "address", where));
    s.total_size = static_cast<Bytes>(int_field(n, "total_size", where));
    s.allocated_size = static_cast<Bytes>(int_field(n, "allocated_size", where, 0));
    s.active_size = static_cast<Bytes>(int_field(n, "active_size", where, 0));
    s.requested_size = static_cast<Bytes>(int_field(n, "requested_size", where, 0));
    s.stream = StreamId{static_cast<std::uint64_t>(int_field(n, "stream", where, 0))};
    if (const Value* type = find(n, "segment_type")) {
      if (type->kind != Kind::string)
        vm_.fail(where + ": 'segment_type' must be 'small' or 'large'");
      std::string_view t = vm_.str(*type);
      if (t == "small")
        s.pool = PoolKind::small;
      else if (t == "large")
        s.pool = PoolKind::large;
      else
        vm_.fail(where + ": 'segment_type' is '" + std::string(t) + "', expected small or large");
    }
    if (const Value* pool = find(n, "segment_pool_id")) {
      Kind k = node_kind(vm_, *pool);
      if ((k != Kind::tuple && k != Kind::list) || vm_.node(*pool).items.size() != 2)
        vm_.fail(where + ": 'segment_pool_id' must be a pair of ints");
      Value a = vm_.node(*pool).items[0];
      Value b = vm_.node(*pool).items[1];
      s.pool_id = {as_i64(vm_, a, where + " segment_pool_id"),
                   as_i64(vm_, b, where + " segment_pool_id")};
    }
    if (const Value* e = find(n, "is_expandable")) {
      if (e->kind != Kind::boolean)
        vm_.fail(where + ": 'is_expandable' must be a bool");
      s.is_expandable = e->i != 0;
    }
    if (const Value* f = find(n, "frames")) {
      Value fv = *f;
      s.frames = interner_.stack(fv, where + " 'frames'", false);
    }
    const Value* blocks = find(vm_.node(sv), "blocks");
    if (blocks == nullptr)
      vm_.fail(where + ": missing key 'blocks'");
    Value bl = *blocks;
    if (node_kind(vm_, bl) != Kind::list)
      vm_.fail(where + ": 'blocks' must be a list of block dicts");
    std::size_t count = vm_.node(bl).items.size();
    std::uint64_t next_address = s.address;
    for (std::size_t i = 0; i < count; ++i) {
      Value bv = vm_.node(bl).items[i];
      std::string bwhere = where + ".blocks[" + std::to_string(i) + "]";
      if (node_kind(vm_, bv) != Kind::dict)
        vm_.fail(bwhere + ": expected a block dict");
      Block b = read_block(bv, bwhere, next_address);
      next_address = b.address + b.size;
      s.blocks.push_back(b);
    }
    return s;
  }

  Block read_block(const Value& bv, const std::string& where, std::uint64_t next_address) {
    Block b;
    const Node& n = vm_.node(bv);
    b.size = static_cast<Bytes>(int_field(n, "size", where));
    b.requested_size = static_cast<Bytes>(int_field(n, "requested_size", where, 0));
    const Value* state = find(n, "state");
    if (state == nullptr || state->kind != Kind::string)
      vm_.fail(where + ": missing str key 'state'");
    std::string_view st = vm_.str(*state);
    if (st == "active_allocated")
      b.state = BlockState::active_allocated;
    else if (st == "active_pending_free" || st == "active_awaiting_free")
      b.state = BlockState::active_pending_free;
    else if (st == "inactive")
      b.state = BlockState::inactive;
    else
      vm_.fail(where + ": block state '" + std::string(st) +
               "' (expected active_allocated, active_pending_free or inactive)");
    if (const Value* a = find(vm_.node(bv), "address")) {
      b.address = as_u64(vm_, *a, where + " 'address'");
    } else {
      // PyTorch 2.0 blocks have no address: they tile the segment in order.
      b.address = next_address;
      out_.format = SnapshotFormat::v2_0;
    }
    if (const Value* f = find(vm_.node(bv), "frames")) {
      Value fv = *f;
      b.frames = interner_.stack(fv, where + " 'frames'", false);
    } else if (const Value* h = find(vm_.node(bv), "history")) {
      // 2.0: history = [{addr, real_size, frames}], the newest last.
      out_.format = SnapshotFormat::v2_0;
      Value hv = *h;
      if (node_kind(vm_, hv) != Kind::list)
        vm_.fail(where + ": 'history' must be a list");
      if (!vm_.node(hv).items.empty()) {
        Value last = vm_.node(hv).items.back();
        if (node_kind(vm_, last) != Kind::dict)
          vm_.fail(where + ": 'history' entries must be dicts");
        if (const Value* f2 = find(vm_.node(last), "frames")) {
          Value fv = *f2;
          b.frames = interner_.stack(fv, where + " history 'frames'", false);
        }
      }
    }
    return b;
  }

  nlohmann::json to_json(const Value& v, const std::string& where, std::size_t depth) {
    if (depth > max_depth_)
      vm_.fail(where + ": nested deeper than " + std::to_string(max_depth_) + " levels");
    switch (node_kind(vm_, v)) {
      case Kind::none:
        return nullptr;
      case Kind::boolean:
        return v.i != 0;
      case Kind::integer:
        return v.i;
      case Kind::floating:
        return v.d;
      case Kind::string:
        return std::string(vm_.str(v));
      case Kind::big_integer:
        return "<int too large>";
      case Kind::bytes:
        return vm_.node(v).data;
      case Kind::list:
      case Kind::tuple:
      case Kind::set: {
        nlohmann::json arr = nlohmann::json::array();
        std::size_t count = vm_.node(v).items.size();
        for (std::size_t i = 0; i < count; ++i)
          arr.push_back(to_json(vm_.node(v).items[i], where, depth + 1));
        return arr;
      }
      case Kind::dict: {
        nlohmann::json obj = nlohmann::json::object();
        std::size_t count = vm_.node(v).items.size();
        for (std::size_t i = 0; i + 1 < count; i += 2) {
          Value k = vm_.node(v).items[i];
          Value val = vm_.node(v).items[i + 1];
          std::string key;
          if (k.kind == Kind::string)
            key = vm_.str(k);
          else if (k.kind == Kind::integer)
            key = std::to_string(k.i);
          else
            vm_.fail(where + ": dict key of type " + std::string(to_string(k.kind)) +
                     " (expected str or int)");
          obj[key] = to_json(val, where + "." + key, depth + 1);
        }
        return obj;
      }
      default:
        vm_.fail(where + ": unexpected " + std::string(to_string(node_kind(vm_, v))));
    }
  }

  Machine& vm_;
  Snapshot& out_;
  std::size_t max_depth_;
  FrameInterner interner_;
};

Snapshot read_snapshot_impl(ByteSource& source, const ReadLimits& limits) {
  Snapshot out;
  // The sink needs the machine's key ids and the machine needs the sink: build the machine first
  // with a forwarding sink.
  struct Forward : pickle::ListSink {
    pickle::ListSink* target = nullptr;
    bool on_append(Machine& vm, Value list, std::span<Value> items) override {
      return target->on_append(vm, list, items);
    }
  } forward;
  Machine vm(source, limits, &forward);
  Keys keys(vm);
  TraceSink sink(keys, out.frames);
  forward.target = &sink;
  Value root = vm.run();
  out.pickle_protocol = vm.protocol();
  SchemaReader schema(vm, keys, out, limits.max_nesting);
  schema.read_root(root);
  return out;
}

}  // namespace

Snapshot read_snapshot(const std::filesystem::path& path, const ReadLimits& limits) {
  ByteSource source(path, limits.max_decompressed);
  return read_snapshot_impl(source, limits);
}

Snapshot read_snapshot_from_memory(std::span<const std::uint8_t> data, std::string_view name,
                                   const ReadLimits& limits) {
  ByteSource source(data, std::string(name), limits.max_decompressed);
  return read_snapshot_impl(source, limits);
}

}  // namespace fragscope::snapshot
