// The virtual-memory pool's slow paths. See mr/vmm_pool_memory_resource.hpp.
#include <gpumem/mr/vmm_pool_memory_resource.hpp>

#include <algorithm>
#include <chrono>
#include <thread>

namespace gpumem::mr {

vmm_pool_memory_resource::vmm_pool_memory_resource(vmm_pool_options const& options,
                                                   gpumem::runtime& runtime)
    : base{runtime, detail::coalescing_free_list{}},
      options_{options},
      backing_{runtime, options},
      singles_{runtime, backing_.device(), backing_.peers(), backing_.granularity(),
               backing_.handle_properties()},
      threshold_{options.release_threshold_bytes}
{
  register_range(backing_.range());
}

vmm_pool_memory_resource::~vmm_pool_memory_resource()
{
  release_all();
}

std::size_t vmm_pool_memory_resource::allocation_size(std::size_t bytes) const
{
  auto const limit = backing_.range().size;
  GPUMEM_EXPECTS(
      can_align_up(bytes, allocation_alignment) && bytes <= limit, out_of_memory,
      detail::format(resource_name, ": cannot allocate ", detail::bytes_str(bytes),
                     ": larger than the reserved address space ", detail::bytes_str(limit)));
  return align_up(bytes, allocation_alignment);
}

detail::free_block vmm_pool_memory_resource::grow_in_place(detail::coalescing_free_list& idle,
                                                           std::size_t size, bool may_move)
{
  if (frozen_.load()) { refuse_paused(size); }  // under the grow lock: the layout stays as paused
  backing_.set_recording(listeners_.any());
  struct queue_on_exit {  // what was mapped and unmapped, whether the growth returns or throws
    vmm_pool_memory_resource* self;
    ~queue_on_exit()
    {
      self->queue_events();
      // The layout changed: the next moment the whole pool is free again may take it home.
      if (self->options_.return_home) { self->placement().watch_for_empty(); }
    }
  } const queue{this};
  if (!may_move) {  // new memory only; out_of_memory lets the caller settle and move
    return take_grown(idle, backing_.extend(idle, size, false), size);
  }
  detail::free_block grown;
  try {
    grown = backing_.extend(idle, size);
  } catch (out_of_memory const&) {  // give back every free granule, then try once more
    backing_.release_idle(idle, 0);
    backing_.release_spares();
    singles_.release_passed(false);
    try {
      grown = backing_.extend(idle, size);
    } catch (out_of_memory const& e) {
      fail(idle, size, e.what());
    }
  }
  auto const block = take_grown(idle, grown, size);
  apply_threshold(idle);
  return block;
}

// The request's block out of the free block a growth made (see vmm_backing::place).
detail::free_block vmm_pool_memory_resource::take_grown(detail::coalescing_free_list& idle,
                                                        detail::free_block const& grown,
                                                        std::size_t size)
{
  char* const at = backing_.place(grown, size);
  idle.carve(grown, at, size);
  return {at, size, grown.chunk};
}

void vmm_pool_memory_resource::apply_threshold(detail::coalescing_free_list& idle) noexcept
{
  auto const free      = idle.stats().free_bytes;
  auto const threshold = threshold_.load();
  if (free <= threshold) { return; }
  backing_.release_idle(idle, backing_.mapped_bytes() - (free - threshold));
}

void vmm_pool_memory_resource::fail(detail::coalescing_free_list const& idle, std::size_t size,
                                    char const* why) const
{
  auto const free = idle.stats();
  GPUMEM_FAIL(
      out_of_memory,
      detail::format(resource_name, ": cannot allocate ", detail::bytes_str(size),
                     ": physical memory mapped ", detail::bytes_str(backing_.mapped_bytes()),
                     ", free ", detail::bytes_str(free.free_bytes), " (largest free block ",
                     detail::bytes_str(free.largest_bytes), "), address space left ",
                     detail::bytes_str(backing_.unmapped_bytes()), "; ", why));
}

std::size_t vmm_pool_memory_resource::trim_to(std::size_t bytes)
{
  if (frozen_.load()) { return singles_.release_passed(false); }  // paused: nothing mapped to trim
  auto const released = with_idle([&](detail::coalescing_free_list& idle) -> std::size_t {
    if (frozen_.load()) { return 0; }
    backing_.set_recording(listeners_.any());
    auto const n = backing_.release_idle(idle, bytes);
    queue_events();
    return n;
  });
  if (listeners_.pending()) { listeners_.deliver(); }
  return released + singles_.release_passed(false);  // the device synchronized: all passed
}

void* vmm_pool_memory_resource::allocate_single_handle(std::size_t bytes, cuda_stream_view)
{
  if (frozen_.load()) { refuse_paused(bytes); }
  singles_.release_passed(false);
  try {
    return singles_.allocate(bytes);
  } catch (out_of_memory const&) {  // the pool's free memory may be what is missing
    trim_to(0);                     // (also releases the single handles freed meanwhile)
    release_spares();
    return singles_.allocate(bytes);
  }
}

std::size_t vmm_pool_memory_resource::release_spares() noexcept
{
  std::size_t released{};
  under_grow_lock([&] { released = backing_.release_spares(); });
  return released;
}

std::size_t vmm_pool_memory_resource::release_offload_staging() noexcept
{
  std::size_t released{};
  under_grow_lock([&] {
    auto const before = backing_.staging_bytes();
    backing_.release_staging();  // keeps a buffer that holds a pause's contents
    released = before - backing_.staging_bytes();
  });
  return released;
}

vmm_export vmm_pool_memory_resource::export_single_handle(void const* ptr) const
{
  auto [fd, bytes] = singles_.export_fd(ptr);
  return vmm_export{owned_fd{fd}, bytes, backing_.device()};
}

void* vmm_pool_memory_resource::do_allocate(std::size_t bytes, cuda_stream_view stream)
{
  if (frozen_.load(std::memory_order_acquire)) [[unlikely]] { refuse_paused(bytes); }
  if (placement().take_emptied()) [[unlikely]] { return_home(stream); }
  void* ptr{};
  try {
    ptr = base::do_allocate(bytes, stream);
  } catch (...) {  // a failed growth may have moved free memory: the listeners hear of it
    if (listeners_.pending()) { listeners_.deliver(); }
    throw;
  }
  if (listeners_.pending()) [[unlikely]] { listeners_.deliver(); }
  return ptr;
}

void vmm_pool_memory_resource::return_home(cuda_stream_view stream) noexcept
{
  try {
    if (!worth_going_home()) { return; }
    auto const move = [this](detail::coalescing_free_list& idle) { move_home(idle); };
    if (get_runtime().stream_capturing(stream.value()) || !with_idle_when_done(stream, move)) {
      // The stream's work still runs (or is being captured): the next such moment goes home.
      under_grow_lock([&] { placement().watch_for_empty(); });
    }
  } catch (...) {  // NOLINT(bugprone-empty-catch): the layout stays; the allocation goes on
  }
  if (listeners_.pending()) { listeners_.deliver(); }
  check_after_own_slow_path("return_home");
}

// A run that freed fewer than home_frees_per_handle blocks for each handle a return would move is
// not worth the moves: a loop of one large allocation and its free, whose growth moves free
// handles, would move them there and back every time. Its layout becomes home instead.
bool vmm_pool_memory_resource::worth_going_home()
{
  bool go = false;
  under_grow_lock([&] {
    if (frozen_.load()) { return; }
    auto const moves = backing_.moves_home();  // 0: at home, or the present layout became home
    if (moves == 0) {
      home_due_ = false;
    } else if (!home_due_ && placement().last_run_frees() < moves * home_frees_per_handle) {
      backing_.remember_home();
    } else {
      home_due_ = go = true;
    }
  });
  return go;
}

void vmm_pool_memory_resource::move_home(detail::coalescing_free_list& idle)
{
  if (frozen_.load() || idle.free_bytes() != backing_.mapped_bytes()) {
    placement().watch_for_empty();  // paused, or no longer wholly free: the next such moment
    return;
  }
  backing_.set_recording(listeners_.any());
  struct queue_on_exit {  // what was mapped and unmapped, whether the moves succeed or throw
    vmm_pool_memory_resource* self;
    ~queue_on_exit() { self->queue_events(); }
  } const queue{this};
  home_due_        = false;
  auto const moved = backing_.return_home(idle);
  if (moved != 0) {
    home_returns_.fetch_add(1, std::memory_order_relaxed);
    home_moved_handles_.fetch_add(moved, std::memory_order_relaxed);
  }
}

void vmm_pool_memory_resource::refuse_paused(std::size_t bytes) const
{
  GPUMEM_FAIL(paused_error,
              detail::format(resource_name, ": cannot allocate ", detail::bytes_str(bytes),
                             ": the pool is ", to_string(state_.load()),
                             " (its memory was given back by pause()); call resume() first"));
}

void vmm_pool_memory_resource::check_backing(std::vector<detail::free_block> const& blocks) const
{
  backing_.check(blocks);
  auto const state = state_.load();
  GPUMEM_INVARIANT(state == pause_state::active || (frozen_.load() && backing_.paused()),
                   resource_name,
                   detail::format("state ", to_string(state), " but allocations are ",
                                  frozen_.load() ? "refused" : "served", " and the memory is ",
                                  backing_.paused() ? "given back" : "mapped"));
  GPUMEM_INVARIANT(state != pause_state::paused_offloaded || backing_.offloaded() ||
                       backing_.mapped_bytes() == 0,
                   resource_name, "paused with offloaded contents, but no host copy is held");
  GPUMEM_INVARIANT(frozen_.load() || !backing_.paused(), resource_name,
                   "allocations served while the memory is given back");
}

namespace {

std::uint64_t nanoseconds_since(std::chrono::steady_clock::time_point start)
{
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start)
          .count());
}

