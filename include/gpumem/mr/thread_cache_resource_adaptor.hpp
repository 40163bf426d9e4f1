// gpumem/mr/thread_cache_resource_adaptor.hpp — a per-thread, per-stream cache of freed blocks in
// front of a stream-ordered resource (pool, arena, ...).
//
// A free of a size up to `max_cached_size_bytes` keeps the block in the calling thread's cache,
// in a bin of its stream and size class; the next allocation of that class on that stream by that
// thread takes it back with no lock, no shared read-modify-write and no runtime call. A block
// freed on stream S is reused from the cache only for S; it reaches other streams only by going
// back to the upstream, whose stream-ordered path handles it. Larger requests pass straight
// through. A miss takes a block of exactly the request's size (rounded to 256 B) from upstream; a
// cached block serves a request of its own size class, or of the class below.
//
// A block freed by a thread other than the one whose cache handed it out goes back to that
// thread's cache (posted to it lock-free; taken in at its next call), or upstream when the free is
// on a thread-relative stream (cudaStreamPerThread). Bytes held in caches are bounded per thread
// (`thread_cap_bytes`) and in all (`total_cap_bytes`, and `pool_fraction` of the upstream's pool
// size when the upstream reports one through pool_size(), never below 4 of the largest cached
// blocks nor `thread_floor_bytes` per thread with a cache). A cache that runs into a bound
// flushes its colder half. Caches flush to upstream when the upstream runs out of memory (then
// the allocation is tried once more), before one of our pools below has to grow (the growing
// thread's cache, when it holds more than its floor; the pool then retries), on trim(), when
// their thread exits and in the destructor. Other threads' caches flush at their owners' next call
// (trim, out of memory: waits up to 2 ms).
//
// Bad input: a double free, a wrong size or a pointer this adaptor did not hand out is reported
// on stderr (the first 8) and counted in bad_deallocations(); a wrong size frees the true block;
// pointers the adaptor does not know go to the upstream, which judges them. A bad call never
// corrupts a cache (a block is never cached twice, nor cached and upstream). Thread safety:
// allocate/deallocate/trim/stats are thread-safe. Throws: logic_error for a null upstream or bad
// options; what the upstream throws.
#pragma once

#include <gpumem/detail/thread_cache/cache_core.hpp>
#include <gpumem/mr/capabilities.hpp>
#include <gpumem/mr/device_memory_resource.hpp>
#include <gpumem/mr/thread_cache_options.hpp>

#include <memory>
#include <type_traits>
#include <vector>

namespace gpumem::mr {

/// `options` completed with what a cache learns from the resource below it, where the caller
/// left them unset: that resource's pool size, when it has one (the caches are capped at
/// pool_fraction of it), and its growth hook, when it is one of gpumem's pools (the growing
/// thread's cache is flushed into it before it grows).
template <class Upstream>
[[nodiscard]] thread_cache_options wired_to(Upstream* upstream, thread_cache_options options)
{
  if constexpr (std::is_polymorphic_v<Upstream>) {
    auto const* pool = dynamic_cast<pool_size_source const*>(upstream);
    if (pool != nullptr && !options.upstream_pool_bytes) {
      options.upstream_pool_bytes = [pool] { return pool->pool_size(); };
    }
    if (options.upstream_growth == nullptr) {
      options.upstream_growth = dynamic_cast<gpumem::detail::growth_hook_target*>(upstream);
    }
  }
  return options;
}

template <class Upstream>
class thread_cache_resource_adaptor
    : public device_memory_resource,
      public gpumem::detail::forward_properties<thread_cache_resource_adaptor<Upstream>, Upstream>,
      public trimmable,
      public counter_source {
 public:
  explicit thread_cache_resource_adaptor(device_async_resource_ref upstream,
                                         thread_cache_options options = {})
      : core_{std::make_shared<detail::thread_cache::cache_core>(upstream, std::move(options))}
  {
  }

  /// Also caps the caches at options.pool_fraction of upstream->pool_size() when Upstream has one,
  /// and flushes the growing thread's cache before the upstream grows when it is one of our pools.
  /// Throws logic_error when `upstream` is null.
  explicit thread_cache_resource_adaptor(Upstream* upstream, thread_cache_options options = {})
      : thread_cache_resource_adaptor{to_device_async_resource_ref_checked(upstream),
                                      wired_to(upstream, std::move(options))}
  {
    this->link_upstream(upstream);
  }

  thread_cache_resource_adaptor(thread_cache_resource_adaptor const&)            = delete;
  thread_cache_resource_adaptor& operator=(thread_cache_resource_adaptor const&) = delete;
  thread_cache_resource_adaptor(thread_cache_resource_adaptor&&)                 = delete;
  thread_cache_resource_adaptor& operator=(thread_cache_resource_adaptor&&)      = delete;
  /// Returns every cached block upstream. Blocks still handed out stay with the upstream.
  ~thread_cache_resource_adaptor() override { core_->shutdown(); }

  [[nodiscard]] device_async_resource_ref get_upstream_resource() const noexcept
  {
    return core_->upstream();
  }
  [[nodiscard]] thread_cache_options const& options() const noexcept { return core_->opts(); }

  /// Hits, misses, flushes and bytes cached, per live thread and in total.
  [[nodiscard]] thread_cache_stats stats() const { return core_->get_stats(); }
  /// Returns the caller's cached blocks upstream now, other threads' at their next call.
  void trim() override { core_->trim(); }
  /// cache_hits, cache_misses, cache_flushed, cache_remote_frees, cache_growth_flushes,
  /// cache_bytes.
  void append_counters(std::vector<named_counter>& out) const override
  {
    auto const s = stats();
    out.insert(out.end(), {{"cache_hits", static_cast<double>(s.hits)},
                           {"cache_misses", static_cast<double>(s.misses)},
                           {"cache_flushed", static_cast<double>(s.flushed)},
                           {"cache_remote_frees", static_cast<double>(s.remote_frees)},
                           {"cache_growth_flushes", static_cast<double>(s.growth_flushes)},
                           {"cache_bytes", static_cast<double>(s.bytes_cached)}});
  }
  /// Double frees, wrong sizes and unknown pointers this adaptor saw (not the upstream's count).
  [[nodiscard]] std::uint64_t bad_deallocations() const noexcept
  {
    return core_->bad_deallocations();
  }
  /// Every cached block (pointer, size); call when no other thread uses the adaptor.
  [[nodiscard]] std::vector<std::pair<void*, std::size_t>> cached_blocks() const
  {
    return core_->cached_blocks();
  }
  /// Throws logic_error naming a broken invariant; call when no other thread uses the adaptor.
  void check_invariants() const { core_->check_invariants(); }

 private:
  void* do_allocate(std::size_t bytes, cuda_stream_view stream) override
  {
    return core_->allocate(bytes, stream.value());
  }
  void do_deallocate(void* ptr, std::size_t bytes, cuda_stream_view stream) noexcept override
  {
    core_->deallocate(ptr, bytes, stream.value());
  }

  std::shared_ptr<detail::thread_cache::cache_core> core_;  // shared with the threads' exit hooks
};

static_assert(gpumem::detail::async_resource_with<
              thread_cache_resource_adaptor<device_memory_resource>, cuda::mr::device_accessible>);

}  // namespace gpumem::mr
