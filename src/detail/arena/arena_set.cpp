// The body of arena_memory_resource: arena lookup, slow paths, diagnostics. See arena_set.hpp.
#include <gpumem/align.hpp>
#include <gpumem/detail/arena/arena_set.hpp>
#include <gpumem/detail/format.hpp>
#include <gpumem/error.hpp>

#include <array>
#include <fstream>
#include <iostream>
#include <sstream>

namespace gpumem::detail::arena {
namespace {

std::atomic<std::uint64_t> next_set_id{1};
std::atomic<std::uint64_t> next_thread_serial{1};

/// This thread's serial number (never reused, unlike std::thread::id).
std::uint64_t thread_serial()
{
  thread_local std::uint64_t const serial = next_thread_serial++;
  return serial;
}

/// The calling thread's recently used arenas: (set id, stream) -> arena. Ids are never reused,
/// so entries of destroyed sets never match.
struct cache_entry {
  std::uint64_t set_id{};
  cudaStream_t stream{};
  arena* a{};
};
thread_local std::array<cache_entry, 8> tls_cache{};
thread_local unsigned tls_next{};

std::size_t choose_size(std::optional<std::size_t> arena_size, runtime& rt)
{
  auto const size = align_down(arena_size ? *arena_size : rt.memory_info().free_bytes / 2,
                               CUDA_ALLOCATION_ALIGNMENT);
  GPUMEM_EXPECTS(size >= CUDA_ALLOCATION_ALIGNMENT, logic_error,
                 format("arena_memory_resource: arena_size must be at least 256 bytes, got ",
                        arena_size ? *arena_size : size));
  return size;
}

char const* status_text(free_status s)
{
  switch (s) {
    case free_status::wrong_size:
      return "wrong size (the block was freed with its own size)";
    case free_status::double_free:
      return "double free (the block is already free; ignored)";
    default:
      return "unknown pointer (not allocated by this resource; ignored)";
  }
}

}  // namespace

arena_set::arena_set(device_async_resource_ref upstream, std::optional<std::size_t> arena_size,
                     bool dump_log_on_failure, runtime& rt)
    : runtime_{&rt},
      upstream_{upstream},
      id_{next_set_id++},
      size_{choose_size(arena_size, rt)},
      base_{gpumem::detail::async_allocate(upstream_, size_, CUDA_ALLOCATION_ALIGNMENT,
                                           ::cuda::stream_ref{cudaStream_t{}})},
      global_{base_, size_, rt},
      dump_log_on_failure_{dump_log_on_failure}
{
}

arena_set::~arena_set()
{
  for (auto* e : events_) { runtime_->event_destroy(e); }
  gpumem::detail::async_deallocate(upstream_, base_, size_, CUDA_ALLOCATION_ALIGNMENT,
                                   ::cuda::stream_ref{cudaStream_t{}});
}

arena& arena_set::arena_for(cuda_stream_view stream)
{
  for (auto const& e : tls_cache) {
    if (e.set_id == id_ && e.stream == stream.value()) { return *e.a; }
  }
  arena& a                                 = find_or_create(stream);
  tls_cache[tls_next++ % tls_cache.size()] = {id_, stream.value(), &a};
  return a;
}

arena& arena_set::find_or_create(cuda_stream_view stream)
{
  std::lock_guard lock{registry_mutex_};
  bool const per_thread = stream.is_per_thread_default();
  bool const by_thread  = per_thread || stream.is_default();
  auto& slot =
      by_thread ? thread_arenas_[{thread_serial(), per_thread}] : stream_arenas_[stream.value()];
  if (slot) { return *slot; }
  arenas_.reserve(arenas_.size() + 1);
  events_.reserve(events_.size() + 1);
  cudaEvent_t const event = runtime_->event_create();
  try {
    slot = std::make_unique<arena>(global_, stream.value(), event,
                                   by_thread ? "per-thread" : "per-stream");
  } catch (...) {
    runtime_->event_destroy(event);
    throw;
  }
  events_.push_back(event);
  arenas_.push_back(slot.get());
  return *slot;
}

void* arena_set::allocate_in(arena& a, std::size_t bytes)
{
  return bytes > superblock_bytes ? global_.allocate_large(bytes, a.party()) : a.allocate(bytes);
}

void* arena_set::allocate(std::size_t bytes, cuda_stream_view stream)
{
  [[maybe_unused]] auto const gate = gate_.enter();
  arena& a                         = arena_for(stream);
  if (void* p = allocate_in(a, bytes)) { return p; }
  void* p = allocate_slow(bytes, stream, a);
  check_after_slow_path("the arena's allocate_slow", [this] { check_invariants(); });
  return p;
}

void* arena_set::allocate_slow(std::size_t bytes, cuda_stream_view stream, arena& a)
{
  defragment();
  if (void* p = allocate_in(a, bytes)) { return p; }
  if (dump_log_on_failure_) { write_dump_file(bytes, stream); }
  throw_out_of_memory(bytes, stream);
}

void arena_set::deallocate(void* ptr, std::size_t bytes, cuda_stream_view stream) noexcept
{
  [[maybe_unused]] auto const gate = gate_.enter();
  try {
    arena& a          = arena_for(stream);
    auto const status = bytes > superblock_bytes ? global_.deallocate_large(ptr, bytes, a.party())
                                                 : a.deallocate(ptr, bytes, true);
    if (status == free_status::freed) { return; }
    if (status != free_status::not_found) { return report_bad_free(status, ptr, bytes, stream); }
    deallocate_slow(ptr, bytes, stream, a);
    check_after_slow_path("the arena's deallocate_slow", [this] { check_invariants(); });
  } catch (std::exception const& e) {
    std::cerr << "gpumem::arena_memory_resource: deallocate(" << ptr << ", " << bytes
              << " B) failed: " << e.what() << '\n';
    ++bad_deallocations_;
  }
}

void arena_set::deallocate_slow(void* ptr, std::size_t bytes, cuda_stream_view stream, arena& a)
{
  // The block belongs to another arena (another stream or thread), or is large but freed with a
  // small size: make the freeing stream's work complete before another stream may reuse it.
  runtime_->stream_synchronize(stream.value());
  std::lock_guard lock{registry_mutex_};
  for (auto* other : arenas_) {
    auto const status = other->deallocate(ptr, bytes, false);
    if (status == free_status::freed) { return; }
    if (status != free_status::not_found) { return report_bad_free(status, ptr, bytes, stream); }
  }
  auto status = global_.deallocate_large(ptr, bytes, a.party());
  if (status == free_status::freed) { return; }
  report_bad_free(status, ptr, bytes, stream);
}

void arena_set::report_bad_free(free_status status, void* ptr, std::size_t bytes,
                                cuda_stream_view stream) noexcept
{
  ++bad_deallocations_;
  try {
    std::cerr << format("gpumem::arena_memory_resource: deallocate(", ptr_str(ptr), ", ", bytes,
                        " B, stream ", static_cast<void*>(stream.value()),
                        "): ", status_text(status), '\n');
  } catch (...) {  // NOLINT(bugprone-empty-catch): reporting must not throw
  }
}

std::vector<std::unique_lock<std::mutex>> arena_set::lock_all_arenas() const
{
  std::vector<std::unique_lock<std::mutex>> locks;
  locks.reserve(arenas_.size());
  for (auto* a : arenas_) { locks.push_back(a->lock()); }
  return locks;
}

void arena_set::defragment()
{
  std::lock_guard lock{registry_mutex_};
  auto const locks = lock_all_arenas();  // no block can be freed into an arena meanwhile
  runtime_->device_synchronize();        // so every free so far has completed
  for (auto* a : arenas_) { a->release_empty_locked(); }
}

void arena_set::check_invariants() const
{
  std::lock_guard lock{registry_mutex_};
  auto const locks = lock_all_arenas();
  std::size_t held{};
  for (auto const* a : arenas_) {
    a->check_invariants_locked();
    held += a->held_bytes_locked();
  }
  global_.check_invariants(held);
}

void arena_set::dump_memory_log(std::ostream& out) const
{
  std::lock_guard lock{registry_mutex_};
  global_.dump(out);
  out << arenas_.size() << " arenas\n";
  for (auto const* a : arenas_) { a->dump(out); }
}

void arena_set::set_dump_log_path(std::filesystem::path path)
{
  std::lock_guard lock{registry_mutex_};
  dump_log_path_ = std::move(path);
}

std::filesystem::path arena_set::dump_log_path() const
{
  std::lock_guard lock{registry_mutex_};
  return dump_log_path_;
}

std::size_t arena_set::arena_count() const
{
  std::lock_guard lock{registry_mutex_};
  return arenas_.size();
}

void arena_set::write_dump_file(std::size_t bytes, cuda_stream_view stream) const
{
  std::ostringstream text;
  text << "gpumem arena_memory_resource memory dump: out of memory allocating " << bytes_str(bytes)
       << " on stream " << static_cast<void*>(stream.value()) << "\n";
  dump_memory_log(text);
  std::ofstream file{dump_log_path(), std::ios::app};
  file << text.str() << '\n';
}

void arena_set::throw_out_of_memory(std::size_t bytes, cuda_stream_view stream) const
{
  std::size_t in_arenas{};
  {
    std::lock_guard lock{registry_mutex_};
    for (auto const* a : arenas_) { in_arenas += a->free_bytes(); }
  }
  auto const free    = global_.free_bytes();
  auto const largest = global_.largest_free();
  auto const frag =
      free == 0 ? 0.0 : 1.0 - static_cast<double>(largest) / static_cast<double>(free);
  GPUMEM_FAIL(out_of_memory,
              format("arena_memory_resource: cannot allocate ", bytes_str(bytes), " on stream ",
                     static_cast<void*>(stream.value()), ": global arena has ", bytes_str(free),
                     " free of ", bytes_str(size_), " (largest free range ", bytes_str(largest),
                     ", fragmentation ", frag, "); ", bytes_str(in_arenas),
                     " free inside arenas' superblocks",
                     dump_log_on_failure_ ? "; memory dump written to " : "",
                     dump_log_on_failure_ ? dump_log_path().string() : std::string{}));
}

}  // namespace gpumem::detail::arena
