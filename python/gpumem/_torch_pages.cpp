// gpumem.torch's paged memory pools follow PyTorch's allocator trace: this small extension, built
// against the PyTorch in use on first use of mem_pool(paged=True), attaches one trace tracker to
// PyTorch's CUDA caching allocator and forwards every allocation (before PyTorch hands the block
// out) and every completed free to gpumem's gpumem_torch_pages_event, which backs or frees the
// pages of blocks inside paged pools and ignores the rest. PyTorch calls the tracker with its
// allocator lock held; the forward takes gpumem's locks only.
//
// A block whose pages cannot be backed (the device is out of memory) raises PyTorch's error with
// gpumem's reason from inside the allocation: the tensor is never handed out.
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/util/Exception.h>
#include <torch/extension.h>

#include <atomic>
#include <cstdint>
#include <mutex>

namespace {

using event_fn = int (*)(int action, int device, unsigned long long addr, unsigned long long size,
                         void* stream);
using error_fn = char const* (*)();

std::atomic<event_fn> forward{nullptr};
std::atomic<error_fn> last_error{nullptr};
std::once_flag attached;

void on_trace(c10::cuda::CUDACachingAllocator::TraceEntry const& te)
{
  using action = c10::cuda::CUDACachingAllocator::TraceEntry::Action;
  int kind{};
  if (te.action_ == action::ALLOC) {
    kind = 0;
  } else if (te.action_ == action::FREE_COMPLETED) {
    kind = 1;
  } else {
    return;
  }
  auto const f = forward.load(std::memory_order_acquire);
  if (f == nullptr) { return; }
  if (f(kind, static_cast<int>(te.device_), static_cast<unsigned long long>(te.addr_),
        static_cast<unsigned long long>(te.size_), static_cast<void*>(te.stream_)) != 0) {
    auto const e = last_error.load(std::memory_order_acquire);
    TORCH_CHECK(false, e != nullptr ? e() : "gpumem paged memory pool: cannot back a block");
  }
}

/// Points the tracker at gpumem's functions (addresses from ctypes) and attaches it, once.
void attach(std::uint64_t event_address, std::uint64_t error_address)
{
  last_error.store(reinterpret_cast<error_fn>(error_address), std::memory_order_release);
  forward.store(reinterpret_cast<event_fn>(event_address), std::memory_order_release);
  std::call_once(attached,
                 [] { c10::cuda::CUDACachingAllocator::attachAllocatorTraceTracker(&on_trace); });
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m)
{
  m.def("attach", &attach, "Forwards PyTorch's allocator trace to gpumem's paged memory pools");
}
