// Allocations routed by region. See mr/vmm_region_resource.hpp.
#include <gpumem/detail/format.hpp>
#include <gpumem/detail/stream_ordered_memory_resource.hpp>
#include <gpumem/mr/vmm_region_resource.hpp>

#include <mutex>

namespace gpumem::mr {
namespace {

struct scope_entry {
  vmm_region_resource const* resource;
  vmm_pool_memory_resource* pool;
};

/// This thread's open region scopes, innermost last.
thread_local std::vector<scope_entry> tls_scopes;

}  // namespace

vmm_region_resource::vmm_region_resource(vmm_pool_options const& options, gpumem::runtime& runtime)
    : options_{options}, runtime_{&runtime}
{
  default_ = &region(default_region);
}

vmm_region_resource::~vmm_region_resource() = default;

vmm_pool_memory_resource& vmm_region_resource::region(std::string_view tag)
{
  GPUMEM_EXPECTS(!tag.empty(), logic_error, "vmm_region_resource: a region name must not be empty");
  {
    std::shared_lock lock{mutex_};
    if (auto it = regions_.find(tag); it != regions_.end()) { return *it->second.pool; }
  }
  std::unique_lock lock{mutex_};
  if (auto it = regions_.find(tag); it != regions_.end()) { return *it->second.pool; }
  auto pool         = std::make_unique<vmm_pool_memory_resource>(options_, *runtime_);
  auto const [p, n] = pool->reserved_range();
  auto& slot        = by_address_[static_cast<char const*>(p)];
  slot              = {n, pool.get()};
  try {
    auto& e = regions_[std::string{tag}];
    e       = {std::string{tag}, std::move(pool)};
    return *e.pool;
  } catch (...) {
    by_address_.erase(static_cast<char const*>(p));
    throw;
  }
}

vmm_pool_memory_resource& vmm_region_resource::existing(std::string_view tag) const
{
  {
    std::shared_lock lock{mutex_};
    if (auto it = regions_.find(tag); it != regions_.end()) { return *it->second.pool; }
  }
  std::string names;
  for (auto const& name : regions()) { names += (names.empty() ? "" : ", ") + name; }
  GPUMEM_FAIL(logic_error, detail::format("vmm_region_resource: no region named '", tag,
                                          "' (regions: ", names, ")"));
}

std::vector<std::string> vmm_region_resource::regions() const
{
  std::shared_lock lock{mutex_};
  std::vector<std::string> names;
  for (auto const& [name, e] : regions_) { names.push_back(name); }
  return names;
}

std::string vmm_region_resource::current_region() const
{
  auto const& pool = current();
  std::shared_lock lock{mutex_};
  for (auto const& [name, e] : regions_) {
    if (e.pool.get() == &pool) { return name; }
  }
  return default_region;
}

vmm_pool_memory_resource& vmm_region_resource::current() const
{
  for (auto it = tls_scopes.rbegin(); it != tls_scopes.rend(); ++it) {
    if (it->resource == this) { return *it->pool; }
  }
  return *default_;
}

std::size_t vmm_region_resource::pause_all(pause_mode mode)
{
  std::size_t n{};
  for (auto const& name : regions()) { n += existing(name).pause(mode) ? 1 : 0; }
  return n;
}

std::size_t vmm_region_resource::pause_all(pause_mode mode,
                                           std::span<cuda_stream_view const> streams)
{
  std::size_t n{};
  for (auto const& name : regions()) { n += existing(name).pause(mode, streams) ? 1 : 0; }
  return n;
}

std::size_t vmm_region_resource::resume_all()
{
  std::size_t n{};
  for (auto const& name : regions()) { n += existing(name).resume() ? 1 : 0; }
  return n;
}

void vmm_region_resource::trim()
{
  for (auto const& name : regions()) { existing(name).trim(); }
}

void* vmm_region_resource::do_allocate(std::size_t bytes, cuda_stream_view stream)
{
  return current().allocate(bytes, stream);
}

vmm_pool_memory_resource* vmm_region_resource::owner_of(void const* ptr) const noexcept
{
  auto const* p = static_cast<char const*>(ptr);
  std::shared_lock lock{mutex_};
  auto it = by_address_.upper_bound(p);
  if (it == by_address_.begin()) { return nullptr; }
  --it;
  return p < it->first + it->second.bytes ? it->second.pool : nullptr;
}

void vmm_region_resource::do_deallocate(void* ptr, std::size_t bytes,
                                        cuda_stream_view stream) noexcept
{
  if (auto* pool = owner_of(ptr)) {
    pool->deallocate(ptr, bytes, stream);
    return;
  }
  auto const count = bad_frees_.fetch_add(1) + 1;
  detail::report_bad_deallocation("vmm_region_resource", ptr, bytes,
                                  "not in any region's address range", count);
}

void vmm_region_resource::check_invariants() const
{
  std::shared_lock lock{mutex_};
  GPUMEM_EXPECTS(regions_.size() == by_address_.size(), logic_error,
                 detail::format("vmm_region_resource: invariant broken: ", regions_.size(),
                                " regions but ", by_address_.size(), " address ranges"));
  char const* prev_end = nullptr;
  for (auto const& [start, r] : by_address_) {
    GPUMEM_EXPECTS(prev_end == nullptr || start >= prev_end, logic_error,
                   "vmm_region_resource: invariant broken: two regions' ranges overlap");
    prev_end = start + r.bytes;
  }
  for (auto const& [name, e] : regions_) { e.pool->check_invariants(); }
}

region_scope::region_scope(vmm_region_resource& resource, std::string_view tag)
    : depth_{tls_scopes.size()}
{
  auto& pool = resource.region(tag);
  tls_scopes.push_back({&resource, &pool});
}

region_scope::~region_scope()
{
  tls_scopes.resize(depth_);  // also closes scopes left open inside this one
}

}  // namespace gpumem::mr
