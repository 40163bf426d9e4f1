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

std::size_t coalescing_free_list::next_nonempty(std::size_t c) const noexcept
{
  for (auto w = c / 64; w < nonempty_.size(); ++w) {
    auto bits = nonempty_[w];
    if (w == c / 64) { bits &= ~std::uint64_t{0} << (c % 64); }
    if (bits != 0) { return w * 64 + static_cast<std::size_t>(std::countr_zero(bits)); }
  }
  return classes;
}

void coalescing_free_list::add_size(std::size_t size, char* ptr, record r) noexcept
{
  auto const c = class_of(size);
  by_size_[c].insert({size, ptr, r});  // room reserved: allocates nothing
  nonempty_[c / 64] |= std::uint64_t{1} << (c % 64);
  ++size_count_;
}

void coalescing_free_list::remove_size(std::size_t c, size_index::cursor& at) noexcept
{
  by_size_[c].erase(at);
  if (by_size_[c].empty()) { nonempty_[c / 64] &= ~(std::uint64_t{1} << (c % 64)); }
  --size_count_;
}

free_block coalescing_free_list::take(std::size_t size)
{
  auto c   = class_of(size);
  auto fit = by_size_[c].lower_bound(size);
  if (!fit.valid()) {  // nothing in the request's class: the next class's smallest
    c = next_nonempty(c + 1);
    if (c == classes) { return {}; }
    fit = by_size_[c].lower_bound(0);
  }
  auto const r = by_size_[c].at(fit).value;
  auto& block  = records_[r];
  if (block.size == size) {
    remove_size(c, fit);
    by_start_.erase(block.ptr);
    by_end_.erase(block.end());
    release(r);
    free_bytes_ -= size;
    return block;
  }
  // Cut from the high end: the remainder keeps its address and record; its end moves.
  auto const rest = block.size - size;
  auto const rc   = class_of(rest);
  by_size_[rc].reserve();  // may throw: nothing has changed yet (the cursor holds indexes)
  free_bytes_ -= size;
  by_end_.erase(block.end());
  block.size = rest;
  by_end_.insert_unchecked(block.end(), r);  // one entry out, one in: no growth
  if (rc == c) {
    by_size_[c].rekey(fit, rest, block.ptr);
  } else {
    remove_size(c, fit);
    add_size(rest, block.ptr, r);
  }
  return {block.end(), size, block.chunk};
}

void coalescing_free_list::insert(free_block const& block)
{
  auto prev = by_end_.find_or(block.ptr, no_record);
  if (prev != no_record && records_[prev].chunk != block.chunk) { prev = no_record; }
  auto next = by_start_.find_or(block.end(), no_record);
  if (next != no_record && records_[next].chunk != block.chunk) { next = no_record; }
  auto const merged = block.size + (prev != no_record ? records_[prev].size : 0) +
                      (next != no_record ? records_[next].size : 0);
  reserve_one(class_of(merged));  // everything that may allocate comes first: a failure changes
                                  // nothing
  if (prev != no_record && next != no_record) {
    absorb_next(prev, block, next);
  } else if (prev != no_record) {
    extend_prev(prev, block);
  } else if (next != no_record) {
    extend_next(block, next);
  } else {
    emplace(block);
  }
  free_bytes_ += block.size;
}

// prev | block | next become one block under prev's record; next's record is released.
void coalescing_free_list::absorb_next(record prev, free_block block, record next) noexcept
{
  auto& p       = records_[prev];
  auto const& n = records_[next];
  auto const nc = class_of(n.size);
  auto nkey     = by_size_[nc].find(n.size, n.ptr);
  remove_size(nc, nkey);
  by_start_.erase(n.ptr);
  by_end_.erase(p.end());
  by_end_.assign(n.end(), prev);
  auto const old_size = p.size;
  p.size += block.size + n.size;
  release(next);
  rekey_size(prev, old_size, p.ptr);
}

