#!/usr/bin/env python3
"""PyTorch's CUDA caching allocator as a peer of `gpumem bench -w replay`.

    torch_peer.py [--expandable] TRACE

Replays TRACE (the CSV gpumem replays: Thread,Time,Action,Pointer,Size,Stream) through PyTorch's
allocator in this process, as the tool replays its own stacks: cold (the allocator fresh), warm
(three more passes, nothing released; their median), and once more reading cudaMemGetInfo after
every allocation. --expandable sets PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True before PyTorch
starts (otherwise expandable_segments:False). The loop runs in C++ (a small extension built with
torch.utils.cpp_extension), so no Python runs between two allocations.

Prints one JSON object on standard output and exits 0:
    {"peer": ..., "cold_ns_per_event": ..., "warm_ns_per_event": ..., "peak_used_bytes": ...,
     "peak_live_bytes": ..., "used_over_live": ..., "events": ...}
or, when it cannot run (no PyTorch, no GPU, the extension does not build), {"skipped": "why"}.
"""
import json
import os
import statistics
import sys


def read_trace(path):
    """The trace's events as (allocate?, slot, size, stream) with pointers numbered as dense slots
    (a freed pointer's slot is reused), the slot count, the stream ids in order of first use and
    the peak live bytes. Frees of unknown pointers are dropped (as the replayer counts them)."""
    events, slot_of, free_slots, streams = [], {}, [], {}
    next_slot = live = peak = 0
    with open(path, newline="") as f:
        header = f.readline().strip().split(",")
        col = {name: i for i, name in enumerate(header)}
        for name in ("Action", "Pointer", "Size"):
            if name not in col:
                raise ValueError(f"{path}: no {name} column in the header {header}")
        for number, line in enumerate(f, start=2):
            line = line.strip()
            if not line:
                continue
            fields = line.split(",")
            try:
                action = fields[col["Action"]]
                pointer = int(fields[col["Pointer"]], 0)
                size = int(fields[col["Size"]])
                stream = int(fields[col["Stream"]], 0) if "Stream" in col else 0
            except (IndexError, ValueError) as e:
                raise ValueError(f"{path}:{number}: cannot read the event ({e})") from None
            s = streams.setdefault(stream, len(streams))
            if action == "allocate":
                if pointer in slot_of:  # allocated twice: the earlier block is forgotten
                    continue
                slot = free_slots.pop() if free_slots else next_slot
                next_slot = max(next_slot, slot + 1)
                slot_of[pointer] = (slot, size)
                live += size
                peak = max(peak, live)
                events.append((True, slot, size, s))
            elif action == "free":
                if pointer not in slot_of:
                    continue
                slot, size = slot_of.pop(pointer)
                free_slots.append(slot)
                live -= size
                events.append((False, slot, size, s))
            else:
                raise ValueError(f"{path}:{number}: unknown action {action!r}")
    return events, next_slot, list(streams), peak


EXTENSION = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <cuda_runtime_api.h>
#include <algorithm>
#include <chrono>
#include <vector>

namespace {
namespace alloc = c10::cuda::CUDACachingAllocator;

// One pass: allocate and free as the events say; returns {ns per event, peak device used}. With
// `measure`, device used (total - free) is read after every allocation, outside the timing.
std::vector<double> pass(std::vector<int64_t> const& kind, std::vector<int64_t> const& slot,
                         std::vector<int64_t> const& size, std::vector<int64_t> const& stream,
                         int64_t slots, std::vector<int64_t> const& stream_handles, bool measure)
{
  std::vector<void*> live(static_cast<size_t>(slots), nullptr);
  double peak_used = 0;
  double measuring = 0;
  auto const t0 = std::chrono::steady_clock::now();
  for (size_t i = 0; i < kind.size(); ++i) {
    auto s = reinterpret_cast<cudaStream_t>(stream_handles[static_cast<size_t>(stream[i])]);
    if (kind[i] != 0) {
      live[static_cast<size_t>(slot[i])] = alloc::raw_alloc_with_stream(static_cast<size_t>(size[i]), s);
      if (measure) {
        auto const m0 = std::chrono::steady_clock::now();
        size_t free_bytes = 0, total = 0;
        cudaMemGetInfo(&free_bytes, &total);
        peak_used = std::max(peak_used, static_cast<double>(total - free_bytes));
        measuring += std::chrono::duration<double>(std::chrono::steady_clock::now() - m0).count();
      }
    } else {
      alloc::raw_delete(live[static_cast<size_t>(slot[i])]);
      live[static_cast<size_t>(slot[i])] = nullptr;
    }
  }
  double const seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() - measuring;
  for (void* p : live) {
    if (p != nullptr) { alloc::raw_delete(p); }
  }
  return {seconds * 1e9 / static_cast<double>(std::max<size_t>(kind.size(), 1)), peak_used};
}

double device_used()
{
  size_t free_bytes = 0, total = 0;
  cudaMemGetInfo(&free_bytes, &total);
  return static_cast<double>(total - free_bytes);
}
}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m)
{
  m.def("replay_pass", &pass);
  m.def("device_used", &device_used);
}
"""


def skip(why):
    print(json.dumps({"skipped": why}))
    return 0


def main(argv):
    expandable = "--expandable" in argv
    paths = [a for a in argv if a != "--expandable"]
    if len(paths) != 1:
        print("usage: torch_peer.py [--expandable] TRACE", file=sys.stderr)
        return 2
    os.environ["PYTORCH_CUDA_ALLOC_CONF"] = (
        "expandable_segments:True" if expandable else "expandable_segments:False")
    peer = "torch_expandable" if expandable else "torch"
    try:
        events, slots, streams, peak_live = read_trace(paths[0])
    except (OSError, ValueError) as e:
        return skip(f"cannot read the trace: {e}")
    try:
        import torch
    except ImportError as e:
        return skip(f"PyTorch is not installed for {sys.executable} ({e})")
    if not torch.cuda.is_available():
        return skip("PyTorch sees no CUDA device")
    try:
        from torch.utils.cpp_extension import load_inline
        ext = load_inline(name="gpumem_torch_peer", cpp_sources=[EXTENSION], with_cuda=True,
                          extra_cflags=["-O2"], verbose=False)
    except Exception as e:  # a compiler or CUDA headers missing
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        return skip(f"the replay extension did not build ({first})")
    torch.cuda.init()
    keep = [torch.cuda.Stream() for _ in streams[1:]]  # trace stream 0 is the default stream
    handles = [0] + [s.cuda_stream for s in keep]
    kind = [1 if e[0] else 0 for e in events]
    slot = [e[1] for e in events]
    size = [e[2] for e in events]
    stream = [e[3] for e in events]
    torch.cuda.synchronize()
    before = ext.device_used()
    cold, _ = ext.replay_pass(kind, slot, size, stream, slots, handles, False)
    warm = statistics.median(ext.replay_pass(kind, slot, size, stream, slots, handles, False)[0]
                             for _ in range(3))  # as the tool's own stacks: 3 warm passes
    _, used = ext.replay_pass(kind, slot, size, stream, slots, handles, True)
    torch.cuda.synchronize()
    peak_used = max(0.0, used - before)
    print(json.dumps({
        "peer": peer, "cold_ns_per_event": cold, "warm_ns_per_event": warm,
        "peak_used_bytes": int(peak_used), "peak_live_bytes": peak_live,
        "used_over_live": peak_used / peak_live if peak_live else 0.0, "events": len(events)}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
