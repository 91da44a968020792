// read_snapshot: the pickle machine's objects walked into the Snapshot model. Trace entries are
// converted while their lists fill (a ListSink), so a 1 GB trace never exists as dicts; frames
// and frames lists are interned once and their objects replaced by the compact form, so a frames
// list shared by a segment, its blocks and trace entries is read once and found again by any
// later reference.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>
#include <unordered_map>

#include "engine/core/error.h"
#include "engine/snapshot/byte_source.h"
#include "engine/snapshot/pickle_vm.h"
#include "engine/snapshot/snapshot.h"
#include "engine/snapshot/trace_sink.h"

namespace fragscope::snapshot {
namespace {

using namespace reader_detail;

// Walks the parsed top level into the Snapshot model.
class SchemaReader {
 public:
  SchemaReader(Machine& vm, const Keys& keys, TraceSink& sink, Snapshot& out,
               const ReadLimits& limits)
      : vm_(vm),
        sink_(sink),
        out_(out),
        limits_(limits),
        budget_(vm, limits),
        interner_(vm, keys, out.frames, out.warnings, sink.odd_frames) {}

  void read_root(const Value& root) {
    Kind k = node_kind(vm_, root);
    if (k == Kind::list) {  // torch.cuda.memory_snapshot(): just the segments
      out_.features.segments_list_only = true;
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
    note_unknown_keys(root, "snapshot",
                      {"segments", "device_traces", "allocator_settings", "external_annotations"});
    Value segs = *segments;
    const Value* traces = find(vm_.node(root), "device_traces");
    Value tr = traces ? *traces : Value{};
    if (const Value* settings = find(vm_.node(root), "allocator_settings")) {
      Value sv = *settings;
      out_.allocator_settings = expand_to_json(sv, "allocator_settings");
      out_.allocator_settings_recorded = true;
      out_.features.allocator_settings = true;
      out_.features.settings_graph_capture_key =
          out_.allocator_settings.is_object() &&
          out_.allocator_settings.contains("graph_capture_record_stream_reuse");
    }
    if (const Value* annotations = find(vm_.node(root), "external_annotations")) {
      Value av = *annotations;
      out_.features.external_annotations = true;
      out_.external_annotations = expand_to_json(av, "external_annotations");
    }
    if (traces != nullptr)
      read_traces(tr);
    read_segments(segs);
  }

 private:
  const Value* find(const Node& dict, std::string_view key) {
    return find_key(dict, vm_.intern(key));
  }

  // Keys no release we know writes are ignored, and listed once per kind of dict.
  void note_unknown_keys(const Value& dict, std::string_view what,
                         std::initializer_list<std::string_view> known) {
    const Node& n = vm_.node(dict);
    for (std::size_t i = 0; i + 1 < n.items.size(); i += 2) {
      const Value& k = n.items[i];
      std::string name = k.kind == Kind::string ? std::string(vm_.str(k))
                                                : "<" + std::string(to_string(k.kind)) + ">";
      if (std::find(known.begin(), known.end(), name) != known.end())
        continue;
      std::string full = std::string(what) + "." + name;
      if (unknown_.insert(full).second && unknown_.size() <= 64)
        out_.features.unknown_keys.push_back(full);
    }
  }

  // The first item of device_traces[device] that is not a trace entry, and what is wrong with it.
  std::string why_not_a_trace(const Value& list, std::size_t device) {
    const std::string where = "device_traces[" + std::to_string(device) + "]";
    const std::uint32_t action_key = vm_.intern("action");
    const auto& items = vm_.node(list).items;
    for (std::size_t i = 0; i < items.size(); ++i) {
      const std::string place = where + "[" + std::to_string(i) + "]";
      const Kind kind = node_kind(vm_, items[i]);
      if (kind != Kind::dict)
        return place + " is a " + std::string(to_string(kind)) + ", not a trace entry dict";
      const Value* action = find_key(vm_.node(items[i]), action_key);
      if (action == nullptr)
        return place + ": a trace entry dict needs an 'action' key (e.g. 'alloc')";
      if (const Kind action_kind = node_kind(vm_, *action); action_kind != Kind::string)
        return place + ": 'action' must be a str (e.g. 'alloc'), found " +
               std::string(to_string(action_kind));
    }
    return where + " must be a list of trace entry dicts";
  }

  void read_traces(const Value& traces) {
    Kind tk = node_kind(vm_, traces);
    if (tk == Kind::none)
      return;
    if (tk != Kind::list && tk != Kind::tuple)
      vm_.fail("'device_traces' must be a list (one trace list per device)");
    std::size_t count = vm_.node(traces).items.size();
    if (count > limits_.max_devices)
      vm_.fail("'device_traces' has " + std::to_string(count) + " device lists, more than the " +
               std::to_string(limits_.max_devices) + " devices a snapshot can hold");
    out_.device_traces.resize(count);
    if (sink_.spooling())
      out_.device_spools.resize(count);
    std::vector<std::pair<std::uint32_t, std::size_t>> taken;  // event list -> device it went to
    for (std::size_t d = 0; d < count; ++d) {
      Value t = vm_.node(traces).items[d];
      Kind k = node_kind(vm_, t);
      if (k == Kind::trace_list) {
        const std::uint32_t list = vm_.node(t).aux;
        auto earlier = std::find_if(taken.begin(), taken.end(),
                                    [&](const auto& p) { return p.first == list; });
        if (earlier != taken.end()) {  // the same list object for two devices
          budget_.charge(out_.trace_size(earlier->second), "device_traces");
          if (sink_.spooling()) {
            out_.device_spools[d] = out_.device_spools[earlier->second];
            continue;
          }
          out_.device_traces[d] = out_.device_traces[earlier->second];
          if (earlier->second < out_.device_entry_texts.size())
            set_texts(d, out_.device_entry_texts[earlier->second]);
          continue;
        }
        taken.emplace_back(list, d);
        if (sink_.spooling()) {
          out_.device_spools[d] = std::move(sink_.spool(list));
          continue;
        }
        out_.device_traces[d] = std::move(vm_.event_list(list));
        if (!sink_.texts(list).empty())
          set_texts(d, std::move(sink_.texts(list)));
      } else if ((k == Kind::list || k == Kind::tuple) && vm_.node(t).items.empty()) {
        // a device with no entries
      } else if (k == Kind::list || k == Kind::tuple) {
        // A list the trace reader did not take: say which item is wrong ("found list" named the
        // container, not the fault).
        vm_.fail(why_not_a_trace(t, d));
      } else {
        vm_.fail("device_traces[" + std::to_string(d) +
                 "] must be a list of trace entry dicts, found " + std::string(to_string(k)));
      }
    }
  }

  void set_texts(std::size_t device, std::vector<TraceEntryText> texts) {
    if (out_.device_entry_texts.size() <= device)
      out_.device_entry_texts.resize(device + 1);
    texts.resize(out_.device_traces[device].size());
    out_.device_entry_texts[device] = std::move(texts);
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
    Kind k = node_kind(vm_, segments);
    if (k != Kind::list && k != Kind::tuple)
      vm_.fail("'segments' must be a list of segment dicts");
    std::size_t count = vm_.node(segments).items.size();
    // Every segment and block is charged before any is read: one segment dict referenced 20000
    // times, holding one block referenced 20000 times, stops here instead of after the budget's
    // worth of blocks.
    std::uint64_t blocks = 0;
    for (const Value& sv : vm_.node(segments).items) {
      if (node_kind(vm_, sv) != Kind::dict)
        continue;  // read_segment names it
      if (const Value* bl = find(vm_.node(sv), "blocks"); bl != nullptr && bl->is_node())
        blocks += vm_.node(*bl).items.size();
    }
    budget_.charge(count + blocks, "segments");
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
    note_unknown_keys(
        sv, "segment",
        {"device", "address", "total_size", "allocated_size", "active_size", "requested_size",
         "stream", "segment_type", "segment_pool_id", "is_expandable", "frames", "blocks"});
    const Node& n = vm_.node(sv);
    const Value* device = find(n, "device");
    if (device != nullptr) {
      std::int64_t d = as_i64(vm_, *device, where + " 'device'");
      if (d < 0 || static_cast<std::uint64_t>(d) >= limits_.max_devices)
        vm_.fail(where + ": 'device' " + std::to_string(d) + " is not a device index (0 to " +
                 std::to_string(limits_.max_devices - 1) + ")");
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
    if (const Value* e = find(vm_.node(sv), "is_expandable")) {
      if (e->kind != Kind::boolean && e->kind != Kind::integer)
        vm_.fail(where + ": 'is_expandable' must be a bool");
      s.is_expandable = e->i != 0;
    }
    if (const Value* f = find(vm_.node(sv), "frames")) {
      Value fv = *f;
      s.frames = interner_.stack(fv, where + " 'frames'", false);
    }
    const Value* blocks = find(vm_.node(sv), "blocks");
    if (blocks == nullptr)
      vm_.fail(where + ": missing key 'blocks'");
    Value bl = *blocks;
    Kind bk = node_kind(vm_, bl);
    if (bk != Kind::list && bk != Kind::tuple)
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
    note_unknown_keys(bv, "block",
                      {"address", "size", "requested_size", "state", "frames", "history"});
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
      out_.features.block_history = true;
      Value hv = *h;
      Kind hk = node_kind(vm_, hv);
      if (hk != Kind::list && hk != Kind::tuple)
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

  nlohmann::json frame_json(std::uint32_t index) {
    const Frame& f = out_.frames.frame(index);
    return {{"filename", f.filename}, {"line", f.line}, {"name", f.name}};
  }

  // The JSON of v, charged to the budget before it is built: shared objects (a "billion laughs")
  // are counted once per node, so a bomb is refused at once instead of after the budget's worth of
  // expansion.
  nlohmann::json expand_to_json(const Value& v, const std::string& where) {
    expansion_of_node_.clear();
    budget_.charge(expansion(v, 0), where);
    return to_json(v, where, 0);
  }

  // How many values to_json(v) visits (strings and bytes count one per 64 bytes more, frame stacks
  // one per frame), memoized per node and saturating: a container reached again while it is being
  // counted (a cycle) adds nothing here, nor does what lies past the nesting limit: to_json reports
  // both.
  std::uint64_t expansion(const Value& v, std::size_t depth) {
    const Kind kind = node_kind(vm_, v);
    switch (kind) {
      case Kind::string:
        return 1 + vm_.str(v).size() / 64;
      case Kind::bytes:
        return 1 + vm_.node(v).data.size() / 64;
      case Kind::frame_stack:
        return 1 + out_.frames.stack(FrameStackId{v.is_node() ? vm_.node(v).aux : v.ref}).size();
      case Kind::list:
      case Kind::tuple:
      case Kind::set:
      case Kind::dict: {
        if (depth > limits_.max_nesting)
          return 1;
        const auto [memo, fresh] = expansion_of_node_.try_emplace(v.ref, 0);
        if (!fresh)
          return memo->second;
        const std::vector<Value>& items = vm_.node(v).items;
        const std::size_t first = kind == Kind::dict ? 1 : 0;
        const std::size_t step = kind == Kind::dict ? 2 : 1;
        std::uint64_t total = 1;
        for (std::size_t i = first; i < items.size(); i += step)
          total = std::min(total + expansion(items[i], depth + 1), kSaturated);
        expansion_of_node_[v.ref] = total;
        return total;
      }
      default:
        return 1;
    }
  }

  // Already charged by expand_to_json.
  nlohmann::json to_json(const Value& v, const std::string& where, std::size_t depth) {
    if (depth > limits_.max_nesting)
      vm_.fail(where + ": nested deeper than " + std::to_string(limits_.max_nesting) + " levels");
    const Kind kind = node_kind(vm_, v);
    switch (kind) {
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
      case Kind::frame:
        return frame_json(v.is_node() ? vm_.node(v).aux : v.ref);
      case Kind::frame_stack: {
        const FrameStackId id{v.is_node() ? vm_.node(v).aux : v.ref};
        nlohmann::json arr = nlohmann::json::array();
        for (std::uint32_t index : out_.frames.stack(id))
          arr.push_back(frame_json(index));
        return arr;
      }
      case Kind::trace_event:
        return "<trace entry>";
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
            key = "<" + std::string(to_string(k.kind)) + ">";
          obj[key] = to_json(val, where + "." + key, depth + 1);
        }
        return obj;
      }
      default:
        vm_.fail(where + ": unexpected " + std::string(to_string(kind)));
    }
  }

  Machine& vm_;
  TraceSink& sink_;
  Snapshot& out_;
  const ReadLimits& limits_;
  Budget budget_;
  static constexpr std::uint64_t kSaturated = std::uint64_t{1} << 62;
  std::unordered_map<std::uint32_t, std::uint64_t> expansion_of_node_;
  FrameInterner interner_;
  std::set<std::string> unknown_;
};

Snapshot read_snapshot_impl(ByteSource& source, const ReadLimits& limits, bool spool) {
  Snapshot out;
  out.entry_texts = {std::string()};
  // The sink needs the machine's key ids and the machine needs the sink: build the machine first
  // with a forwarding sink.
  struct Forward : pickle::ListSink {
    pickle::ListSink* target = nullptr;
    bool on_append(Machine& vm, Value list, std::span<Value> items) override {
      return target->on_append(vm, list, items);
    }
    std::optional<std::uint32_t> known_frame_stack(std::span<const std::uint32_t> frames) override {
      return target->known_frame_stack(frames);
    }
    std::optional<Value> convert_entry(Machine& vm, Value list,
                                       std::span<const Value> pairs) override {
      return target->convert_entry(vm, list, pairs);
    }
  } forward;
  Machine vm(source, limits, &forward);
  Keys keys(vm);
  TraceSink sink(keys, out, spool);
  forward.target = &sink;
  Value root = vm.run();
  out.pickle_protocol = vm.protocol();
  SchemaReader schema(vm, keys, sink, out, limits);
  schema.read_root(root);
  out.torch_version = guess_torch_version(out.features);
  if (!out.features.unknown_keys.empty()) {
    std::string keys_text;
    for (const std::string& key : out.features.unknown_keys)
      keys_text += (keys_text.empty() ? "" : ", ") + key;
    out.warnings.push_back("keys no PyTorch release up to " + kLatestTorch.to_string() +
                           " writes were ignored: " + keys_text);
  }
  return out;
}

}  // namespace

Snapshot read_snapshot(const std::filesystem::path& path, const ReadLimits& limits) {
  ByteSource source(path, limits.max_decompressed);
  return read_snapshot_impl(source, limits, false);
}

Snapshot read_snapshot_from_memory(std::span<const std::uint8_t> data, std::string_view name,
                                   const ReadLimits& limits) {
  ByteSource source(data, std::string(name), limits.max_decompressed);
  return read_snapshot_impl(source, limits, false);
}

Snapshot read_snapshot_spooled(const std::filesystem::path& path, const ReadLimits& limits) {
  ByteSource source(path, limits.max_decompressed);
  return read_snapshot_impl(source, limits, true);
}

Snapshot read_snapshot_spooled_from_memory(std::span<const std::uint8_t> data,
                                           std::string_view name, const ReadLimits& limits) {
  ByteSource source(data, std::string(name), limits.max_decompressed);
  return read_snapshot_impl(source, limits, true);
}

}  // namespace fragscope::snapshot
