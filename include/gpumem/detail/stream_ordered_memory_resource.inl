// Slow-path bodies of detail::stream_ordered_memory_resource (included by its header only).
#pragma once

namespace gpumem::detail {

template <class D, class L, class G, template <class> class P>
stream_ordered_memory_resource<D, L, G, P>::~stream_ordered_memory_resource()
{
  streams_.for_each([this](stream_state& s) {
    if (s.event != nullptr) { runtime_->event_destroy(s.event); }
  });
}

template <class D, class L, class G, template <class> class P>
void stream_ordered_memory_resource<D, L, G, P>::record(stream_state& mine, free_block const& block)
{
  try {
    table_.insert(block);
  } catch (...) {  // host memory exhausted: the block goes back, the resource stays consistent
    std::lock_guard lock{mine.mutex};
    mine.list.insert(block);
    throw;
  }
}

template <class D, class L, class G, template <class> class P>
void stream_ordered_memory_resource<D, L, G, P>::report_bad(void const* ptr, std::size_t bytes,
                                                            std::string const& why) noexcept
{
  auto const count = bad_frees_.fetch_add(1) + 1;
  report_bad_deallocation(D::resource_name, ptr, bytes, why, count);
}

template <class D, class L, class G, template <class> class P>
free_block stream_ordered_memory_resource<D, L, G, P>::allocate_slow(stream_state& mine,
                                                                     std::size_t size,
                                                                     cuda_stream_view stream)
{
  if (auto b = take_unowned(mine, size); b.valid()) { return b; }
  if (auto b = steal(mine, size, stream); b.valid()) { return b; }
  std::lock_guard lock{grow_mutex_};
  if (auto b = take_unowned(mine, size); b.valid()) { return b; }  // another thread grew meanwhile
  if constexpr (steal_policy::grows_before_reclaim) {
    if (auto b = grow_before_reclaim(mine, size, stream); b.valid()) { return b; }
  }
  if (reclaim()) {
    if (auto b = take_unowned(mine, size); b.valid()) { return b; }
  }
  if (auto b = after_growth_hook(mine, size); b.valid()) { return b; }
  return grow(mine, size, stream);
}

// Under the grow lock, for a steal policy whose donors keep their last blocks (same_size_steal):
// one growth costs less than taking the other streams' last blocks, each steal an event record
// and a stream wait (driver calls that many threads contend for), which would leave those streams
// as short as this one. Their blocks are reclaimed (a device synchronization) only when the
// upstream has no memory; with none to reclaim, the upstream's error goes to the caller.
template <class D, class L, class G, template <class> class P>
free_block stream_ordered_memory_resource<D, L, G, P>::grow_before_reclaim(stream_state& mine,
                                                                           std::size_t size,
                                                                           cuda_stream_view stream)
{
  try {
    return grow(mine, size, stream);
  } catch (out_of_memory const&) {
    if (!reclaim()) { throw; }
  }
  return take_unowned(mine, size);
}

// Under the grow lock: the hook's frees land in their streams' lists (this thread's cache frees
// on the streams it cached for), or where the placement takes them: S's list and the idle list
// first, then everything behind a reclaim.
template <class D, class L, class G, template <class> class P>
free_block stream_ordered_memory_resource<D, L, G, P>::after_growth_hook(stream_state& mine,
                                                                         std::size_t size)
{
  bool gave_back = false;
  for (auto const& h : growth_hooks_) { gave_back = h.fn(h.context) || gave_back; }
  if (!gave_back) { return {}; }
  if (auto b = take_from(mine, size); b.valid()) { return b; }
  if (auto b = take_unowned(mine, size); b.valid()) { return b; }
  if (reclaim()) { return take_unowned(mine, size); }
  return {};
}

template <class D, class L, class G, template <class> class P>
free_block stream_ordered_memory_resource<D, L, G, P>::take_unowned(std::size_t size)
{
  std::lock_guard lock{unowned_.mutex};
  return unowned_.list.take(size);
}

// The slow path's: under the idle list's lock, a block taken is ordered for `mine` by the
// placement (after another stream's queued work that may still use it).
template <class D, class L, class G, template <class> class P>
free_block stream_ordered_memory_resource<D, L, G, P>::take_unowned(stream_state& mine,
                                                                    std::size_t size)
{
  std::lock_guard lock{unowned_.mutex};
  auto const b = unowned_.list.take(size);
  if (b.valid()) {
    try {
      placement_.order_for(mine);
    } catch (...) {
      unowned_.list.insert(b);
      throw;
    }
  }
  return b;
}

// The steal policy decides which donors keep their blocks and what a steal takes along with the
// block asked for (same_size_steal: half of a same-size list, covered by the same event).
template <class D, class L, class G, template <class> class P>
free_block stream_ordered_memory_resource<D, L, G, P>::steal(stream_state& mine, std::size_t size,
                                                             cuda_stream_view stream)
{
  steal_policy taken{prototype_};
  free_block found{};
  stream_state* donor = nullptr;
  // Stops at the first stream that has a block; streams with nothing free cost one flag load.
  streams_.find_if([&](stream_state& other) {
    if (!other.maybe_free.load(std::memory_order_relaxed) || &other == &mine ||
        !other.identity.recordable_here()) {
      return false;
    }
    std::lock_guard lock{other.mutex};
    if (taken.donor_keeps(other.list)) { return false; }
    found = other.list.take(size);
    if (!found.valid()) {
      if (other.list.empty()) { other.maybe_free.store(false, std::memory_order_relaxed); }
      return false;
    }
    try {
      order_after(other, stream);
    } catch (...) {
      other.list.insert(found);
      throw;
    }
    taken.take_extra(other.list);
    donor = &other;
    if (other.list.empty()) { other.maybe_free.store(false, std::memory_order_relaxed); }
    return true;
  });
  if (taken.has_extra()) { adopt_stolen(mine, *donor, taken); }
  return found;
}

// Blocks stolen along with one: into `mine`'s list (the stream is ordered after them), or back to
// the donor when host memory is too short to grow `mine`'s list. (Both failing ends the process:
// the blocks could be neither kept nor returned.)
template <class D, class L, class G, template <class> class P>
void stream_ordered_memory_resource<D, L, G, P>::adopt_stolen(stream_state& mine,
                                                              stream_state& donor,
                                                              steal_policy& taken) noexcept
{
  try {
    std::lock_guard lock{mine.mutex};
    taken.deliver_to(mine.list);
    mine.maybe_free.store(true, std::memory_order_relaxed);
    return;
  } catch (std::bad_alloc const&) {
  }
  std::lock_guard lock{donor.mutex};
  taken.deliver_to(donor.list);
  donor.maybe_free.store(true, std::memory_order_relaxed);
}

// The event is recorded now, after the free (which happened before `other`'s mutex was taken), so
// it covers all work enqueued on the other stream before the block was freed.
template <class D, class L, class G, template <class> class P>
void stream_ordered_memory_resource<D, L, G, P>::order_after(stream_state& other,
                                                             cuda_stream_view stream)
{
  if (other.event == nullptr) { other.event = runtime_->event_create(); }
  runtime_->event_record(other.event, other.identity.stream);
  runtime_->stream_wait_event(stream.value(), other.event);
}

// Detach first, then synchronize: a block freed after the detach is not moved, so everything moved
// was freed before the synchronization and its stream's prior work is complete. A first
// synchronization before anything moves fails without changing the lists when CUDA refuses to
// synchronize at all (during a CUDA graph capture): the blocks stay with their streams.
template <class D, class L, class G, template <class> class P>
bool stream_ordered_memory_resource<D, L, G, P>::reclaim()
{
  bool any = false;
  streams_.for_each(
      [&](stream_state& s) { any = any || s.maybe_free.load(std::memory_order_relaxed); });
  if (!any) { return false; }
  runtime_->device_synchronize();
  L detached{prototype_};
  streams_.for_each([&](stream_state& s) {
    if (!s.maybe_free.load(std::memory_order_relaxed)) { return; }
    std::lock_guard lock{s.mutex};
    detached.merge(s.list);
    s.maybe_free.store(false, std::memory_order_relaxed);
  });
  if (detached.empty()) { return false; }
  std::exception_ptr failure;
  try {
    runtime_->device_synchronize();
  } catch (...) {  // the device failed; the blocks are kept (the resource cannot be used safely)
    failure = std::current_exception();
  }
  std::lock_guard lock{unowned_.mutex};
  unowned_.list.merge(detached);
  if (failure) { std::rethrow_exception(failure); }
  return true;
}

// One host thread, several streams (one_stream_placement): the frees that the other streams made
// since the first stream's last allocation join the idle list, where they coalesce with all free
// memory, and the first stream is ordered after them: per stream, an event recorded on it now
// (after its frees) and a wait on the first stream (two driver calls, no host wait). A stream
// whose event this thread cannot record (another thread's per-thread stream) keeps its blocks, as
// does every stream while it or the first stream is being captured into a CUDA graph (an event
// from outside a capture cannot be waited on inside it: one cudaStreamIsCapturing each) and once
// several threads allocate. Holds a stream's lock and then the idle list's (the lock order's one
// nesting of the two).
template <class D, class L, class G, template <class> class P>
void stream_ordered_memory_resource<D, L, G, P>::hand_over(stream_state& first)
{
  auto const to = first.identity.stream;
  if (!first.identity.recordable_here() || runtime_->stream_capturing(to)) { return; }
  streams_.for_each([&](stream_state& s) {
    if (&s == &first || !s.maybe_free.load(std::memory_order_relaxed) ||
        !s.identity.recordable_here()) {
      return;
    }
    std::lock_guard lock{s.mutex};
    if (s.list.empty() || runtime_->stream_capturing(s.identity.stream)) { return; }
    order_after(s, to);  // throws: nothing moved
    std::lock_guard ilock{unowned_.mutex};
    if (!placement_.accept_handover()) { return; }
    unowned_.list.merge(s.list);
    s.maybe_free.store(false, std::memory_order_relaxed);
  });
}

template <class D, class L, class G, template <class> class P>
void stream_ordered_memory_resource<D, L, G, P>::adopt_chunk(free_block chunk)
{
  std::lock_guard lock{grow_mutex_};
  chunk = growth_.adopt(chunk);
  std::lock_guard ulock{unowned_.mutex};
  unowned_.list.insert_chunk(chunk);
}

template <class D, class L, class G, template <class> class P>
template <class F>
decltype(auto) stream_ordered_memory_resource<D, L, G, P>::with_idle(F&& f)
{
  std::lock_guard lock{grow_mutex_};
  reclaim();
  std::lock_guard ulock{unowned_.mutex};
  placement_.settle_idle();
  auto src = source();
  return growth_.track(src, [&]() -> decltype(auto) { return f(unowned_.list); });
}

template <class D, class L, class G, template <class> class P>
template <class F>
bool stream_ordered_memory_resource<D, L, G, P>::with_idle_when_done(cuda_stream_view stream, F&& f)
{
  auto& mine = streams_.get(stream.value());  // before the locks (lock order: the registry first)
  std::lock_guard lock{grow_mutex_};
  std::lock_guard ulock{unowned_.mutex};
  if (placement_.idle_in_use(mine)) { return false; }
  placement_.settle_idle();
  auto src = source();
  growth_.track(src, [&] { f(unowned_.list); });
  return true;
}

template <class D, class L, class G, template <class> class P>
template <class F>
decltype(auto) stream_ordered_memory_resource<D, L, G, P>::with_idle_of(
    std::vector<cudaStream_t> const& passed, F&& f)
{
  std::vector<stream_identity> named;
  named.reserve(passed.size());
  for (auto s : passed) { named.push_back(stream_identity::of(s)); }  // as the caller sees them
  std::lock_guard lock{grow_mutex_};
  L detached{prototype_};
  streams_.for_each([&](stream_state& s) {
    if (!s.maybe_free.load(std::memory_order_relaxed)) { return; }
    if (std::find(named.begin(), named.end(), s.identity) == named.end()) { return; }
    std::lock_guard slock{s.mutex};
    detached.merge(s.list);
    s.maybe_free.store(false, std::memory_order_relaxed);
  });
  std::lock_guard ulock{unowned_.mutex};
  unowned_.list.merge(detached);
  placement_.settle_idle();
  auto src = source();
  return growth_.track(src, [&]() -> decltype(auto) { return f(unowned_.list); });
}

template <class D, class L, class G, template <class> class P>
void stream_ordered_memory_resource<D, L, G, P>::release_all() noexcept
{
  std::lock_guard lock{grow_mutex_};
  try {
    if (!growth_.chunks().empty()) { runtime_->device_synchronize(); }
  } catch (...) {  // NOLINT(bugprone-empty-catch): releasing must go on; the device has failed
  }
  streams_.for_each([](stream_state& s) {
    std::lock_guard slock{s.mutex};
    s.list.clear();
  });
  {
    std::lock_guard ulock{unowned_.mutex};
    unowned_.list.clear();
  }
  table_.clear();
  auto src = source();
  growth_.release(src);
}

template <class D, class L, class G, template <class> class P>
free_stats stream_ordered_memory_resource<D, L, G, P>::get_free_stats() const
{
  free_stats total{};
  streams_.for_each([&](stream_state& s) {
    std::lock_guard lock{s.mutex};
    total.add(s.list.stats());
  });
  std::lock_guard lock{unowned_.mutex};
  total.add(unowned_.list.stats());
  return total;
}

template <class D, class L, class G, template <class> class P>
std::vector<free_block> stream_ordered_memory_resource<D, L, G, P>::free_blocks() const
{
  std::vector<free_block> blocks;
  auto visit = [&](stream_state& s) {
    std::lock_guard lock{s.mutex};
    s.list.for_each([&](free_block b) { blocks.push_back(b); });
  };
  streams_.for_each(visit);
  visit(unowned_);
  return blocks;
}

template <class D, class L, class G, template <class> class P>
void stream_ordered_memory_resource<D, L, G, P>::check_invariants() const
{
  std::lock_guard lock{grow_mutex_};
  placement_.check_invariants(D::resource_name);
  std::vector<free_block> blocks;
  std::size_t free_bytes{};
  auto visit = [&](stream_state& s) {
    std::lock_guard slock{s.mutex};
    s.list.check_invariants();
    free_bytes += s.list.stats().free_bytes;
    s.list.for_each([&](free_block b) { blocks.push_back(b); });
  };
  streams_.for_each(visit);
  visit(unowned_);
  std::size_t used_bytes{};
  table_.for_each([&](free_block b) {
    used_bytes += b.size;
    blocks.push_back(b);
  });
  growth_.check_invariants(D::resource_name, source(), blocks);
  GPUMEM_INVARIANT(free_bytes + used_bytes == growth_.bytes(), D::resource_name,
                   format("free bytes ", free_bytes, " + handed-out bytes ", used_bytes,
                          " != pool size ", growth_.bytes()));
  check_blocks(D::resource_name, std::move(blocks), growth_.chunks());
}

}  // namespace gpumem::detail
