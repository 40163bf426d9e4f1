// Bodies of detail::size_index, the pool's (size, address)-ordered B+ tree.
#include <gpumem/detail/format.hpp>
#include <gpumem/detail/size_index.hpp>
#include <gpumem/error.hpp>

#include <algorithm>

namespace gpumem::detail {

void size_index::put_child(std::uint32_t n, std::uint32_t slot, entry e) noexcept
{
  put(nd(n), slot, e.size, e.ptr, e.value);
  nd(e.value).parent = n;
}

std::uint32_t size_index::slot_in_parent(std::uint32_t c) const noexcept
{
  auto const& p   = nd(nd(c).parent);
  std::uint32_t i = 0;
  while (p.items[i].value != c) { ++i; }
  return i;
}

// Up to the first ancestor with a further child, then down its leftmost path.
std::uint32_t size_index::next_leaf(std::uint32_t leaf) const noexcept
{
  auto n = leaf;
  for (;;) {
    if (nd(n).parent == none) { return none; }
    auto const slot = slot_in_parent(n);
    n               = nd(n).parent;
    if (slot + 1 < nd(n).count) {
      n = nd(n).items[slot + 1].value;
      break;
    }
  }
  while (!nd(n).leaf) { n = nd(n).items[0].value; }
  return n;
}

void size_index::add_free_nodes()
{
  while (free_count_ < height_ + 1) {
    nodes_.emplace_back();
    free_node(static_cast<std::uint32_t>(nodes_.size() - 1));
  }
}

std::uint32_t size_index::new_node(bool leaf) noexcept
{
  auto const n = free_head_;
  free_head_   = nd(n).items[0].value;
  --free_count_;
  nd(n).count  = 0;
  nd(n).leaf   = leaf;
  nd(n).parent = none;
  return n;
}

void size_index::free_node(std::uint32_t n) noexcept
{
  nd(n).count          = 0;
  nd(n).items[0].value = free_head_;
  free_head_           = n;
  ++free_count_;
}

void size_index::insert_slow(entry e) noexcept
{
  ++count_;
  if (root_ == none) {
    root_   = new_node(true);
    height_ = 1;
    put(nd(root_), 0, e.size, e.ptr, e.value);
    return;
  }
  auto n = root_;
  while (!nd(n).leaf) {
    auto& cur       = nd(n);
    auto const slot = route(cur, e.size, e.ptr);
    if (slot == 0 && less(e.size, e.ptr, cur.items[0].size, cur.items[0].ptr)) {
      cur.items[0].size = e.size;  // the new key is below every bound: child 0's bound comes down
      cur.items[0].ptr  = e.ptr;
    }
    n = cur.items[slot].value;
  }
  split_insert(n, e, count_less(nd(n), e.size, e.ptr));
}

// Puts e at `slot` of node x, splitting full nodes up to the root.
void size_index::split_insert(std::uint32_t x, entry e, std::uint32_t slot) noexcept
{
  for (;;) {
    bool const leaf = nd(x).leaf;
    if (nd(x).count < fanout) {
      if (leaf) {
        put(nd(x), slot, e.size, e.ptr, e.value);
      } else {
        put_child(x, slot, e);
      }
      return;
    }
    auto const y    = new_node(leaf);
    auto& xn        = nd(x);
    auto& yn        = nd(y);
    auto const half = fanout / 2;
    for (auto i = half; i < fanout; ++i) { yn.items[i - half] = xn.items[i]; }
    xn.count          = half;
    yn.count          = fanout - half;
    auto const target = slot <= half ? x : y;
    put(nd(target), slot <= half ? slot : slot - half, e.size, e.ptr, e.value);
    if (!leaf) {
      for (std::uint32_t i = 0; i < yn.count; ++i) { nd(yn.items[i].value).parent = y; }
      nd(e.value).parent = target;
    }
    e = entry{yn.items[0].size, yn.items[0].ptr, y};  // y's bound, to go into the parent after x
    if (xn.parent == none) {
      auto const r = new_node(false);
      put_child(r, 0, entry{xn.items[0].size, xn.items[0].ptr, x});
      put_child(r, 1, e);
      root_ = r;
      ++height_;
      return;
    }
    slot = slot_in_parent(x) + 1;
    x    = xn.parent;
  }
}

void size_index::fix_underflow(std::uint32_t n) noexcept
{
  while (n != none && nd(n).parent != none && nd(n).count < underfull) {
    n = merge_with_sibling(n);
  }
  while (height_ > 1 && nd(root_).count == 1) {  // a root with one child steps down
    auto const old   = root_;
    root_            = nd(old).items[0].value;
    nd(root_).parent = none;
    free_node(old);
    --height_;
  }
  if (count_ == 0 && root_ != none) {
    free_node(root_);
    root_   = none;
    height_ = 0;
  }
}

std::uint32_t size_index::merge_with_sibling(std::uint32_t n) noexcept
{
  auto const p    = nd(n).parent;
  auto& parent    = nd(p);
  auto const slot = slot_in_parent(n);
  if (nd(n).count == 0) {
    remove_slot(parent, slot);
    free_node(n);
    return p;
  }
  std::uint32_t left_slot{};
  if (slot > 0 && nd(parent.items[slot - 1].value).count + nd(n).count <= fanout) {
    left_slot = slot - 1;
  } else if (slot + 1 < parent.count &&
             nd(parent.items[slot + 1].value).count + nd(n).count <= fanout) {
    left_slot = slot;
  } else {
    return none;
  }
  auto const l = parent.items[left_slot].value;
  auto const r = parent.items[left_slot + 1].value;
  auto& ln     = nd(l);
  auto& rn     = nd(r);
  for (std::uint32_t i = 0; i < rn.count; ++i) {
    ln.items[ln.count + i] = rn.items[i];
    if (!ln.leaf) { nd(rn.items[i].value).parent = l; }
  }
  ln.count += rn.count;
  remove_slot(parent, left_slot + 1);
  free_node(r);
  return p;
}

size_index::entry size_index::largest() const noexcept
{
  auto n = root_;
  while (!nd(n).leaf) { n = nd(n).items[nd(n).count - 1].value; }
  auto const& leaf = nd(n);
  auto const last  = leaf.count - 1;
  return {leaf.items[last].size, leaf.items[last].ptr, leaf.items[last].value};
}

void size_index::clear() noexcept
{
  free_head_  = none;
  free_count_ = 0;
  for (auto n = static_cast<std::uint32_t>(nodes_.size()); n > 0; --n) { free_node(n - 1); }
  root_   = none;
  height_ = 0;
  count_  = 0;
}

void size_index::check_invariants() const
{
  std::size_t in_tree{};
  if (root_ != none) { in_tree = check_node(root_, 1, entry{}, nullptr); }
  GPUMEM_EXPECTS(in_tree == count_, logic_error,
                 format("size_index: count_ ", count_, " != entries in the leaves ", in_tree));
  std::size_t free{};
  for (auto n = free_head_; n != none && free <= nodes_.size(); n = nd(n).items[0].value) {
    ++free;
  }
  GPUMEM_EXPECTS(free == free_count_, logic_error,
                 format("size_index: free_count_ ", free_count_, " != free list length ", free));
  GPUMEM_EXPECTS(root_ == none || nd(root_).parent == none, logic_error,
                 "size_index: the root names a parent");
}

// Checks the subtree at n (at `depth`) whose keys must lie in [lo, hi); returns its entry count.
std::size_t size_index::check_node(std::uint32_t n, std::uint32_t depth, entry lo,
                                   entry const* hi) const
{
  auto const& cur     = nd(n);
  auto const in_range = [&](std::uint32_t i) {
    return !less(cur.items[i].size, cur.items[i].ptr, lo.size, lo.ptr) &&
           (hi == nullptr || less(cur.items[i].size, cur.items[i].ptr, hi->size, hi->ptr));
  };
  GPUMEM_EXPECTS(cur.count > 0 && cur.count <= fanout, logic_error,
                 format("size_index: node ", n, " holds ", cur.count, " entries"));
  GPUMEM_EXPECTS(cur.leaf == (depth == height_), logic_error,
                 format("size_index: node ", n, " at depth ", depth, " of ", height_,
                        cur.leaf ? " is a leaf" : " is not a leaf"));
  std::size_t total{};
  for (std::uint32_t i = 0; i < cur.count; ++i) {
    GPUMEM_EXPECTS(in_range(i) && (i == 0 || less(cur.items[i - 1].size, cur.items[i - 1].ptr,
                                                  cur.items[i].size, cur.items[i].ptr)),
                   logic_error, format("size_index: node ", n, " entry ", i, " out of order"));
    if (i > 0 && !cur.leaf) {
      auto const a = nd(cur.items[i - 1].value).count;
      auto const b = nd(cur.items[i].value).count;
      GPUMEM_EXPECTS(
          a >= underfull || b >= underfull, logic_error,
          format("size_index: adjacent children of node ", n, " hold ", a, " and ", b, " entries"));
    }
    if (cur.leaf) {
      ++total;
      continue;
    }
    GPUMEM_EXPECTS(nd(cur.items[i].value).parent == n, logic_error,
                   format("size_index: child ", cur.items[i].value, " of node ", n,
                          " names parent ", nd(cur.items[i].value).parent));
    entry const next{i + 1 < cur.count ? cur.items[i + 1].size : 0,
                     i + 1 < cur.count ? cur.items[i + 1].ptr : nullptr, 0};
    total +=
        check_node(cur.items[i].value, depth + 1, entry{cur.items[i].size, cur.items[i].ptr, 0},
                   i + 1 < cur.count ? &next : hi);
  }
  return total;
}

}  // namespace gpumem::detail