std::vector<vmm_mapping_event> events_of(std::vector<detail::vmm_backing::run> runs,
                                         vmm_mapping_cause cause, bool mapped) noexcept
{
  std::vector<vmm_mapping_event> events;
  try {
    for (auto& r : runs) {
      events.push_back({r.at, r.bytes, std::move(r.handles), cause, mapped, std::move(r.sizes)});
    }
  } catch (...) {  // NOLINT(bugprone-empty-catch): host memory exhausted: fewer events
  }
  return events;
}

}  // namespace

std::vector<vmm_mapping_event> vmm_pool_memory_resource::mapped_runs()
{
  std::vector<detail::vmm_backing::run> runs;
  under_grow_lock([&] { runs = backing_.present_runs(); });
  return events_of(std::move(runs), vmm_mapping_cause::growth, true);
}

vmm_pool_memory_resource::transition vmm_pool_memory_resource::enter_transition(char const* call)
{
  GPUMEM_EXPECTS(transition_thread_.load() != std::this_thread::get_id(), logic_error,
                 detail::format(resource_name, ": ", call,
                                "() called from a map or unmap listener of the same pool during "
                                "a pause or resume (it would wait for itself)"));
  return transition{this};
}

vmm_pool_memory_resource::transition::transition(vmm_pool_memory_resource* pool)
    : pool_{pool}, lock_{pool->pause_mutex_}
{
  pool_->transition_thread_.store(std::this_thread::get_id());
}

