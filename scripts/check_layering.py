#!/usr/bin/env python3
"""Checks the include layering of gpumem's public headers (include/gpumem/README.md).

Every header under include/gpumem belongs to one tier (the first pattern below that matches its
path); a header may include headers of its own tier and of lower tiers only. Prints each include
that goes up a tier, and each header no tier claims, and exits 1 if there is any; prints one line
and exits 0 otherwise.

    scripts/check_layering.py [ROOT]       # ROOT: the repository (default: this script's parent)
"""
import fnmatch
import pathlib
import re
import sys

# Lowest tier first. Patterns are relative to include/gpumem; the first that matches wins.
TIERS = [
    ("vocabulary and data structures", [
        "align.hpp", "error.hpp", "cuda_stream_view.hpp", "cuda_device_id.hpp", "resource_ref.hpp",
        "detail/format.hpp", "detail/address_map.hpp", "detail/free_block.hpp",
        "detail/spin_mutex.hpp", "detail/size_index.hpp", "detail/aligned_host.hpp",
        "detail/stack_links.hpp", "detail/over_aligned.hpp", "detail/cccl_compat.hpp",
        "detail/pointer_resource_ref.hpp", "detail/allocation_table.hpp",
        "detail/coalescing_free_list.hpp", "detail/fixed_size_free_list.hpp",
        "detail/stream_registry.hpp", "detail/live_allocations.hpp", "detail/stream_capture.hpp",
        "detail/growth_hook.hpp", "detail/diagnostics/*",
        "detail/invariant_checks.hpp",
        "detail/arena/address_ranges.hpp", "detail/arena/superblock.hpp",
        "detail/caching/bin_layout.hpp", "detail/caching/block_source.hpp",
        "detail/thread_cache/size_classes.hpp", "detail/thread_cache/local_cache.hpp",
        "trace/trace_event.hpp", "trace/trace_reader.hpp", "trace/trace_writer.hpp",
        "trace/compact_trace.hpp", "trace/pointer_map.hpp",
        "pool/allocation_handle_type.hpp", "pool/pool_location.hpp", "pool/pool_properties.hpp",
        "pool/shareable_pool_handle.hpp", "pool/ipc_event.hpp",
        "ipc/owned_fd.hpp", "ipc/fd_passing.hpp", "pool/owned_fd.hpp", "pool/fd_passing.hpp",
    ]),
    ("the runtime seam (CUDA and the simulated device)", [
        "runtime.hpp", "simulated_device.hpp", "detail/runtime.hpp", "detail/host_runtime.hpp",
        "detail/forwarding_runtime.hpp", "detail/scoped_current_device.hpp",
        "detail/pinned_host.hpp", "detail/vmm_single_handles.hpp", "runtime/*",
        "trace/metered_runtime.hpp",
    ]),
    ("the resource contract", [
        "mr/device_memory_resource.hpp", "mr/host_memory_resource.hpp", "mr/capabilities.hpp",
        "mr/is_resource_adaptor.hpp", "detail/runtime_leaf_resource.hpp",
    ]),
    ("resources, adaptors, allocators and memory pools", [
        "mr/*", "pool/*", "ipc/*", "detail/*", "caching_device_allocator.hpp", "containers/*",
        "device_*.hpp",
    ]),
    ("resource specs (building stacks from text)", ["spec/*"]),
    ("trace replay", ["replay/*", "trace/replay.hpp"]),
    ("the umbrella header", ["gpumem.hpp"]),
]

INCLUDE = re.compile(r'^\s*#\s*include\s*<gpumem/([^>]+)>', re.MULTILINE)


def tier_of(rel):
    for index, (_, patterns) in enumerate(TIERS):
        if any(fnmatch.fnmatchcase(rel, p) for p in patterns):
            return index
    return None


def main(argv):
    root = pathlib.Path(argv[1] if len(argv) > 1 else pathlib.Path(__file__).resolve().parent.parent)
    base = root / "include" / "gpumem"
    problems = []
    headers = sorted(p for p in base.rglob("*") if p.suffix in (".hpp", ".inl"))
    for header in headers:
        rel = header.relative_to(base).as_posix()
        mine = tier_of(rel)
        if mine is None:
            problems.append(f"include/gpumem/{rel}: in no tier; add it to scripts/check_layering.py")
            continue
        for target in INCLUDE.findall(header.read_text(encoding="utf-8", errors="replace")):
            theirs = tier_of(target)
            if theirs is not None and theirs > mine:
                problems.append(
                    f"include/gpumem/{rel} (tier {mine + 1}, {TIERS[mine][0]}) includes "
                    f"gpumem/{target} (tier {theirs + 1}, {TIERS[theirs][0]}): an upward include")
    for p in problems:
        print(p)
    if problems:
        print(f"layering: {len(problems)} problem(s) in {len(headers)} headers")
        return 1
    print(f"layering: {len(headers)} headers in {len(TIERS)} tiers, no upward include")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
