// Bodies of the suballocators' free lists (coalescing, fixed-size) and of the allocation table's
// map.
#include <gpumem/detail/allocation_table.hpp>
#include <gpumem/detail/coalescing_free_list.hpp>
#include <gpumem/detail/fixed_size_free_list.hpp>
#include <gpumem/detail/format.hpp>
#include <gpumem/error.hpp>

#include <algorithm>
#include <iterator>

namespace gpumem::detail {

// -- coalescing_free_list -------------------------------------------------------------------------

free_block coalescing_free_list::take(std::size_t size)
{
  auto const fit = by_size_.lower_bound(size_key{size, nullptr});
  if (fit == by_size_.end()) { return {}; }
  auto const [block_size, ptr] = *fit;
  auto const at                = by_addr_.find(ptr);
  auto const chunk             = at->second.chunk;
  free_bytes_ -= size;
  if (block_size == size) {
    keep_spares(by_addr_.extract(at), by_size_.extract(fit));
    return {ptr, size, chunk};
  }
  // Cut from the high end: the remainder keeps its address, only its size key changes.
  auto const rest = block_size - size;
  at->second.size = rest;
  auto node       = by_size_.extract(fit);  // re-keyed in place: no search, no allocation
  node.value()    = size_key{rest, ptr};
  by_size_.insert(std::move(node));
  return {ptr + rest, size, chunk};
}

void coalescing_free_list::insert(free_block block)
{
  free_bytes_ += block.size;
  auto next = by_addr_.lower_bound(block.ptr);
  bool const join_next =
      next != by_addr_.end() && next->first == block.end() && next->second.chunk == block.chunk;
  auto prev            = next == by_addr_.begin() ? by_addr_.end() : std::prev(next);
  bool const join_prev = prev != by_addr_.end() && prev->first + prev->second.size == block.ptr &&
                         prev->second.chunk == block.chunk;
  if (join_prev) {
    auto const old_size = prev->second.size;
    prev->second.size += block.size;
    if (join_next) {
      prev->second.size += next->second.size;
      erase(next);
    }
    rekey_size(old_size, prev->first, prev->second.size, prev->first);
  } else if (join_next) {
    auto node      = by_addr_.extract(next);
    auto const old = std::pair{node.mapped().size, node.key()};
    node.key()     = block.ptr;
    node.mapped().size += block.size;
    rekey_size(old.first, old.second, node.mapped().size, block.ptr);
    by_addr_.insert(std::move(node));
  } else {
    emplace(block);
  }
}

void coalescing_free_list::keep_spares(addr_node a, size_node s) noexcept
{
  if (spare_addr_.empty()) { spare_addr_ = std::move(a); }
  if (spare_size_.empty()) { spare_size_ = std::move(s); }
}

void coalescing_free_list::emplace(free_block block)
{
  if (spare_addr_.empty() || spare_size_.empty()) {
    by_addr_.emplace(block.ptr, info{block.size, block.chunk});
    by_size_.emplace(block.size, block.ptr);
    return;
  }
  spare_addr_.key()    = block.ptr;
  spare_addr_.mapped() = info{block.size, block.chunk};
  spare_size_.value()  = size_key{block.size, block.ptr};
  by_addr_.insert(std::move(spare_addr_));
  by_size_.insert(std::move(spare_size_));
}

void coalescing_free_list::merge(coalescing_free_list& other)
{
  other.for_each([this](free_block b) { insert(b); });
  other.clear();
}

free_stats coalescing_free_list::stats() const noexcept
{
  return {free_bytes_, by_addr_.size(), by_size_.empty() ? 0 : by_size_.rbegin()->first};
}

void coalescing_free_list::clear() noexcept
{
  by_addr_.clear();
  by_size_.clear();
  free_bytes_ = 0;
}

void coalescing_free_list::rekey_size(std::size_t old_size, char* old_ptr, std::size_t new_size,
                                      char* new_ptr)
{
  auto node    = by_size_.extract(size_key{old_size, old_ptr});
  node.value() = size_key{new_size, new_ptr};
  by_size_.insert(std::move(node));
}

void coalescing_free_list::erase(std::map<char*, info>::iterator it)
{
  auto s = by_size_.extract(size_key{it->second.size, it->first});
  keep_spares(by_addr_.extract(it), std::move(s));
}

void coalescing_free_list::check_invariants() const
{
  GPUMEM_EXPECTS(by_size_.size() == by_addr_.size(), logic_error,
                 format("coalescing_free_list: by_size_.size() ", by_size_.size(),
                        " != by_addr_.size() ", by_addr_.size()));
  std::size_t sum{};
  free_block prev{};
  for (auto const& [ptr, i] : by_addr_) {
    GPUMEM_EXPECTS(by_size_.contains(size_key{i.size, ptr}), logic_error,
                   format("coalescing_free_list: block ", ptr_str(ptr), " missing from by_size_"));
    GPUMEM_EXPECTS(i.size > 0, logic_error, "coalescing_free_list: empty block");
    if (prev.valid()) {
      GPUMEM_EXPECTS(prev.end() <= ptr, logic_error,
                     format("coalescing_free_list: blocks overlap at ", ptr_str(ptr)));
      GPUMEM_EXPECTS(!(prev.end() == ptr && prev.chunk == i.chunk), logic_error,
                     format("coalescing_free_list: adjacent blocks of chunk ", i.chunk, " at ",
                            ptr_str(ptr), " not coalesced"));
    }
    sum += i.size;
    prev = {ptr, i.size, i.chunk};
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
  if ((count_ + 1) * 4 > slots_.size() * 3) { grow(); }
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

void block_map::grow()
{
  std::vector<free_block> old(std::max<std::size_t>(64, slots_.size() * 2));
  old.swap(slots_);
  count_ = 0;
  for (auto const& b : old) {
    if (b.ptr != nullptr) { insert(b); }
  }
}

}  // namespace gpumem::detail