vmm_pool_memory_resource::transition::~transition()
{
  pool_->transition_thread_.store(std::thread::id{});
}

bool vmm_pool_memory_resource::pause(pause_mode mode)
{
  return pause_after(mode, nullptr);
}

bool vmm_pool_memory_resource::pause(pause_mode mode, std::span<cuda_stream_view const> streams)
{
  return pause_after(mode, &streams);
}

void vmm_pool_memory_resource::freeze_after(std::span<cuda_stream_view const> streams)
{
  frozen_.store(true);  // from now on, no allocation or growth changes the layout
  std::vector<cudaStream_t> distinct;
  for (auto s : streams) {
    if (std::find(distinct.begin(), distinct.end(), s.value()) != distinct.end()) { continue; }
    distinct.push_back(s.value());
    get_runtime().stream_synchronize(s.value());
  }
  // Their free blocks go back for good, as pause(mode)'s trim_to(0) does for every stream's.
  with_idle_of(distinct, [&](detail::coalescing_free_list& idle) {
    backing_.set_recording(listeners_.any());
    (void)backing_.release_idle(idle, 0);
    queue_events();
  });
  if (listeners_.pending()) { listeners_.deliver(); }
}

bool vmm_pool_memory_resource::pause_after(pause_mode mode,
                                           std::span<cuda_stream_view const> const* streams)
{
  auto const start  = std::chrono::steady_clock::now();
  auto const serial = enter_transition("pause");
  if (state_.load() != pause_state::active) { return false; }
  if (streams == nullptr) {
    trim_to(0);           // free memory goes back for good: resume maps only what holds allocations
    frozen_.store(true);  // from now on, no growth changes the layout
  }
  bool done = false;
  struct thaw_on_failure {
    vmm_pool_memory_resource* self;
    bool const& done;
    ~thaw_on_failure()
    {
      if (!done && self->state_.load() == pause_state::active) { self->frozen_.store(false); }
    }
  } const thaw{this, done};
  if (streams == nullptr) {
    get_runtime().device_synchronize();  // any stream may use the memory (see the header)
  } else {
    freeze_after(*streams);  // the caller named the streams that use it
  }
  std::vector<detail::vmm_backing::run> runs;
  under_grow_lock([&] {
    if (listeners_.any()) { runs = backing_.present_runs(); }
  });
  listeners_.notify(events_of(std::move(runs), vmm_mapping_cause::pause, false));  // before
  auto const offload = mode != pause_mode::discard;
  try {
    under_grow_lock([&] {
      try {
        backing_.pause(mode, cudaStreamPerThread);
      } catch (...) {
        if (backing_.paused()) { state_.store(pause_state::paused_offloaded); }  // could not undo
        if (listeners_.any()) { runs = backing_.present_runs(); }
        throw;
      }
      state_.store(offload ? pause_state::paused_offloaded : pause_state::paused_discarded);
    });
  } catch (...) {  // what was announced as unmapped and is mapped (again) is announced as such
    listeners_.notify(events_of(std::move(runs), vmm_mapping_cause::resume, true));
    throw;
  }
  done = true;
  pauses_.fetch_add(1);
  pause_ns_.fetch_add(nanoseconds_since(start));
  return true;
}

