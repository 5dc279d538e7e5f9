// A list whose items are each held by a shared pointer (a snapshot's processes): a sample between
// two walks of every process shares the unchanged ones with the snapshot before it (a pointer
// each, no copy), and two snapshots alive at once hold one copy of each process. Read like a
// vector; written only while the snapshot is built (copy on write: an item shared with another
// list is copied before it is changed, so a published snapshot never changes under its readers).
//
// The pointers are kept in chunks of kChunk, each shared too: a copy of the list copies a pointer
// a chunk (not one per item), a write copies the one chunk it lands in, and two lists that share
// most chunks are compared, or let go, a chunk at a time.
#pragma once

#include <compare>
#include <cstddef>
#include <initializer_list>
#include <iterator>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

namespace headroom {

template <typename T>
class SharedList {
 public:
  using Item = std::shared_ptr<const T>;
  static constexpr std::size_t kChunk = 64;

  class const_iterator {
   public:
    using iterator_category = std::random_access_iterator_tag;
    using value_type = T;
    using difference_type = std::ptrdiff_t;
    using pointer = const T*;
    using reference = const T&;

    const_iterator() = default;
    const_iterator(const SharedList* list, std::size_t at) : list_(list), at_(at) {}
    reference operator*() const { return (*list_)[at_]; }
    pointer operator->() const { return &(*list_)[at_]; }
    reference operator[](difference_type n) const { return (*list_)[at_ + static_cast<std::size_t>(n)]; }
    const_iterator& operator++() { return ++at_, *this; }
    const_iterator operator++(int) { return const_iterator(list_, at_++); }
    const_iterator& operator--() { return --at_, *this; }
    const_iterator operator--(int) { return const_iterator(list_, at_--); }
    const_iterator& operator+=(difference_type n) { return at_ += static_cast<std::size_t>(n), *this; }
    const_iterator& operator-=(difference_type n) { return at_ -= static_cast<std::size_t>(n), *this; }
    friend const_iterator operator+(const_iterator a, difference_type n) { return a += n; }
    friend const_iterator operator+(difference_type n, const_iterator a) { return a += n; }
    friend const_iterator operator-(const_iterator a, difference_type n) { return a -= n; }
    friend difference_type operator-(const const_iterator& a, const const_iterator& b) {
      return static_cast<difference_type>(a.at_) - static_cast<difference_type>(b.at_);
    }
    friend bool operator==(const const_iterator& a, const const_iterator& b) { return a.at_ == b.at_; }
    friend auto operator<=>(const const_iterator& a, const const_iterator& b) { return a.at_ <=> b.at_; }

   private:
    const SharedList* list_ = nullptr;
    std::size_t at_ = 0;
  };
  // Writes go through operator[]/own() on a list being built. An iterator names its list and an
  // index: a list moved (or the snapshot holding it) leaves its iterators behind.
  using iterator = const_iterator;

  SharedList() = default;
  SharedList(const SharedList&) = default;
  SharedList& operator=(const SharedList&) = default;
  // A list moved from is empty, as a vector is.
  SharedList(SharedList&& o) noexcept : chunks_(std::move(o.chunks_)), size_(std::exchange(o.size_, 0)) {}
  SharedList& operator=(SharedList&& o) noexcept {
    chunks_ = std::move(o.chunks_);
    size_ = std::exchange(o.size_, 0);
    o.chunks_.clear();
    return *this;
  }
  ~SharedList() = default;
  SharedList(std::initializer_list<T> items) {
    for (const T& t : items) push_back(t);
  }
  SharedList(std::vector<T> items) {  // NOLINT(google-explicit-constructor): written like the vector it was
    reserve(items.size());
    for (T& t : items) push_back(std::move(t));
  }

  std::size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  const T& operator[](std::size_t i) const { return *shared(i); }
  const T& front() const { return (*this)[0]; }
  const T& back() const { return (*this)[size_ - 1]; }
  const_iterator begin() const { return const_iterator(this, 0); }
  const_iterator end() const { return const_iterator(this, size_); }

