#pragma once
// The reader's conversions (snapshot_reader.cpp, its only includer): the keys it looks for, frame
// dicts and frames lists into the FrameTable (FrameInterner), and trace entries into events as
// their lists fill (TraceSink, the pickle machine's ListSink), so a 1 GB trace never exists as
// dicts.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/core/error.h"
#include "engine/snapshot/pickle_vm.h"
#include "engine/snapshot/snapshot.h"

namespace fragscope::snapshot::reader_detail {

using pickle::Kind;
using pickle::Machine;
using pickle::Node;
using pickle::Value;

// Interned ids of the keys the schema looks at, fixed before parsing starts.
struct Keys {
  std::uint32_t action, addr, device_free, size, stream, time_us, frames, filename, line, name,
      compile_context, user_metadata;
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
        name(vm.intern("name")),
        compile_context(vm.intern("compile_context")),
        user_metadata(vm.intern("user_metadata")) {}
};

inline Kind node_kind(Machine& vm, const Value& v) {
  return v.is_node() ? vm.node(v).kind : v.kind;
}

inline const Value* find_key(const Node& dict, std::uint32_t key) {
  for (std::size_t i = dict.items.size(); i >= 2; i -= 2) {
    const Value& k = dict.items[i - 2];
    if (k.kind == Kind::string && k.ref == key)
      return &dict.items[i - 1];
  }
  return nullptr;
}

// The low 64 bits of a Python int, as C++ wrote them (2^64-1 is size_t(-1), "no line").
inline std::int64_t wrapped_int(Machine& vm, const Value& v) {
  if (v.kind == Kind::integer || v.kind == Kind::boolean)
    return v.i;
  if (v.kind == Kind::big_integer) {
    const std::string& d = vm.node(v).data;
    std::uint64_t u = 0;
    std::memcpy(&u, d.data(), std::min<std::size_t>(8, d.size()));
    return static_cast<std::int64_t>(u);
  }
  if (v.kind == Kind::floating && std::isfinite(v.d) && std::abs(v.d) < 9.2e18)
    return static_cast<std::int64_t>(v.d);
  return 0;
}

// Work done on objects after parsing, where a shared object is visited once per reference: the
// schema walk charges every value it visits, and a file whose references expand far beyond its
// own size (a "billion laughs") stops with an error instead of exhausting memory.
class Budget {
 public:
  Budget(Machine& vm, const ReadLimits& limits)
      : vm_(vm),
        limit_(std::max<std::uint64_t>(limits.min_expansion,
                                       limits.expansion_per_byte * vm.offset())) {}

  void charge(std::uint64_t values, std::string_view where) {
    used_ += values;
    if (used_ > limit_)
      vm_.fail(std::string(where) + ": the pickle's shared objects expand to more than " +
               std::to_string(limit_) + " values (the limit for a " + std::to_string(vm_.offset()) +
               "-byte pickle; an object referenced over and over?)");
  }

 private:
  Machine& vm_;
  std::uint64_t limit_;
  std::uint64_t used_ = 0;
};

// Turns frame dicts and frames lists into FrameTable entries. Each object is converted once;
// its memo slot (and, when it is shared, the object itself) then reads as the compact form.
class FrameInterner {
 public:
  FrameInterner(Machine& vm, const Keys& keys, FrameTable& table, std::vector<std::string>& notes,
                std::uint64_t& odd_frames)
      : vm_(vm), keys_(keys), table_(table), notes_(notes), odd_frames_(odd_frames) {}

  // `owner_discarded`: the caller's reference goes away with its owner (a trace entry being
  // converted), so an unshared list may be freed; otherwise the list stays, as its compact form.
  FrameStackId stack(const Value& v, std::string_view where, bool owner_discarded) {
    if (v.kind == Kind::frame_stack)
      return FrameStackId{v.ref};
    if (v.kind == Kind::none)
      return FrameStackId{};
    if (v.kind != Kind::list && v.kind != Kind::tuple) {
      note_odd(std::string(where) + " is a " + std::string(to_string(v.kind)) +
               ", not a list of frames (no stack kept)");
      return FrameStackId{};
    }
    Node& n = vm_.node(v);
    if (n.kind == Kind::frame_stack) {
      const FrameStackId id{n.aux};
      if (owner_discarded)
        vm_.release(v);
      return id;
    }
    if (n.kind != Kind::list && n.kind != Kind::tuple) {
      note_odd(std::string(where) + " is a " + std::string(to_string(n.kind)) +
               ", not a list of frames (no stack kept)");
      return FrameStackId{};
    }
    indices_.clear();
    // Frames seen before are compact already (a real trace's 1.2M lists of ~65 frames name ~500
    // distinct ones): read them straight, until the first that is not.
    std::size_t i = 0;
    const std::size_t count = n.items.size();
    indices_.resize(count);
    for (const Value* items = n.items.data(); i < count && items[i].kind == Kind::frame; ++i)
      indices_[i] = items[i].ref;
    indices_.resize(i);
    for (; i < vm_.node(v).items.size(); ++i) {
      std::optional<std::uint32_t> index = frame(vm_.node(v).items[i], where);
      if (index)
        indices_.push_back(*index);
    }
    const FrameStackId id = table_.intern_stack(indices_);
    Value replacement;
    replacement.kind = Kind::frame_stack;
    replacement.ref = id.value;
    if (owner_discarded) {
      vm_.retire(v, replacement);
    } else {
      Node& list = vm_.node(v);
      list.kind = Kind::frame_stack;
      list.aux = id.value;
      release_storage(list);
    }
    return id;
  }