bool vmm_pool_memory_resource::resume()
{
  auto const start  = std::chrono::steady_clock::now();
  auto const serial = enter_transition("resume");
  if (state_.load() == pause_state::active) { return false; }
  std::vector<detail::vmm_backing::run> runs;
  under_grow_lock([&] {
    runs = backing_.resume(cudaStreamPerThread, options_.keep_offload_staging);  // or unwinds
    state_.store(pause_state::active);
    frozen_.store(false);
  });
  resumes_.fetch_add(1);
  resume_ns_.fetch_add(nanoseconds_since(start));
  listeners_.notify(events_of(std::move(runs), vmm_mapping_cause::resume, true));  // after
  return true;
}

// A pointer outside the pool's range is a single-handle allocation or a bad free (the core
// reports it); inside, the core's path. The extra cost on the hot path: one relaxed load.
void vmm_pool_memory_resource::do_deallocate(void* ptr, std::size_t bytes,
                                             cuda_stream_view stream) noexcept
{
  if (singles_.count() != 0 && !in_range(ptr)) {
    if (auto const requested = singles_.deallocate(ptr, stream.value())) {
      if (!size_matches(bytes, align_up(*requested, allocation_alignment))) {
        report_bad(ptr, bytes,
                   detail::format("size differs from the single-handle allocation (", *requested,
                                  " bytes); it is freed"));
      }
      return;
    }
  }
  base::do_deallocate(ptr, bytes, stream);
}

vmm_pool_stats vmm_pool_memory_resource::stats() const
{
  auto const free = get_free_stats();
  vmm_pool_stats s{};
  s.free_bytes         = free.free_bytes;
  s.largest_free_bytes = free.largest_bytes;
  // The backing changes only under the grow lock: read it there.
  const_cast<vmm_pool_memory_resource*>(this)->under_grow_lock([&] {
    auto const blocks    = free_blocks();  // no growth or trim moves them meanwhile
    s.movable_free_bytes = std::min(backing_.movable_bytes(blocks), s.free_bytes);
    s.pinned_free_bytes  = s.free_bytes - s.movable_free_bytes;
    s.mapped_bytes       = backing_.physical_bytes();
    s.paused_bytes       = backing_.mapped_bytes() - backing_.physical_bytes();
    s.reserved_bytes     = backing_.range().size;
    s.handles            = backing_.handle_count();
    s.spare_bytes        = backing_.spare_bytes();
    s.spare_handles      = backing_.spare_count();
    s.held_bytes         = s.mapped_bytes + s.spare_bytes;
    s.staging_bytes      = backing_.staging_bytes();
    s.offload_file_bytes = backing_.offload_file_bytes();
    s.state              = state_.load();
  });
  s.single_handle_allocations = singles_.count();
  s.single_handle_bytes       = singles_.mapped_bytes();
  s.pauses                    = pauses_.load();
  s.resumes                   = resumes_.load();
  s.pause_seconds             = static_cast<double>(pause_ns_.load()) * 1e-9;
  s.resume_seconds            = static_cast<double>(resume_ns_.load()) * 1e-9;
  s.home_returns              = home_returns_.load();
  s.home_moved_handles        = home_moved_handles_.load();
  s.listener_failures         = listeners_.failures();
  return s;
}

}  // namespace gpumem::mr