  // The item to change, copied first when another list shares it.
  T& operator[](std::size_t i) { return own(i); }
  T& front() { return own(0); }
  T& back() { return own(size_ - 1); }
  T& own(std::size_t i) {
    Item& item = ownChunk(i / kChunk)[i % kChunk];
    if (item.use_count() > 1) item = std::make_shared<const T>(*item);
    // Held by this list alone: no reader elsewhere sees the change.
    return const_cast<T&>(*item);  // NOLINT(cppcoreguidelines-pro-type-const-cast)
  }

  // The shared pointer itself, to hand on to another list without a copy of the item.
  const Item& shared(std::size_t i) const { return (*chunks_[i / kChunk])[i % kChunk]; }
  void push_shared(Item item) {
    if (size_ % kChunk == 0) {
      chunks_.push_back(std::make_shared<Chunk>());
      chunks_.back()->reserve(kChunk);
    }
    ownChunk(chunks_.size() - 1).push_back(std::move(item));
    ++size_;
  }
  // Item `i` replaced by another (the list's own chunk written, the one it shared left as it was).
  void set_shared(std::size_t i, Item item) { ownChunk(i / kChunk)[i % kChunk] = std::move(item); }

  // The indices at which this list's items are not those `before` holds, in order; nothing when
  // the two differ in size or in more than `at_most` items. A chunk the two share is not looked into.
  std::optional<std::vector<std::size_t>> changedFrom(const SharedList& before, std::size_t at_most) const {
    if (before.size_ != size_) return std::nullopt;
    std::vector<std::size_t> changed;
    for (std::size_t c = 0; c < chunks_.size(); ++c) {
      if (chunks_[c] == before.chunks_[c]) continue;
      const Chunk& mine = *chunks_[c];
      const Chunk& theirs = *before.chunks_[c];
      for (std::size_t k = 0; k < mine.size(); ++k) {
        if (mine[k] == theirs[k]) continue;
        if (changed.size() == at_most) return std::nullopt;
        changed.push_back(c * kChunk + k);
      }
    }
    return changed;
  }

  void reserve(std::size_t n) { chunks_.reserve((n + kChunk - 1) / kChunk); }
  void clear() {
    chunks_.clear();
    size_ = 0;
  }
  void resize(std::size_t n) {
    if (n < size_) {
      std::vector<Item> items = takeAll();
      items.resize(n);
      putAll(std::move(items));
    }
    while (size_ < n) emplace_back();
  }
  void push_back(T t) { push_shared(std::make_shared<const T>(std::move(t))); }
  template <typename... Args>
  T& emplace_back(Args&&... args) {
    auto item = std::make_shared<T>(std::forward<Args>(args)...);
    T& ref = *item;
    push_shared(std::move(item));
    return ref;
  }
  const_iterator erase(const_iterator first, const_iterator last) {
    const auto from = static_cast<std::ptrdiff_t>(first - begin());
    std::vector<Item> items = takeAll();
    items.erase(items.begin() + from, items.begin() + from + (last - first));
    putAll(std::move(items));
    return begin() + from;
  }
  const_iterator erase(const_iterator at) { return erase(at, at + 1); }
  template <typename Pred>
  std::size_t eraseIf(Pred pred) {
    std::vector<Item> items = takeAll();
    const std::size_t n = std::erase_if(items, [&](const Item& item) { return pred(*item); });
    putAll(std::move(items));
    return n;
  }

 private:
  using Chunk = std::vector<Item>;

  // Chunk `c`, copied first when another list shares it. A count of 1 is this list's alone: the
  // list being built is seen by no other thread, and whatever it shares with a published list is
  // counted by that list too for as long as it is read.
  Chunk& ownChunk(std::size_t c) {
    if (chunks_[c].use_count() > 1) chunks_[c] = std::make_shared<Chunk>(*chunks_[c]);
    return *chunks_[c];
  }
  std::vector<Item> takeAll() const {
    std::vector<Item> items;
    items.reserve(size_);
    for (const auto& chunk : chunks_) items.insert(items.end(), chunk->begin(), chunk->end());
    return items;
  }
  void putAll(std::vector<Item> items) {
    clear();
    reserve(items.size());
    for (Item& item : items) push_shared(std::move(item));
  }

  std::vector<std::shared_ptr<Chunk>> chunks_;  // each full but the last
  std::size_t size_ = 0;
};

}  // namespace headroom
