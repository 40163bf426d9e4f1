#!/usr/bin/env python3
"""Checks the include layering of gpumem's headers and sources (include/gpumem/README.md).

Every header under include/gpumem belongs to one tier (the first pattern of TIERS that matches
its path); a header may include headers of its own tier and of lower tiers only. Every source
folder under src/ is built into one library and may include public headers up to one tier
(SOURCES, checked against the folders CMakeLists.txt builds into each library). Prints each
include that goes up a tier, each header no tier claims and each source folder SOURCES does not
name, and exits 1 if there is any; prints one line and exits 0 otherwise.

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

# Source folders under src/ (the longest matching prefix wins; "" is src/ itself): the highest
# tier (1-based, as in TIERS) whose headers its files may include, and the library it is built into.
SOURCES = {
    "": (4, "gpumem"),
    "detail": (4, "gpumem"),
    "diagnostics": (1, "gpumem"),
    "trace": (1, "gpumem"),
    "runtime": (2, "gpumem"),
    "runtime/cuda": (2, "gpumem"),
    "mr": (4, "gpumem"),
    "pool": (4, "gpumem"),
    "ipc": (4, "gpumem"),
    "runtime/simulated": (2, "gpumem_simulated"),
    "spec": (5, "gpumem_spec"),
    "replay": (6, "gpumem_replay"),
}
SOURCE_SUFFIXES = (".cpp", ".hpp", ".inc", ".inl")
# CMakeLists.txt: set(GPUMEM_<part>_SOURCES_DIR <folder>) builds src/<folder> into gpumem_<part>.
PART_DIR = re.compile(r"set\(GPUMEM_(\w+)_SOURCES_DIR ([\w/]+)\)")

INCLUDE = re.compile(r'^\s*#\s*include\s*<gpumem/([^>]+)>', re.MULTILINE)


def tier_of(rel):
    for index, (_, patterns) in enumerate(TIERS):
        if any(fnmatch.fnmatchcase(rel, p) for p in patterns):
            return index
    return None


def source_folder(rel):
    """The SOURCES key of a file at src/<rel>: its longest folder prefix that SOURCES names."""
    parts = pathlib.PurePosixPath(rel).parent.parts
    for n in range(len(parts), -1, -1):
        key = "/".join(parts[:n])
        if key in SOURCES:
            return key if n == len(parts) or key else None
    return None


def check_headers(base):
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
    return problems, len(headers)


def check_sources(root):
    problems = []
    src = root / "src"
    files = sorted(p for p in src.rglob("*") if p.suffix in SOURCE_SUFFIXES)
    for path in files:
        rel = path.relative_to(src).as_posix()
        folder = source_folder(rel)
        if folder is None:
            problems.append(f"src/{rel}: its folder is in no row of SOURCES in scripts/check_layering.py")
            continue
        limit, library = SOURCES[folder]
        for target in INCLUDE.findall(path.read_text(encoding="utf-8", errors="replace")):
            theirs = tier_of(target)
            if theirs is not None and theirs + 1 > limit:
                problems.append(
                    f"src/{rel} ({library}, up to tier {limit}) includes gpumem/{target} "
                    f"(tier {theirs + 1}, {TIERS[theirs][0]}): an upward include")
    cmake = root / "CMakeLists.txt"
    built = dict(PART_DIR.findall(cmake.read_text(encoding="utf-8"))) if cmake.exists() else {}
    for part, folder in built.items():
        if SOURCES.get(folder, (0, ""))[1] != f"gpumem_{part}":
            problems.append(f"CMakeLists.txt builds src/{folder} into gpumem_{part}; "
                            f"SOURCES in scripts/check_layering.py says otherwise")
    for folder, (_, library) in SOURCES.items():
        if library != "gpumem" and built.get(library.removeprefix("gpumem_")) != folder:
            problems.append(f"SOURCES puts src/{folder} into {library}; CMakeLists.txt does not")
    return problems, len(files)


def main(argv):
    root = pathlib.Path(argv[1] if len(argv) > 1 else pathlib.Path(__file__).resolve().parent.parent)
    problems, headers = check_headers(root / "include" / "gpumem")
    source_problems, sources = check_sources(root)
    problems += source_problems
    for p in problems:
        print(p)
    if problems:
        print(f"layering: {len(problems)} problem(s) in {headers} headers and {sources} sources")
        return 1
    print(f"layering: {headers} headers in {len(TIERS)} tiers and {sources} sources in "
          f"{len(SOURCES)} folders, no upward include")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
