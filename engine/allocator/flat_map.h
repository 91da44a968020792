#pragma once
// A small open-addressing hash map from non-zero 64-bit keys (device addresses, tensor ids + 1)
// to values, for the allocator's hot paths: one flat array, linear probing, backward-shift
// deletion (no tombstones), grown at half load. Key 0 marks an empty slot and cannot be stored.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <utility>
#include <vector>

namespace fragscope::alloc {

template <typename Value>
class FlatMap64 {
 public:
  explicit FlatMap64(std::size_t capacity = 1024) { rehash(round_capacity(capacity)); }

  std::size_t size() const { return size_; }

  Value* find(std::uint64_t key) {
    for (std::size_t i = index(key);; i = (i + 1) & mask_) {
      if (slots_[i].key == key)
        return &slots_[i].value;
      if (slots_[i].key == 0)
        return nullptr;
    }
  }
  const Value* find(std::uint64_t key) const { return const_cast<FlatMap64*>(this)->find(key); }
  bool contains(std::uint64_t key) const { return find(key) != nullptr; }
  // Starts loading the slot where a probe for `key` begins (a hint; changes nothing).
  void prefetch(std::uint64_t key) const { __builtin_prefetch(&slots_[index(key)]); }

  // Inserts or overwrites; returns false when the key was already present.
  bool insert_or_assign(std::uint64_t key, Value value) {
    if (key == 0)
      throw std::invalid_argument("FlatMap64: key 0 is reserved");
    if ((size_ + 1) * 2 > slots_.size())
      rehash(slots_.size() * 2);
    for (std::size_t i = index(key);; i = (i + 1) & mask_) {
      if (slots_[i].key == key) {
        slots_[i].value = value;
        return false;
      }
      if (slots_[i].key == 0) {
        slots_[i] = Slot{key, value};
        ++size_;
        return true;
      }
    }
  }

  bool erase(std::uint64_t key) {
    std::size_t hole = index(key);
    while (slots_[hole].key != key) {
      if (slots_[hole].key == 0)
        return false;
      hole = (hole + 1) & mask_;
    }
    // Shift later members of the probe run back into the hole, unless they sit at or after
    // their home slot (cyclically) relative to the hole.
    for (std::size_t j = (hole + 1) & mask_; slots_[j].key != 0; j = (j + 1) & mask_) {
      const std::size_t home = index(slots_[j].key);
      const bool stays = hole <= j ? (hole < home && home <= j) : (hole < home || home <= j);
      if (stays)
        continue;
      slots_[hole] = slots_[j];
      hole = j;
    }
    slots_[hole] = Slot{};
    --size_;
    return true;
  }

  // Calls f(key, value) for every entry, in no particular order.
  template <typename F>
  void for_each(F f) const {
    for (const Slot& slot : slots_)
      if (slot.key != 0)
        f(slot.key, slot.value);
  }

  void clear() {
    for (Slot& slot : slots_)
      slot = Slot{};
    size_ = 0;
  }

 private:
  struct Slot {
    std::uint64_t key = 0;
    Value value{};
  };

  static std::size_t round_capacity(std::size_t n) {
    std::size_t capacity = 16;
    while (capacity < n)
      capacity *= 2;
    return capacity;
  }
  std::size_t index(std::uint64_t key) const {
    key ^= key >> 33;
    key *= 0xff51afd7ed558ccdULL;
    key ^= key >> 33;
    return static_cast<std::size_t>(key) & mask_;
  }
  void rehash(std::size_t capacity) {
    std::vector<Slot> old = std::move(slots_);
    slots_.assign(capacity, Slot{});
    mask_ = capacity - 1;
    size_ = 0;
    for (const Slot& slot : old)
      if (slot.key != 0)
        insert_or_assign(slot.key, slot.value);
  }

  std::vector<Slot> slots_;
  std::size_t mask_ = 0;
  std::size_t size_ = 0;
};

// FlatMap64 for keys read from a file, which may be 0 (a hostile trace's address): key 0 is
// kept beside the table.
template <typename Value>
class FlatAddressMap {
 public:
  explicit FlatAddressMap(std::size_t capacity = 1024) : map_(capacity) {}

  std::size_t size() const { return map_.size() + (zero_ ? 1 : 0); }
  Value* find(std::uint64_t key) {
    if (key == 0)
      return zero_ ? &*zero_ : nullptr;
    return map_.find(key);
  }
  const Value* find(std::uint64_t key) const {
    return const_cast<FlatAddressMap*>(this)->find(key);
  }
  bool contains(std::uint64_t key) const { return find(key) != nullptr; }
  // Inserts unless the key is present (like std::unordered_map::emplace); true if inserted.
  bool emplace(std::uint64_t key, Value value) {
    if (contains(key))
      return false;
    insert_or_assign(key, std::move(value));
    return true;
  }
  void insert_or_assign(std::uint64_t key, Value value) {
    if (key == 0)
      zero_ = std::move(value);
    else
      map_.insert_or_assign(key, std::move(value));
  }
  bool erase(std::uint64_t key) {
    if (key != 0)
      return map_.erase(key);
    const bool had = zero_.has_value();
    zero_.reset();
    return had;
  }
  template <typename F>
  void for_each(F f) const {
    if (zero_)
      f(std::uint64_t{0}, *zero_);
    map_.for_each(f);
  }
  void clear() {
    map_.clear();
    zero_.reset();
  }

 private:
  FlatMap64<Value> map_;
  std::optional<Value> zero_;
};

}  // namespace fragscope::alloc
