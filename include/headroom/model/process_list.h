// A list whose items are each held by a shared pointer (a snapshot's processes): a sample between
// two walks of every process shares the unchanged ones with the snapshot before it (a pointer
// each, no copy), and two snapshots alive at once hold one copy of each process. Read like a
// vector; written only while the snapshot is built (copy on write: an item shared with another
// list is copied before it is changed, so a published snapshot never changes under its readers).
#pragma once

#include <compare>
#include <cstddef>
#include <initializer_list>
#include <iterator>
#include <memory>
#include <utility>
#include <vector>

namespace headroom {

template <typename T>
class SharedList {
 public:
  using Item = std::shared_ptr<const T>;

  class const_iterator {
   public:
    using iterator_category = std::random_access_iterator_tag;
    using value_type = T;
    using difference_type = std::ptrdiff_t;
    using pointer = const T*;
    using reference = const T&;

    const_iterator() = default;
    explicit const_iterator(typename std::vector<Item>::const_iterator it) : it_(it) {}
    reference operator*() const { return **it_; }
    pointer operator->() const { return it_->get(); }
    reference operator[](difference_type n) const { return *it_[n]; }
    const_iterator& operator++() { return ++it_, *this; }
    const_iterator operator++(int) { return const_iterator(it_++); }
    const_iterator& operator--() { return --it_, *this; }
    const_iterator operator--(int) { return const_iterator(it_--); }
    const_iterator& operator+=(difference_type n) { return it_ += n, *this; }
    const_iterator& operator-=(difference_type n) { return it_ -= n, *this; }
    friend const_iterator operator+(const_iterator a, difference_type n) { return a += n; }
    friend const_iterator operator+(difference_type n, const_iterator a) { return a += n; }
    friend const_iterator operator-(const_iterator a, difference_type n) { return a -= n; }
    friend difference_type operator-(const const_iterator& a, const const_iterator& b) { return a.it_ - b.it_; }
    friend auto operator<=>(const const_iterator&, const const_iterator&) = default;

   private:
    typename std::vector<Item>::const_iterator it_;
  };
  using iterator = const_iterator;  // writes go through at()/operator[] on a list being built

  SharedList() = default;
  SharedList(std::initializer_list<T> items) {
    for (const T& t : items) push_back(t);
  }
  SharedList(std::vector<T> items) {  // NOLINT(google-explicit-constructor): written like the vector it was
    items_.reserve(items.size());
    for (T& t : items) push_back(std::move(t));
  }

  std::size_t size() const { return items_.size(); }
  bool empty() const { return items_.empty(); }
  const T& operator[](std::size_t i) const { return *items_[i]; }
  const T& front() const { return *items_.front(); }
  const T& back() const { return *items_.back(); }
  const_iterator begin() const { return const_iterator(items_.begin()); }
  const_iterator end() const { return const_iterator(items_.end()); }

  // The item to change, copied first when another list shares it.
  T& operator[](std::size_t i) { return own(i); }
  T& front() { return own(0); }
  T& back() { return own(items_.size() - 1); }
  T& own(std::size_t i) {
    if (items_[i].use_count() > 1) items_[i] = std::make_shared<const T>(*items_[i]);
    // Held by this list alone: no reader elsewhere sees the change.
    return const_cast<T&>(*items_[i]);  // NOLINT(cppcoreguidelines-pro-type-const-cast)
  }

  // The shared pointer itself, to hand on to another list without a copy of the item.
  const Item& shared(std::size_t i) const { return items_[i]; }
  void push_shared(Item item) { items_.push_back(std::move(item)); }

  void reserve(std::size_t n) { items_.reserve(n); }
  void clear() { items_.clear(); }
  void resize(std::size_t n) {
    while (items_.size() > n) items_.pop_back();
    while (items_.size() < n) emplace_back();
  }
  void push_back(T t) { items_.push_back(std::make_shared<const T>(std::move(t))); }
  template <typename... Args>
  T& emplace_back(Args&&... args) {
    auto item = std::make_shared<T>(std::forward<Args>(args)...);
    T& ref = *item;
    items_.push_back(std::move(item));
    return ref;
  }
  const_iterator erase(const_iterator first, const_iterator last) {
    auto from = items_.begin() + (first - begin());
    return const_iterator(items_.erase(from, from + (last - first)));
  }
  const_iterator erase(const_iterator at) { return erase(at, at + 1); }
  template <typename Pred>
  std::size_t eraseIf(Pred pred) {
    return std::erase_if(items_, [&](const Item& item) { return pred(*item); });
  }

 private:
  std::vector<Item> items_;
};

}  // namespace headroom