 private:
  void note_odd(std::string text) {
    if (odd_frames_++ == 0)
      notes_.push_back(std::move(text));
  }

  std::string text_of(const Value* v) {
    if (v == nullptr || v->kind == Kind::none)
      return {};
    if (v->kind == Kind::string)
      return std::string(vm_.str(*v));
    if (v->kind == Kind::integer)
      return std::to_string(v->i);
    return "<" + std::string(to_string(v->kind)) + ">";
  }

  // The frame's index; nullopt for an item that is not a frame dict (skipped, noted once).
  std::optional<std::uint32_t> frame(const Value& v, std::string_view where) {
    if (v.kind == Kind::frame)
      return v.ref;
    if (v.kind != Kind::dict) {
      note_odd(std::string(where) + " holds a " + std::string(to_string(v.kind)) +
               " where a frame dict was expected (skipped)");
      return std::nullopt;
    }
    Node& n = vm_.node(v);
    if (n.kind == Kind::frame) {
      const std::uint32_t index = n.aux;
      vm_.release(v);  // the list holding it is turned compact right after
      return index;
    }
    if (n.kind != Kind::dict)
      return std::nullopt;
    // Missing or odd fields are kept as far as they go: a frame is only ever shown.
    Frame f;
    const Value* filename = find_key(n, keys_.filename);
    const Value* line = find_key(n, keys_.line);
    const Value* name = find_key(n, keys_.name);
    if (filename == nullptr || line == nullptr || name == nullptr)
      note_odd(std::string(where) + ": a frame dict without 'filename', 'line' or 'name'");
    f.filename = text_of(filename);
    f.name = text_of(name);
    f.line = line != nullptr ? wrapped_int(vm_, *line) : 0;
    const std::uint32_t index = table_.intern_frame(f);
    Value replacement;
    replacement.kind = Kind::frame;
    replacement.ref = index;
    vm_.retire(v, replacement);  // the list holding it is turned compact right after
    return index;
  }

