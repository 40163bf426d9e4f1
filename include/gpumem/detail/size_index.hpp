// gpumem/detail/size_index.hpp — free blocks ordered by (size, address): the pool's best-fit index
// (not API).
//
// A flat B+ tree: nodes of up to `fanout` entries, named by index into one vector (made on the
// first insert: an empty index is a few words), kept sorted; an internal node's entry i is (lower
// bound of child i's keys, child i), and every node names its parent (so a cursor is just a leaf
// and a slot). Best fit is one descent (lower_bound by size, lowest address among equal sizes);
// insert and erase are one descent plus a shift inside a node, with rare splits and merges. Nodes
// are recycled through a free list, so once the tree has reached its size nothing allocates:
// reserve() makes room for one insert (it and insert(), which calls it, are the only members that
// may throw).
//
// Invariants (check_invariants() throws logic_error naming the broken one):
//   count_ == number of leaf entries; every leaf is at depth height_ (root depth 1)
//   keys strictly increase along the leaves; child i's keys lie in [sep i, sep i+1) and within
//   its parent's range; every node but the root holds >= 1 entry
//   no two adjacent siblings both hold < fanout / 4 entries (so height_ <= log2(count_) + 2)
//   every child names its parent; nodes_.size() == nodes in the tree + free_count_
// Thread safety: none; the owner locks.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace gpumem::detail {

class size_index {
 public:
  static constexpr std::uint32_t fanout = 16;

  struct entry {
    std::size_t size{};
    char* ptr{};
    std::uint32_t value{};  ///< the owner's payload (the free list's record index)
  };

  /// A position in the tree (a leaf and a slot); invalidated by any change but its own use.
  class cursor {
   public:
    [[nodiscard]] bool valid() const noexcept { return leaf_ != none; }

   private:
    friend class size_index;
    cursor() = default;
    cursor(std::uint32_t leaf, std::uint32_t slot) : leaf_{leaf}, slot_{slot} {}
    std::uint32_t leaf_{none};
    std::uint32_t slot_{};
  };

  size_index() noexcept = default;

  [[nodiscard]] std::size_t size() const noexcept { return count_; }

  [[nodiscard]] bool empty() const noexcept { return count_ == 0; }

  /// The smallest entry with entry.size >= size (lowest address among equal sizes), or invalid.
  [[nodiscard]] cursor lower_bound(std::size_t size) const noexcept
  {
    if (root_ == none) { return {}; }
    auto const leaf = descend(size, nullptr);
    auto const slot = count_less(nd(leaf), size, nullptr);
    if (slot < nd(leaf).count) { return {leaf, slot}; }
    return {next_leaf(leaf), 0};
  }
  /// The entry with exactly this key, or invalid.
  [[nodiscard]] cursor find(std::size_t size, char const* ptr) const noexcept
  {
    if (root_ == none) { return {}; }
    auto const leaf = descend(size, ptr);
    auto const& n   = nd(leaf);
    auto const slot = count_less(n, size, ptr);
    if (slot == n.count || n.items[slot].size != size || n.items[slot].ptr != ptr) { return {}; }
    return {leaf, slot};
  }
  [[nodiscard]] entry at(cursor const& c) const noexcept
  {
    auto const& n = nd(c.leaf_);
    return n.items[c.slot_];
  }
  /// Removes the entry at `c` (which becomes invalid).
  void erase(cursor& c) noexcept
  {
    auto& n = nd(c.leaf_);
    remove_slot(n, c.slot_);
    --count_;
    if (n.count < underfull && (n.parent != none || count_ == 0)) { fix_underflow(c.leaf_); }
    c.leaf_ = none;
  }
  /// Gives the entry at `c` a new key, keeping its value (in place when the order allows; `c`
  /// becomes invalid). Needs a reserve() since the last insert.
  void rekey(cursor& c, std::size_t size, char* ptr) noexcept
  {
    auto& leaf      = nd(c.leaf_);
    auto const slot = c.slot_;
    // In place when the new key stays inside the leaf's order and range: above the previous
    // entry (or, for the first entry, not below the old key) and below the next one (or, for the
    // last entry, not above the old key).
    bool const grows = less(leaf.items[slot].size, leaf.items[slot].ptr, size, ptr);
    bool const lo_ok =
        slot > 0 ? less(leaf.items[slot - 1].size, leaf.items[slot - 1].ptr, size, ptr) : grows;
    bool const hi_ok = slot + 1 < leaf.count
                           ? less(size, ptr, leaf.items[slot + 1].size, leaf.items[slot + 1].ptr)
                           : !grows;
    if (lo_ok && hi_ok) {
      leaf.items[slot].size = size;
      leaf.items[slot].ptr  = ptr;
      c.leaf_               = none;
      return;
    }
    auto const value = leaf.items[slot].value;
    erase(c);
    insert_reserved({size, ptr, value});
  }
  /// Makes room so that the next insert or rekey allocates nothing. May throw (nothing changes).
  void reserve()
  {
    if (free_count_ < height_ + 1) { add_free_nodes(); }
  }
  /// Adds an entry whose key is not present. May throw bad_alloc (nothing changes then).
  void insert(entry e)
  {
    reserve();
    insert_reserved(e);
  }
  /// The largest entry; requires !empty().
  [[nodiscard]] entry largest() const noexcept;
  /// Calls f(entry) for every entry, in increasing order.
  template <class F>
  void for_each(F&& f) const
  {
    if (root_ != none) { visit(root_, f); }
  }
  /// Removes every entry (the nodes stay for reuse).
  void clear() noexcept;
  void check_invariants() const;