// prev | block become one block under prev's record (its end moves).
void coalescing_free_list::extend_prev(record prev, free_block block) noexcept
{
  auto& p = records_[prev];
  by_end_.erase(p.end());
  by_end_.insert_unchecked(block.end(), prev);  // one entry out, one in
  auto const old_size = p.size;
  p.size += block.size;
  rekey_size(prev, old_size, p.ptr);
}

// block | next become one block under next's record (its start moves).
void coalescing_free_list::extend_next(free_block block, record next) noexcept
{
  auto& n = records_[next];
  by_start_.erase(n.ptr);
  by_start_.insert_unchecked(block.ptr, next);  // one entry out, one in
  auto const old_size = n.size;
  auto* const old_ptr = n.ptr;
  n.ptr               = block.ptr;
  n.size += block.size;
  rekey_size(next, old_size, old_ptr);
}

void coalescing_free_list::rekey_size(record r, std::size_t old_size, char* old_ptr) noexcept
{
  auto const oc = class_of(old_size);
  auto const nc = class_of(records_[r].size);
  auto at       = by_size_[oc].find(old_size, old_ptr);
  if (oc == nc) {
    by_size_[oc].rekey(at, records_[r].size, records_[r].ptr);  // room reserved in class nc
    return;
  }
  remove_size(oc, at);
  add_size(records_[r].size, records_[r].ptr, r);
}

void coalescing_free_list::reserve_one(std::size_t c)
{
  by_size_[c].reserve();
  auto const blocks = size_count_ + 1;
  if (free_records_.empty() && records_.size() == records_.capacity()) {
    records_.reserve(std::max<std::size_t>(16, records_.capacity() * 2));
    free_records_.reserve(records_.capacity());
  }
  by_start_.reserve(blocks);
  by_end_.reserve(blocks);
}

void coalescing_free_list::emplace(free_block block) noexcept
{
  record r{};
  if (free_records_.empty()) {
    r = static_cast<record>(records_.size());
    records_.push_back(block);  // capacity reserved
  } else {
    r = free_records_.back();
    free_records_.pop_back();
    records_[r] = block;
  }
  by_start_.insert_unchecked(block.ptr, r);
  by_end_.insert_unchecked(block.end(), r);
  add_size(block.size, block.ptr, r);
}

free_block coalescing_free_list::ending_at(char const* at) const noexcept
{
  auto const r = by_end_.find_or(at, no_record);
  return r == no_record ? free_block{} : records_[r];
}

free_block coalescing_free_list::starting_at(char const* at) const noexcept
{
  auto const r = by_start_.find_or(at, no_record);
  return r == no_record ? free_block{} : records_[r];
}

void coalescing_free_list::unlink(record r) noexcept
{
  auto const b = records_[r];
  auto const c = class_of(b.size);
  auto at      = by_size_[c].find(b.size, b.ptr);
  remove_size(c, at);
  by_start_.erase(b.ptr);
  by_end_.erase(b.end());
  release(r);
  free_bytes_ -= b.size;
}

// Room comes first: reserve_one for each remainder; when both remainders fall in one class other
// than `from`'s, the second slot is reserved after the first remainder went in, and a failure there
// puts `from` back as it was.
void coalescing_free_list::carve(free_block const& from, char* ptr, std::size_t n)
{
  auto const r = by_start_.find_or(from.ptr, no_record);
  GPUMEM_EXPECTS(
      r != no_record && records_[r].size == from.size && from.ptr <= ptr && ptr + n <= from.end(),
      logic_error,
      format("coalescing_free_list: cannot carve ", n, " bytes at ", static_cast<void*>(ptr),
             " out of ", static_cast<void*>(from.ptr), " (", from.size, " bytes)"));
  free_block const left{from.ptr, static_cast<std::size_t>(ptr - from.ptr), from.chunk};
  free_block const right{ptr + n, static_cast<std::size_t>(from.end() - ptr - n), from.chunk};
  if (left.size > 0) { reserve_one(class_of(left.size)); }
  if (right.size > 0) { reserve_one(class_of(right.size)); }
  unlink(r);
  bool const twice = left.size > 0 && right.size > 0 &&
                     class_of(left.size) == class_of(right.size) &&
                     class_of(left.size) != class_of(from.size);
  if (left.size > 0) {
    emplace(left);
    free_bytes_ += left.size;
  }
  if (right.size == 0) { return; }
  if (twice) {
    try {
      by_size_[class_of(right.size)].reserve();
    } catch (...) {
      unlink(by_start_.find_or(left.ptr, no_record));
      emplace(from);  // its slots were freed by unlink
      free_bytes_ += from.size;
      throw;
    }
  }
  emplace(right);
  free_bytes_ += right.size;
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
      largest = by_size_[c - 1].largest().size;
      break;
    }
  }
  return {free_bytes_, size_count_, largest};
}