  Machine& vm_;
  const Keys& keys_;
  FrameTable& table_;
  std::vector<std::string>& notes_;
  std::vector<std::uint32_t> indices_;
  std::uint64_t& odd_frames_;  // odd frames seen in the whole file: said once
};

inline std::uint64_t as_u64(Machine& vm, const Value& v, const std::string& where) {
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

inline std::int64_t as_i64(Machine& vm, const Value& v, const std::string& where) {
  if (v.kind != Kind::integer)
    vm.fail(where + ": expected an int that fits in 64 bits, found " +
            std::string(to_string(v.kind)));
  return v.i;
}

// Consumes trace entry dicts as their lists are filled, so the trace never exists as dicts.
class TraceSink : public pickle::ListSink {
 public:
  // `spool`: entries go to packed EventSpools (spools()) instead of the machine's event lists,
  // without their texts.
  TraceSink(const Keys& keys, Snapshot& out, bool spool)
      : keys_(keys), out_(out), notes_(out.warnings), spool_(spool) {}

  bool on_append(Machine& vm, Value list, std::span<Value> items) override {
    // Items that are no entries, appended to a trace: the loop below says what is wrong with them.
    // (A frames list's items are frames: the kind alone says so, without a call for each.)
    if (vm.node(list).kind != Kind::trace_list &&
        std::none_of(items.begin(), items.end(), [&](const Value& item) {
          return item.kind == Kind::trace_event ||
                 (item.kind == Kind::dict && is_trace_entry(vm, item));
        }))
      return false;
    Node& ln = vm.node(list);
    if (ln.kind == Kind::list) {
      if (!ln.items.empty())
        vm.fail("a list mixes trace entry dicts with other objects");
      ln.kind = Kind::trace_list;
      ln.aux = vm.new_event_list(!spool_);
      texts_.resize(ln.aux + 1);
      if (spool_)
        spools_.resize(ln.aux + 1);
    }
    const std::uint32_t events_index = vm.node(list).aux;
    FrameInterner interner(vm, keys_, out_.frames, notes_, odd_frames);
    for (const Value& item : items) {
      // A dict not converted yet is checked by convert(), which reads its keys anyway.
      if (!is_converted_or_dict(vm, item))
        vm.fail(not_a_trace_entry(vm, item));
      append(vm, item, events_index, interner);
    }
    return true;
  }

  std::optional<std::uint32_t> known_frame_stack(std::span<const std::uint32_t> frames) override {
    const std::optional<FrameStackId> id = out_.frames.find_stack(frames);
    return id ? std::optional<std::uint32_t>(id->value) : std::nullopt;
  }

  std::optional<Value> convert_entry(Machine& vm, Value list,
                                     std::span<const Value> pairs) override {
    const EntryFields f = fields_of(pairs);
    // What convert_fields would fail on, or read the checked way, goes the general way.
    auto plain = [](const Value* v) {
      return v != nullptr && v->kind == Kind::integer && v->i >= 0;
    };
    if (f.action == nullptr || f.action->kind != Kind::string || !plain(f.addr) || !plain(f.size) ||
        (f.stream != nullptr && !plain(f.stream)) ||
        (f.time_us != nullptr && f.time_us->kind != Kind::integer))
      return std::nullopt;
    const std::uint32_t events_index = vm.node(list).aux;
    FrameInterner interner(vm, keys_, out_.frames, notes_, odd_frames);
    const bool converted = convert_fields(vm, f, interner, events_index).has_value();
    return compact(vm, converted, events_index);
  }

  // compile_context / user_metadata of an event list, parallel to it (empty: none carried any).
  std::vector<TraceEntryText>& texts(std::uint32_t events_index) { return texts_[events_index]; }
  // The spooled form of an event list (read_snapshot_spooled).
  EventSpool& spool(std::uint32_t events_index) { return spools_[events_index]; }
  bool spooling() const { return spool_; }
  std::uint64_t unknown_actions() const { return unknown_actions_; }
  std::uint64_t odd_frames = 0;

 private:
  std::string not_a_trace_entry(Machine& vm, const Value& item) const {
    if (item.kind == Kind::dict && vm.node(item).kind == Kind::dict) {
      const Value* action = find_key(vm.node(item), keys_.action);
      if (action == nullptr)
        return "a trace entry dict needs an 'action' key (e.g. 'alloc')";
      return "a trace entry's 'action' must be a str (e.g. 'alloc'), found " +
             std::string(to_string(node_kind(vm, *action)));
    }
    return "a device trace holds a " + std::string(to_string(node_kind(vm, item))) +
           " where a trace entry dict (with an 'action' key) was expected";
  }

  // A dict with a str 'action', or an entry converted earlier and referenced again.
  bool is_trace_entry(Machine& vm, const Value& item) const {
    if (item.kind == Kind::trace_event)
      return true;
    if (item.kind != Kind::dict)
      return false;
    const Node& n = vm.node(item);
    if (n.kind == Kind::trace_event)
      return true;
    if (n.kind != Kind::dict)
      return false;
    const Value* a = find_key(n, keys_.action);
    return a != nullptr && a->kind == Kind::string;
  }

  // An entry converted earlier, or a dict still to check.
  static bool is_converted_or_dict(Machine& vm, const Value& item) {
    if (item.kind == Kind::trace_event)
      return true;
    if (item.kind != Kind::dict)
      return false;
    const Kind kind = vm.node(item).kind;
    return kind == Kind::trace_event || kind == Kind::dict;
  }

  void append(Machine& vm, const Value& item, std::uint32_t events_index, FrameInterner& interner) {
    // The same entry object twice (a valid pickle may share it): copy the converted event.
    std::optional<std::pair<std::uint32_t, std::uint64_t>> earlier;
    if (item.kind == Kind::trace_event)
      earlier.emplace(item.ref, static_cast<std::uint64_t>(item.i));
    else if (vm.node(item).kind == Kind::trace_event)
      earlier.emplace(vm.node(item).aux, vm.node(item).aux_index);
    if (earlier) {
      if (earlier->first == ~std::uint32_t{0})
        return;  // an entry with an unknown action, skipped again
      const TraceEvent copy = spool_ ? spools_[earlier->first].at(earlier->second)
                                     : vm.event_list(earlier->first)[earlier->second];
      const TraceEntryText text = earlier->second < texts_[earlier->first].size()
                                      ? texts_[earlier->first][earlier->second]
                                      : TraceEntryText{};
      push(vm, events_index, copy, text);
      return;
    }
    const bool converted = convert(vm, item, interner, events_index).has_value();
    vm.retire(item, compact(vm, converted, events_index));
  }

  std::size_t list_size(Machine& vm, std::uint32_t events_index) {
    return spool_ ? spools_[events_index].size() : vm.event_list(events_index).size();
  }

  void push(Machine& vm, std::uint32_t events_index, const TraceEvent& event, TraceEntryText text) {
    if (spool_) {
      spools_[events_index].push_back(event);
      return;
    }
    auto& events = vm.event_list(events_index);
    events.push_back(event);
    auto& texts = texts_[events_index];
    if (text.compile_context != 0 || text.user_metadata != 0) {
      texts.resize(events.size() - 1);
      texts.push_back(text);
    } else if (!texts.empty()) {
      texts.push_back(text);
    }
  }

  std::uint32_t text_id(Machine& vm, const Value& v) {
    std::string_view s = v.kind == Kind::string ? vm.str(v) : std::string_view("<non-str>");
    // Few distinct values ("N/A", a handful of compile ids): a small map suffices.
    auto it = text_ids_.find(s);
    if (it != text_ids_.end())
      return it->second;
    const auto id = static_cast<std::uint32_t>(out_.entry_texts.size());
    out_.entry_texts.emplace_back(s);
    text_ids_.emplace(out_.entry_texts.back(), id);
    return id;
  }

  // A trace entry's fields, from its keys and values in order: the last of a repeated key counts,
  // as Python keeps the last value.
  struct EntryFields {
    const Value* action = nullptr;
    const Value* addr = nullptr;
    const Value* size = nullptr;
    const Value* stream = nullptr;
    const Value* time_us = nullptr;
    const Value* frames = nullptr;
    const Value* compile_context = nullptr;
    const Value* user_metadata = nullptr;
    const Value* ignored = nullptr;  // a key the schema does not read
  };
  EntryFields fields_of(std::span<const Value> pairs) const {
    EntryFields f;
    for (std::size_t i = 0; i + 1 < pairs.size(); i += 2) {
      const Value& k = pairs[i];
      if (k.kind == Kind::string && k.ref < field_of_key_.size())
        f.*field_of_key_[k.ref] = &pairs[i + 1];
    }
    return f;
  }
  // Where each key's value goes, by the key's string id: the schema's keys were interned first,
  // so their ids are small, and any other key of those ids is `ignored`.
  static std::vector<const Value * EntryFields::*> fields_by_key(const Keys& keys) {
    const std::pair<std::uint32_t, const Value * EntryFields::*> schema[] = {
        {keys.action, &EntryFields::action},
        {keys.addr, &EntryFields::addr},
        {keys.device_free, &EntryFields::addr},
        {keys.size, &EntryFields::size},
        {keys.stream, &EntryFields::stream},
        {keys.time_us, &EntryFields::time_us},
        {keys.frames, &EntryFields::frames},
        {keys.compile_context, &EntryFields::compile_context},
        {keys.user_metadata, &EntryFields::user_metadata},
    };
    std::uint32_t largest = 0;
    for (const auto& [key, field] : schema)
      largest = std::max(largest, key);
    std::vector<const Value * EntryFields::*> out(largest + 1, &EntryFields::ignored);
    for (const auto& [key, field] : schema)
      out[key] = field;
    return out;
  }

  // What an entry's memo slot and holders read once it is converted: the event, or a skipped
  // entry (an unknown action).
  Value compact(Machine& vm, bool converted, std::uint32_t events_index) {
    Value replacement;
    replacement.kind = Kind::trace_event;
    if (converted) {
      replacement.ref = events_index;
      replacement.i = static_cast<std::int64_t>(list_size(vm, events_index) - 1);
    } else {
      replacement.ref = ~std::uint32_t{0};
    }
    return replacement;
  }

  std::optional<TraceEvent> convert(Machine& vm, const Value& item, FrameInterner& interner,
                                    std::uint32_t events_index) {
    const EntryFields f = fields_of(vm.node(item).items);
    if (f.action == nullptr || f.action->kind != Kind::string)
      vm.fail(not_a_trace_entry(vm, item));
    return convert_fields(vm, f, interner, events_index);
  }

  std::optional<TraceAction> action_named(std::uint32_t id, std::string_view name) {
    if (id >= action_of_string_.size()) {
      if (id >= kMaxActionStrings)
        return trace_action_from_string(name);
      action_of_string_.resize(id + 1, kUnparsed);
    }
    std::int8_t& action = action_of_string_[id];
    if (action == kUnparsed) {
      const std::optional<TraceAction> parsed = trace_action_from_string(name);
      action = parsed ? static_cast<std::int8_t>(*parsed) : kNoAction;
    }
    return action == kNoAction ? std::nullopt
                               : std::optional<TraceAction>(static_cast<TraceAction>(action));
  }
  // Strings ids past this parse each time: a file of many distinct strs keeps the table small.
  static constexpr std::uint32_t kMaxActionStrings = 1u << 16;

  // How an entry's errors name it.
  static std::string entry_named(std::string_view action) {
    return "trace entry '" + std::string(action) + "'";
  }
  [[gnu::noinline]] static std::uint64_t checked_u64(Machine& vm, const Value& v,
                                                     std::string_view action, const char* key) {
    return as_u64(vm, v, entry_named(action) + " '" + key + "'");
  }

  // An entry whose 'action' is a str.
  std::optional<TraceEvent> convert_fields(Machine& vm, const EntryFields& f,
                                           FrameInterner& interner, std::uint32_t events_index) {
    TraceEvent ev;
    ++out_.features.trace_entries;
    std::string_view name = vm.str(*f.action);
    const std::optional<TraceAction> parsed = action_named(f.action->ref, name);
    if (!parsed) {
      // A newer release's action (e.g. "annotate"): not an allocator event; skipped and counted.
      if (unknown_actions_++ == 0)
        notes_.push_back("trace entries with action '" + std::string(name) +
                         "' (not an allocator event) were skipped");
      return std::nullopt;
    }
    ev.action = *parsed;
    auto where = [&] { return entry_named(name); };
    if (f.addr == nullptr)
      vm.fail(where() + ": missing key '" +
              std::string(ev.action == TraceAction::oom ? "device_free" : "addr") + "'");
    if (f.size == nullptr)
      vm.fail(where() + ": missing key 'size'");
    // Plain non-negative ints are the rule; anything else takes the checked path, out of line.
    auto u64 = [&](const Value& v, const char* key) {
      return v.kind == Kind::integer && v.i >= 0 ? static_cast<std::uint64_t>(v.i)
                                                 : checked_u64(vm, v, name, key);
    };
    ev.addr = u64(*f.addr, "addr");
    ev.size = u64(*f.size, "size");
    if (f.stream != nullptr)
      ev.stream = StreamId{u64(*f.stream, "stream")};
    if (f.time_us != nullptr) {
      ++out_.features.entries_with_time;
      ev.time_us = f.time_us->kind == Kind::integer
                       ? f.time_us->i
                       : as_i64(vm, *f.time_us, where() + " 'time_us'");
    }
    // Spooled, the texts are only counted (push() keeps none).
    TraceEntryText text;
    if (f.compile_context != nullptr) {
      ++out_.features.entries_with_compile_context;
      if (!spool_)
        text.compile_context = text_id(vm, *f.compile_context);
    }
    if (f.user_metadata != nullptr) {
      ++out_.features.entries_with_user_metadata;
      if (!spool_)
        text.user_metadata = text_id(vm, *f.user_metadata);
    }
    if (f.frames != nullptr) {
      Value fv = *f.frames;  // the dict's item storage may move while frames are interned
      ev.frames = interner.stack(fv, "trace entry 'frames'", true);
    }
    push(vm, events_index, ev, text);
    return ev;
  }

  struct TextHash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const noexcept {
      return std::hash<std::string_view>{}(s);
    }
  };

  const Keys& keys_;
  const std::vector<const Value* EntryFields::*> field_of_key_ = fields_by_key(keys_);
  // The action a str names, by its string id (kUnparsed until asked): an entry's 'action' is a
  // GET of one of a few strs.
  static constexpr std::int8_t kUnparsed = -2;
  static constexpr std::int8_t kNoAction = -1;
  std::vector<std::int8_t> action_of_string_;
  Snapshot& out_;
  std::vector<std::string>& notes_;
  std::vector<std::vector<TraceEntryText>> texts_;
  std::unordered_map<std::string, std::uint32_t, TextHash, std::equal_to<>> text_ids_;
  std::uint64_t unknown_actions_ = 0;
  bool spool_ = false;
  std::vector<EventSpool> spools_;  // by event list, when spool_
};

}  // namespace fragscope::snapshot::reader_detail
