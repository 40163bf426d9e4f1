// The host stand-in's model of the virtual-memory API. See host_vmm_model.hpp.
#include "host_vmm_model.hpp"

#include <gpumem/align.hpp>
#include <gpumem/detail/format.hpp>
#include <gpumem/error.hpp>

#include <sys/mman.h>

#include <iterator>
#include <utility>

namespace gpumem::detail {
namespace {

constexpr std::uintptr_t simulated_base = std::uintptr_t{1} << 46;  // 64 TiB: never host memory
constexpr std::uintptr_t simulated_end  = std::uintptr_t{1} << 47;

[[noreturn]] void invalid(std::string const& what)
{
  throw cuda_error{cudaErrorInvalidValue, format("host_runtime: virtual memory: ", what)};
}

void* as_ptr(std::uintptr_t a)
{
  return reinterpret_cast<void*>(a);
}
std::uintptr_t as_addr(void const* p)
{
  return reinterpret_cast<std::uintptr_t>(p);
}

}  // namespace

host_vmm_model::host_vmm_model(bool backed, std::size_t granularity)
    : backed_{backed}, granularity_{granularity}
{
}

host_vmm_model::~host_vmm_model()
{
  for (auto const& [base, region] : host_maps_) { ::munmap(as_ptr(region.first), region.second); }
}

std::uintptr_t host_vmm_model::find_gap(std::size_t bytes, std::size_t alignment) const
{
  auto at = align_up(simulated_base, alignment);
  for (auto const& [base, size] : reservations_) {
    if (at + bytes <= base) { break; }
    at = std::max(at, align_up(base + size, alignment));
  }
  return at + bytes <= simulated_end ? at : 0;
}

void* host_vmm_model::reserve(std::size_t bytes, std::size_t alignment)
{
  alignment = std::max(alignment, granularity_);
  if (bytes == 0 || !is_aligned(bytes, granularity_) || !is_pow2(alignment)) {
    invalid(format("cannot reserve ", bytes, " bytes aligned to ", alignment,
                   ": the size must be a non-zero multiple of the granularity (", granularity_,
                   ") and the alignment a power of two"));
  }
  std::uintptr_t base{};
  if (backed_) {
    auto const length = bytes + alignment;
    void* p =
        ::mmap(nullptr, length, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
      throw out_of_memory{format("host_runtime: virtual memory: cannot reserve ", bytes_str(bytes),
                                 " of address space")};
    }
    base = align_up(as_addr(p), alignment);
    host_maps_.emplace(base, std::pair{as_addr(p), length});
  } else {
    base = find_gap(bytes, alignment);
    if (base == 0) {
      throw out_of_memory{format("host_runtime: virtual memory: no ", bytes_str(bytes),
                                 " of simulated address space left")};
    }
  }
  reservations_.emplace(base, bytes);
  return as_ptr(base);
}

void host_vmm_model::unreserve(void* base, std::size_t bytes) noexcept
{
  auto const it = reservations_.find(as_addr(base));
  if (it == reservations_.end() || it->second != bytes) {
    return misuse(format("unreserve of ", base, " (", bytes, " bytes): not a whole reservation"));
  }
  if (overlaps_mapping(it->first, bytes)) {
    return misuse(format("unreserve of ", base, ": a range in it is still mapped"));
  }
  reservations_.erase(it);
  if (auto h = host_maps_.find(as_addr(base)); h != host_maps_.end()) {
    ::munmap(as_ptr(h->second.first), h->second.second);
    host_maps_.erase(h);
  }
}

vmm_handle host_vmm_model::create(std::size_t bytes, int device, vmm_handle_properties properties)
{
  if (bytes == 0 || !is_aligned(bytes, granularity_)) {
    invalid(format("cannot create a physical allocation of ", bytes,
                   " bytes: not a non-zero multiple of the granularity (", granularity_, ")"));
  }
  auto const handle = next_handle_++;
  handles_.emplace(handle, handle_rec{bytes, device, properties, false, 0, handle});
  memory_refs_.emplace(handle, 1);
  physical_ += bytes;
  return handle;
}

vmm_handle host_vmm_model::import(vmm_handle of)
{
  auto const it = handles_.find(of);
  if (it == handles_.end() || !it->second.properties.shareable) {
    invalid(format("cannot import handle ", of, ": unknown, or not created shareable"));
  }
  auto const handle = next_handle_++;
  handles_.emplace(handle, handle_rec{it->second.bytes, it->second.device, it->second.properties,
                                      false, 0, it->second.memory});
  ++memory_refs_.at(it->second.memory);
  return handle;
}

std::size_t host_vmm_model::forget(std::map<vmm_handle, handle_rec>::iterator it) noexcept
{
  auto const memory = it->second.memory;
  auto const bytes  = it->second.bytes;
  handles_.erase(it);
  auto refs = memory_refs_.find(memory);
  if (--refs->second > 0) { return 0; }
  memory_refs_.erase(refs);
  physical_ -= bytes;
  return bytes;
}

std::size_t host_vmm_model::release(vmm_handle handle) noexcept
{
  auto it = handles_.find(handle);
  if (it == handles_.end() || it->second.released) {
    misuse(format("release of an unknown or already released handle ", handle));
    return 0;
  }
  if (it->second.mappings > 0) {
    it->second.released = true;  // freed with its last mapping
    return 0;
  }
  return forget(it);
}

void host_vmm_model::map(void* ptr, std::size_t bytes, vmm_handle handle)
{
  auto const addr = as_addr(ptr);
  auto const it   = handles_.find(handle);
  if (it == handles_.end() || it->second.released) {
    invalid(format("cannot map unknown or released handle ", handle));
  }
  if (bytes != it->second.bytes) {
    invalid(format("cannot map ", bytes, " bytes of a ", it->second.bytes, "-byte handle"));
  }
  if (!is_aligned(addr, granularity_) || !inside_one_reservation(addr, bytes)) {
    invalid(format("cannot map at ", ptr, " (", bytes,
                   " bytes): not granularity-aligned inside one reservation"));
  }
  if (overlaps_mapping(addr, bytes)) {
    invalid(format("cannot map at ", ptr, " (", bytes, " bytes): already mapped"));
  }
  mappings_.emplace(addr, mapping_rec{bytes, handle, false});
  ++it->second.mappings;
}

std::size_t host_vmm_model::unmap(void* ptr, std::size_t bytes) noexcept
{
  auto const it = mappings_.find(as_addr(ptr));
  if (it == mappings_.end() || it->second.bytes != bytes) {
    misuse(format("unmap of ", ptr, " (", bytes, " bytes): not a whole mapping"));
    return 0;
  }
  protect(it->first, bytes, false);
  auto h = handles_.find(it->second.handle);
  mappings_.erase(it);
  if (--h->second.mappings > 0 || !h->second.released) { return 0; }
  return forget(h);
}

template <class F>
void host_vmm_model::for_range(void* ptr, std::size_t bytes, F&& f) const
{
  auto at        = as_addr(ptr);
  auto const end = at + bytes;
  auto it        = mappings_.upper_bound(at);
  if (it != mappings_.begin()) { --it; }
  while (at < end) {
    if (it == mappings_.end() || it->first > at || it->first + it->second.bytes <= at) {
      invalid(format("range ", ptr, " (", bytes, " bytes) is not wholly mapped"));
    }
    f(*it);
    at = it->first + it->second.bytes;
    ++it;
  }
}

void host_vmm_model::set_access(void* ptr, std::size_t bytes, int device)
{
  for_range(ptr, bytes, [](auto const&) {});  // validate first: nothing changes on a throw
  for_range(ptr, bytes, [this, device](auto const& m) {
    auto& rec      = const_cast<mapping_rec&>(m.second);
    rec.accessible = true;
    rec.devices |= std::uint64_t{1} << (device & 63);
    protect(m.first, m.second.bytes, true);
  });
}

bool host_vmm_model::accessible_by(void const* ptr, int device) const
{
  auto const at = as_addr(ptr);
  auto it       = mappings_.upper_bound(at);
  if (it == mappings_.begin()) { return false; }
  --it;
  bool const inside = at < it->first + it->second.bytes;
  return inside && (it->second.devices >> (device & 63) & 1U) != 0;
}

void host_vmm_model::check_mapped(void* ptr, std::size_t bytes) const
{
  for_range(ptr, bytes, [&](auto const& m) {
    if (!m.second.accessible) {
      invalid(format("range ", ptr, " (", bytes, ") is mapped, but access was never granted"));
    }
  });
}

void host_vmm_model::check_copy(void const* ptr, std::size_t bytes, char const* role) const
{
  if (bytes == 0 || !overlaps_reservation(as_addr(ptr), bytes)) { return; }
  if (!inside_one_reservation(as_addr(ptr), bytes)) {
    throw cuda_error{cudaErrorInvalidValue,
                     format("host_runtime: copy ", role, " ", ptr, " (", bytes,
                            " bytes) crosses the edge of a reserved address range")};
  }
  try {
    check_mapped(const_cast<void*>(ptr), bytes);
  } catch (cuda_error const& e) {
    throw cuda_error{cudaErrorInvalidValue, format("host_runtime: copy ", role, ": ", e.what())};
  }
}

bool host_vmm_model::overlaps_reservation(std::uintptr_t addr, std::size_t bytes) const
{
  auto it = reservations_.lower_bound(addr);
  if (it != reservations_.end() && it->first < addr + bytes) { return true; }
  if (it == reservations_.begin()) { return false; }
  --it;
  return it->first + it->second > addr;
}

std::vector<std::pair<void*, std::size_t>> host_vmm_model::whole_mappings(
    void* ptr, std::size_t bytes) const noexcept
{
  std::vector<std::pair<void*, std::size_t>> out;
  try {
    auto at        = as_addr(ptr);
    auto const end = at + bytes;
    for (auto it = mappings_.find(at); it != mappings_.end() && at < end; ++it) {
      if (it->first != at || at + it->second.bytes > end) { break; }
      out.emplace_back(as_ptr(at), it->second.bytes);
      at += it->second.bytes;
    }
    if (at != end || bytes == 0) { out.clear(); }
  } catch (...) {  // host memory exhausted: the caller unmaps one by one
    out.clear();
  }
  return out;
}

bool host_vmm_model::shareable(vmm_handle handle) const
{
  auto const it = handles_.find(handle);
  if (it == handles_.end()) { invalid(format("unknown handle ", handle)); }
  return it->second.properties.shareable;
}

vmm_allocation_info host_vmm_model::allocation_at(void const* ptr) const
{
  auto const at = as_addr(ptr);
  auto it       = mappings_.upper_bound(at);
  if (it == mappings_.begin() || at >= std::prev(it)->first + std::prev(it)->second.bytes) {
    invalid(format("nothing is mapped at ", ptr));
  }
  --it;
  auto const& h = handles_.at(it->second.handle);
  return {as_ptr(it->first), it->second.bytes, h.device, h.properties};
}

std::size_t host_vmm_model::mapped_bytes() const noexcept
{
  std::size_t sum{};
  for (auto const& [addr, m] : mappings_) { sum += m.bytes; }
  return sum;
}

bool host_vmm_model::inside_one_reservation(std::uintptr_t addr, std::size_t bytes) const
{
  auto it = reservations_.upper_bound(addr);
  if (it == reservations_.begin()) { return false; }
  --it;
  return addr >= it->first && addr + bytes <= it->first + it->second;
}

bool host_vmm_model::overlaps_mapping(std::uintptr_t addr, std::size_t bytes) const
{
  auto it = mappings_.lower_bound(addr);
  if (it != mappings_.end() && it->first < addr + bytes) { return true; }
  if (it == mappings_.begin()) { return false; }
  --it;
  return it->first + it->second.bytes > addr;
}

void host_vmm_model::misuse(std::string what) noexcept
{
  ++misuse_;
  last_misuse_ = std::move(what);
}

void host_vmm_model::protect(std::uintptr_t addr, std::size_t bytes, bool accessible) const noexcept
{
  if (!backed_) { return; }
  if (!accessible) { ::madvise(as_ptr(addr), bytes, MADV_DONTNEED); }
  ::mprotect(as_ptr(addr), bytes, accessible ? PROT_READ | PROT_WRITE : PROT_NONE);
}

void host_vmm_model::check_invariants() const
{
  GPUMEM_EXPECTS(
      misuse_ == 0, logic_error,
      format("host_runtime: virtual memory misused ", misuse_, " time(s); last: ", last_misuse_));
  std::map<vmm_handle, std::size_t> counts;
  std::uintptr_t prev_end = 0;
  for (auto const& [addr, m] : mappings_) {
    GPUMEM_EXPECTS(addr >= prev_end && inside_one_reservation(addr, m.bytes), logic_error,
                   format("host_runtime: mapping at ", as_ptr(addr),
                          " overlaps another or lies outside a reservation"));
    prev_end = addr + m.bytes;
    ++counts[m.handle];
  }
  std::size_t live{};
  std::map<vmm_handle, std::size_t> refs;
  for (auto const& [h, rec] : handles_) {
    GPUMEM_EXPECTS(counts[h] == rec.mappings && (!rec.released || rec.mappings > 0), logic_error,
                   format("host_runtime: handle ", h, " mapping count ", rec.mappings,
                          " != mappings ", counts[h], " (or released and unmapped)"));
    if (refs[rec.memory]++ == 0) { live += rec.bytes; }  // imports share their memory
  }
  GPUMEM_EXPECTS(refs == memory_refs_, logic_error,
                 "host_runtime: the handles to each physical allocation are miscounted");
  GPUMEM_EXPECTS(
      live == physical_, logic_error,
      format("host_runtime: physical bytes ", physical_, " != sum of physical allocations ", live));
}

}  // namespace gpumem::detail