 private:
  static constexpr std::uint32_t none      = UINT32_MAX;
  static constexpr std::uint32_t underfull = fanout / 4;

  struct node {
    std::uint32_t count{};
    bool leaf{};
    std::uint32_t parent{none};
    std::array<entry, fanout> items;  // leaf: payload values; internal: child values; free node:
                                      // items[0].value is the next free node
  };

  [[nodiscard]] static bool less(std::size_t s1, char const* p1, std::size_t s2,
                                 char const* p2) noexcept
  {
    return s1 < s2 || (s1 == s2 && p1 < p2);
  }
  /// Entries of n with key < (s, p).
  [[nodiscard]] static std::uint32_t count_less(node const& n, std::size_t s,
                                                char const* p) noexcept
  {
    std::uint32_t i = 0;
    while (i < n.count && less(n.items[i].size, n.items[i].ptr, s, p)) { ++i; }
    return i;
  }
  /// The child slot of internal node n whose range holds (s, p): the last child whose lower bound
  /// is <= (s, p), or child 0 for keys below every bound.
  [[nodiscard]] static std::uint32_t route(node const& n, std::size_t s, char const* p) noexcept
  {
    std::uint32_t i = 1;
    while (i < n.count && !less(s, p, n.items[i].size, n.items[i].ptr)) { ++i; }
    return i - 1;
  }
  /// The leaf whose range holds (s, p).
  [[nodiscard]] std::uint32_t descend(std::size_t s, char const* p) const noexcept
  {
    auto n = root_;
    while (!nd(n).leaf) { n = nd(n).items[route(nd(n), s, p)].value; }
    return n;
  }
  /// The slot of child `c` in its parent.
  [[nodiscard]] std::uint32_t slot_in_parent(std::uint32_t c) const noexcept;
  /// The leaf after `leaf` in key order, or none.
  [[nodiscard]] std::uint32_t next_leaf(std::uint32_t leaf) const noexcept;
  void add_free_nodes();
  /// Puts an entry into internal node n, adopting the child it names.
  void put_child(std::uint32_t n, std::uint32_t slot, entry e) noexcept;
  static void put(node& n, std::uint32_t slot, std::size_t s, char* p, std::uint32_t v) noexcept
  {
    for (auto i = n.count; i > slot; --i) { n.items[i] = n.items[i - 1]; }
    n.items[slot] = entry{s, p, v};
    ++n.count;
  }
  static void remove_slot(node& n, std::uint32_t slot) noexcept
  {
    for (auto i = slot + 1; i < n.count; ++i) { n.items[i - 1] = n.items[i]; }
    --n.count;
  }

  void insert_reserved(entry e) noexcept
  {
    if (root_ == none || !nd(root_).leaf || nd(root_).count == fanout) {
      insert_slow(e);
      return;
    }
    ++count_;  // one leaf with room: the common case of a small class
    auto& n = nd(root_);
    put(n, count_less(n, e.size, e.ptr), e.size, e.ptr, e.value);
  }
  void insert_slow(entry e) noexcept;
  void split_insert(std::uint32_t x, entry e, std::uint32_t slot) noexcept;
  void fix_underflow(std::uint32_t n) noexcept;
  /// n (not the root) is underfull: drops it when empty, else merges it with a sibling that has
  /// room. Returns the parent when it lost an entry, else none.
  std::uint32_t merge_with_sibling(std::uint32_t n) noexcept;
  [[nodiscard]] std::uint32_t new_node(bool leaf) noexcept;
  void free_node(std::uint32_t n) noexcept;

  template <class F>
  void visit(std::uint32_t n, F& f) const
  {
    auto const& cur = nd(n);
    for (std::uint32_t i = 0; i < cur.count; ++i) {
      if (cur.leaf) {
        f(cur.items[i]);
      } else {
        visit(cur.items[i].value, f);
      }
    }
  }
  std::size_t check_node(std::uint32_t n, std::uint32_t depth, entry lo, entry const* hi) const;

  node& nd(std::uint32_t n) noexcept { return nodes_[n]; }
  [[nodiscard]] node const& nd(std::uint32_t n) const noexcept { return nodes_[n]; }

  // An empty class costs these few words (a pool keeps 256 classes per stream): nodes are made
  // on the first insert.
  std::uint32_t root_{none};
  std::uint32_t height_{};         // levels; 0 when empty
  std::uint32_t free_head_{none};  // first free node
  std::uint32_t free_count_{};     // == nodes_.size() - nodes in the tree
  std::size_t count_{};            // == entries in the leaves
  std::vector<node> nodes_;        // node n is nodes_[n]
};

}  // namespace gpumem::detail