void coalescing_free_list::clear() noexcept
{
  by_start_.clear();
  by_end_.clear();
  for (auto& index : by_size_) { index.clear(); }
  nonempty_.fill(0);
  size_count_ = 0;
  records_.clear();
  free_records_.clear();
  free_bytes_ = 0;
}

void coalescing_free_list::check_invariants() const
{
  std::vector<free_block> blocks;
  blocks.reserve(size_count_);
  for (std::size_t c = 0; c < classes; ++c) {
    by_size_[c].check_invariants();
    bool const bit = ((nonempty_[c / 64] >> (c % 64)) & 1) != 0;
    GPUMEM_EXPECTS(bit == !by_size_[c].empty(), logic_error,
                   format("coalescing_free_list: nonempty_ bit ", c, " is ", bit, " but class ", c,
                          " holds ", by_size_[c].size(), " blocks"));
    by_size_[c].for_each([&](size_index::entry const& e) { blocks.push_back(check_entry(c, e)); });
  }
  auto const live = records_.size() - free_records_.size();
  GPUMEM_EXPECTS(blocks.size() == size_count_ && size_count_ == by_start_.size() &&
                     by_start_.size() == by_end_.size() && by_end_.size() == live,
                 logic_error,
                 format("coalescing_free_list: size_count_ ", size_count_, ", blocks in classes ",
                        blocks.size(), ", by_start_.size() ", by_start_.size(), ", by_end_.size() ",
                        by_end_.size(), ", live records ", live, " differ"));
  std::sort(blocks.begin(), blocks.end(),
            [](free_block const& a, free_block const& b) { return a.ptr < b.ptr; });
  std::size_t sum{};
  free_block prev{};
  for (auto const& b : blocks) {
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

free_block coalescing_free_list::check_entry(std::size_t c, size_index::entry const& e) const
{
  GPUMEM_EXPECTS(class_of(e.size) == c && e.value < records_.size(), logic_error,
                 format("coalescing_free_list: size entry (", e.size, ", ", ptr_str(e.ptr),
                        ") in class ", c, " names record ", e.value));
  auto const& b = records_[e.value];
  GPUMEM_EXPECTS(b.size == e.size && b.ptr == e.ptr && b.size > 0, logic_error,
                 format("coalescing_free_list: size entry (", e.size, ", ", ptr_str(e.ptr),
                        ") names record ", e.value, " = (", b.size, ", ", ptr_str(b.ptr), ")"));
  GPUMEM_EXPECTS(by_start_.find_or(b.ptr, no_record) == e.value &&
                     by_end_.find_or(b.end(), no_record) == e.value,
                 logic_error,
                 format("coalescing_free_list: block ", ptr_str(b.ptr), " (", b.size,
                        " B) missing from by_start_ or by_end_"));
  return b;
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

void fixed_size_free_list::give_half(fixed_size_free_list& dst)
{
  auto const half = blocks_.size() / 2;
  dst.blocks_.reserve(half);  // may throw; nothing has moved yet
  auto const from = blocks_.end() - static_cast<std::ptrdiff_t>(half);
  dst.blocks_.assign(from, blocks_.end());
  blocks_.erase(from, blocks_.end());
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
