// Bodies of the suballocators' free lists (coalescing, fixed-size) and of the allocation table's
// map.
#include <gpumem/detail/allocation_table.hpp>
#include <gpumem/detail/coalescing_free_list.hpp>
#include <gpumem/detail/fixed_size_free_list.hpp>
#include <gpumem/detail/format.hpp>
#include <gpumem/error.hpp>

#include <algorithm>
#include <bit>
#include <iterator>

namespace gpumem::detail {

// -- coalescing_free_list -------------------------------------------------------------------------

std::size_t coalescing_free_list::class_of(std::size_t size) noexcept
{
  auto const v = size >> 8;  // in units of 256 bytes (the pool's alignment)
  if (v < 32) { return v; }
  auto const e = static_cast<std::size_t>(std::bit_width(v)) - 1;  // 5 <= e <= 55
  return 32 + (e - 5) * 4 + ((v >> (e - 2)) & 3);                  // 4 classes per octave
}

std::size_t coalescing_free_list::next_nonempty(std::size_t c) const noexcept
{
  for (auto w = c / 64; w < nonempty_.size(); ++w) {
    auto bits = nonempty_[w];
    if (w == c / 64) { bits &= ~std::uint64_t{0} << (c % 64); }
    if (bits != 0) { return w * 64 + static_cast<std::size_t>(std::countr_zero(bits)); }
  }
  return classes;
}

void coalescing_free_list::add_size(size_node node)
{
  auto const c = class_of(node.value().first);
  by_size_[c].insert(std::move(node));
  nonempty_[c / 64] |= std::uint64_t{1} << (c % 64);
  ++size_count_;
}

coalescing_free_list::size_node coalescing_free_list::remove_size(
    size_set::const_iterator it) noexcept
{
  auto const c = class_of(it->first);
  auto node    = by_size_[c].extract(it);
  if (by_size_[c].empty()) { nonempty_[c / 64] &= ~(std::uint64_t{1} << (c % 64)); }
  --size_count_;
  return node;
}

free_block coalescing_free_list::take(std::size_t size)
{
  auto c   = class_of(size);
  auto fit = by_size_[c].lower_bound(size_key{size, nullptr});
  if (fit == by_size_[c].end()) {  // nothing in the request's class: the next class's smallest
    c = next_nonempty(c + 1);
    if (c == classes) { return {}; }
    fit = by_size_[c].begin();
  }
  auto const [block_size, ptr] = *fit;
  auto* const start            = by_start_.find(ptr);
  auto const chunk             = start->chunk;
  free_bytes_ -= size;
  auto node = remove_size(fit);
  if (block_size == size) {
    if (spare_size_.empty()) { spare_size_ = std::move(node); }
    by_start_.erase(ptr);
    by_end_.erase(ptr + size);
    return {ptr, size, chunk};
  }
  // Cut from the high end: the remainder keeps its address, only its size and end change.
  auto const rest = block_size - size;
  start->size     = rest;
  by_end_.erase(ptr + block_size);
  by_end_.insert({ptr + rest, rest, chunk});  // no growth: one entry out, one in
  node.value() = size_key{rest, ptr};         // re-keyed in place: no allocation
  add_size(std::move(node));
  return {ptr + rest, size, chunk};
}

void coalescing_free_list::insert(free_block block)
{
  free_block prev{};
  free_block next{};
  if (auto const* p = by_end_.find(block.ptr); p != nullptr && p->chunk == block.chunk) {
    prev = {block.ptr - p->size, p->size, p->chunk};
  }
  if (auto const* n = by_start_.find(block.end()); n != nullptr && n->chunk == block.chunk) {
    next = *n;
  }
  if (prev.valid()) {
    auto const size = prev.size + block.size + next.size;
    if (next.valid()) { erase(next); }
    resize(prev.ptr, prev.size, size);
    rekey_size(prev.size, prev.ptr, size, prev.ptr);
  } else if (next.valid()) {
    auto const size = block.size + next.size;
    by_start_.erase(next.ptr);
    by_start_.insert({block.ptr, size, block.chunk});  // no growth: one entry out, one in
    by_end_.find(next.end())->size = size;
    rekey_size(next.size, next.ptr, size, block.ptr);
  } else {
    emplace(block);
  }
  free_bytes_ += block.size;
}

void coalescing_free_list::resize(char* ptr, std::size_t old_size, std::size_t new_size) noexcept
{
  auto* b          = by_start_.find(ptr);
  b->size          = new_size;
  auto const chunk = b->chunk;
  by_end_.erase(ptr + old_size);
  by_end_.insert({ptr + new_size, new_size, chunk});  // no growth: one entry out, one in
}

void coalescing_free_list::erase(free_block b) noexcept
{
  auto const c = class_of(b.size);
  auto node    = remove_size(by_size_[c].find(size_key{b.size, b.ptr}));
  if (spare_size_.empty()) { spare_size_ = std::move(node); }
  by_start_.erase(b.ptr);
  by_end_.erase(b.end());
}

void coalescing_free_list::emplace(free_block block)
{
  // Everything that may allocate comes first, so that a failure leaves the list unchanged.
  by_start_.reserve(by_start_.size() + 1);
  by_end_.reserve(by_end_.size() + 1);
  if (spare_size_.empty()) {
    auto const c = class_of(block.size);
    by_size_[c].emplace(block.size, block.ptr);
    nonempty_[c / 64] |= std::uint64_t{1} << (c % 64);
    ++size_count_;
  } else {
    spare_size_.value() = size_key{block.size, block.ptr};
    add_size(std::move(spare_size_));
  }
  by_start_.insert(block);
  by_end_.insert({block.end(), block.size, block.chunk});
}

void coalescing_free_list::merge(coalescing_free_list& other)
{
  other.for_each([this](free_block b) { insert(b); });
  other.clear();
}

free_stats coalescing_free_list::stats() const noexcept
{
  std::size_t largest{};
  for (auto c = classes; c > 0; --c) {
    if (!by_size_[c - 1].empty()) {
      largest = by_size_[c - 1].rbegin()->first;
      break;
    }
  }
  return {free_bytes_, size_count_, largest};
}

void coalescing_free_list::clear() noexcept
{
  by_start_.clear();
  by_end_.clear();
  for (auto& s : by_size_) { s.clear(); }
  nonempty_.fill(0);
  size_count_ = 0;
  free_bytes_ = 0;
}

void coalescing_free_list::rekey_size(std::size_t old_size, char* old_ptr, std::size_t new_size,
                                      char* new_ptr)
{
  auto node    = remove_size(by_size_[class_of(old_size)].find(size_key{old_size, old_ptr}));
  node.value() = size_key{new_size, new_ptr};
  add_size(std::move(node));
}

void coalescing_free_list::check_invariants() const
{
  std::size_t in_classes{};
  for (std::size_t c = 0; c < classes; ++c) {
    in_classes += by_size_[c].size();
    bool const bit = ((nonempty_[c / 64] >> (c % 64)) & 1) != 0;
    GPUMEM_EXPECTS(bit == !by_size_[c].empty(), logic_error,
                   format("coalescing_free_list: nonempty_ bit ", c, " is ", bit, " but class ", c,
                          " holds ", by_size_[c].size(), " blocks"));
  }
  GPUMEM_EXPECTS(in_classes == size_count_, logic_error,
                 format("coalescing_free_list: size_count_ ", size_count_,
                        " != blocks in the size classes ", in_classes));
  GPUMEM_EXPECTS(size_count_ == by_start_.size() && by_start_.size() == by_end_.size(), logic_error,
                 format("coalescing_free_list: size_count_ ", size_count_, ", by_start_.size() ",
                        by_start_.size(), ", by_end_.size() ", by_end_.size(), " differ"));
  std::vector<free_block> blocks;
  blocks.reserve(by_start_.size());
  for_each([&](free_block b) { blocks.push_back(b); });
  std::sort(blocks.begin(), blocks.end(),
            [](free_block const& a, free_block const& b) { return a.ptr < b.ptr; });
  std::size_t sum{};
  free_block prev{};
  for (auto const& b : blocks) {
    GPUMEM_EXPECTS(
        by_size_[class_of(b.size)].contains(size_key{b.size, b.ptr}), logic_error,
        format("coalescing_free_list: block ", ptr_str(b.ptr), " missing from by_size_"));
    auto const* e = by_end_.find(b.end());
    GPUMEM_EXPECTS(e != nullptr && e->size == b.size && e->chunk == b.chunk, logic_error,
                   format("coalescing_free_list: block ", ptr_str(b.ptr), " (", b.size,
                          " B) missing from by_end_"));
    GPUMEM_EXPECTS(b.size > 0, logic_error, "coalescing_free_list: empty block");
    if (prev.valid()) {
      GPUMEM_EXPECTS(prev.end() <= b.ptr, logic_error,
                     format("coalescing_free_list: blocks overlap at ", ptr_str(b.ptr)));
      GPUMEM_EXPECTS(!(prev.end() == b.ptr && prev.chunk == b.chunk), logic_error,
                     format("coalescing_free_list: adjacent blocks of chunk ", b.chunk, " at ",
                            ptr_str(b.ptr), " not coalesced"));
    }
    sum += b.size;
    prev = b;
  }
  GPUMEM_EXPECTS(
      sum == free_bytes_, logic_error,
      format("coalescing_free_list: free_bytes_ ", free_bytes_, " != sum of block sizes ", sum));
}

// -- fixed_size_free_list -------------------------------------------------------------------------

free_block fixed_size_free_list::take(std::size_t)
{
  if (blocks_.empty()) { return {}; }
  auto const b = blocks_.back();
  blocks_.pop_back();
  return b;
}

void fixed_size_free_list::insert_chunk(free_block chunk)
{
  auto const count = chunk.size / block_size_;
  blocks_.reserve(blocks_.size() + count);
  // Pushed high address first so that the lowest block is handed out first.
  for (auto i = count; i > 0; --i) {
    blocks_.push_back({chunk.ptr + (i - 1) * block_size_, block_size_, chunk.chunk});
  }
}

void fixed_size_free_list::merge(fixed_size_free_list& other)
{
  blocks_.insert(blocks_.end(), other.blocks_.begin(), other.blocks_.end());
  other.blocks_.clear();
}

free_stats fixed_size_free_list::stats() const noexcept
{
  return {blocks_.size() * block_size_, blocks_.size(), blocks_.empty() ? 0 : block_size_};
}

void fixed_size_free_list::check_invariants() const
{
  std::vector<char*> ptrs;
  ptrs.reserve(blocks_.size());
  for (auto const& b : blocks_) {
    GPUMEM_EXPECTS(b.size == block_size_, logic_error,
                   format("fixed_size_free_list: block ", ptr_str(b.ptr), " has size ", b.size,
                          " != block_size_ ", block_size_));
    ptrs.push_back(b.ptr);
  }
  std::sort(ptrs.begin(), ptrs.end());
  auto const dup = std::adjacent_find(ptrs.begin(), ptrs.end());
  GPUMEM_EXPECTS(dup == ptrs.end(), logic_error,
                 format("fixed_size_free_list: block ", ptr_str(dup == ptrs.end() ? nullptr : *dup),
                        " is free twice"));
}

}  // namespace gpumem::detail

// -- block_map (allocation_table's shard map) ---------------------------------------------------

namespace gpumem::detail {

void block_map::insert(free_block b)
{
  if ((count_ + 1) * 2 > slots_.size()) { grow(std::max<std::size_t>(64, slots_.size() * 2)); }
  auto const mask = slots_.size() - 1;
  auto i          = home(b.ptr);
  while (slots_[i].ptr != nullptr) { i = (i + 1) & mask; }
  slots_[i] = b;
  ++count_;
}

std::optional<free_block> block_map::erase(char* key)
{
  if (slots_.empty()) { return std::nullopt; }
  auto const mask = slots_.size() - 1;
  auto i          = home(key);
  while (slots_[i].ptr != key) {
    if (slots_[i].ptr == nullptr) { return std::nullopt; }
    i = (i + 1) & mask;
  }
  auto const found = slots_[i];
  // Backward shift: move later members of the probe run into the hole when their home allows.
  for (auto j = (i + 1) & mask; slots_[j].ptr != nullptr; j = (j + 1) & mask) {
    auto const h       = home(slots_[j].ptr);
    bool const movable = i <= j ? (h <= i || h > j) : (h <= i && h > j);
    if (movable) {
      slots_[i] = slots_[j];
      i         = j;
    }
  }
  slots_[i] = free_block{};
  --count_;
  return found;
}

free_block const* block_map::find(char const* key) const noexcept
{
  if (slots_.empty() || key == nullptr) { return nullptr; }
  auto const mask = slots_.size() - 1;
  for (auto i = home(key);; i = (i + 1) & mask) {
    if (slots_[i].ptr == key) { return &slots_[i]; }
    if (slots_[i].ptr == nullptr) { return nullptr; }
  }
}

void block_map::reserve(std::size_t n)
{
  auto slots = std::max<std::size_t>(64, slots_.size());
  while (n * 2 > slots) { slots *= 2; }
  if (slots != slots_.size()) { grow(slots); }
}

void block_map::grow(std::size_t slots)
{
  std::vector<free_block> old(slots);
  old.swap(slots_);
  count_ = 0;
  for (auto const& b : old) {
    if (b.ptr != nullptr) { insert(b); }
  }
}

}  // namespace gpumem::detail
