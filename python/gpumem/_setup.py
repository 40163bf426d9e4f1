"""One call to set up each device's resource (``reinitialize``) and one to give cached memory
back (``free_all_blocks``)."""

from __future__ import annotations

from typing import Iterable

__all__ = ["reinitialize", "free_all_blocks"]


def _layers(resource):
    """The resource and the ones below it that Python knows of (``upstream``)."""
    seen = set()
    while resource is not None and id(resource) not in seen:
        seen.add(id(resource))
        yield resource
        resource = getattr(resource, "_upstream", None)


def free_all_blocks(resource=None) -> bool:
    """Gives the free memory that ``resource`` (None: the current device's resource) and the
    layers below it hold back to the device: per-thread caches flush, the CUB-style caching
    allocator frees its cached blocks, ``vmm_pool`` and CUDA memory pools (``cuda_async``) trim
    to what is in use (``vmm_pool`` releases its spare handles too). ``pool``, ``arena`` and the
    other suballocators keep what they grew to
    until they are destroyed. Memory still in use stays. Returns True when some layer could give
    memory back. Also a method of every resource: ``pool.free_all_blocks()``."""
    from . import _gpumem, get_current_device_resource

    if resource is None:
        resource = get_current_device_resource()
    could = False
    for layer in _layers(resource):
        could |= bool(_gpumem._trim(layer))
        free_cached = getattr(layer, "free_all_cached", None)
        if free_cached is not None:
            free_cached()
            could = True
    return could


def _as_devices(devices) -> list[int]:
    if devices is None:
        return [0]
    if isinstance(devices, int):
        return [devices]
    out = [int(d) for d in devices]
    if not out:
        raise ValueError("reinitialize() was given no devices")
    return out


def reinitialize(*, pool: bool = False, managed: bool = False,
                 initial_pool_size: int | str | None = None,
                 maximum_pool_size: int | str | None = None,
                 devices: int | Iterable[int] | None = 0, statistics: bool = False,
                 logging: bool = False, log_file_name: str | None = None,
                 spec: str | None = None, runtime=None) -> dict:
    """Builds a new resource for each of ``devices`` and makes it that device's resource, in one
    call:

        gpumem.reinitialize(pool=True, initial_pool_size="2GiB")          # device 0
        gpumem.reinitialize(spec="vmm_pool", devices=[0, 1], statistics=True)

    ``managed``: unified memory (``ManagedMemoryResource``) instead of device memory. ``pool``: a
    ``PoolMemoryResource`` over it, of ``initial_pool_size`` (default: half the free memory) and
    at most ``maximum_pool_size`` (sizes in bytes or with a unit). ``spec``: any resource stack
    of the ``gpumem`` tool instead (``pool``, ``managed`` and the sizes must then be left out).
    ``logging``: a ``LoggingResourceAdaptor`` writing CSV to ``log_file_name`` (required; with
    several devices, ``.dev<N>`` goes before its extension). ``statistics``: a
    ``StatisticsResourceAdaptor`` on top (``gpumem.get_statistics()`` reads it). ``runtime``: a
    ``gpumem.HostRuntime`` to run without a GPU.

    Each resource is built with its device current. Returns ``{device: resource}``. Memory
    allocated before goes back to the resource it came from. Raises ValueError for arguments
    that do not fit together, SpecError for a bad spec.
    """
    from . import (
        CudaMemoryResource, LoggingResourceAdaptor, ManagedMemoryResource, PoolMemoryResource,
        StatisticsResourceAdaptor, cuda_runtime, from_spec, parse_size, set_per_device_resource,
    )

    if spec is not None and (pool or managed or initial_pool_size is not None
                             or maximum_pool_size is not None):
        raise ValueError("give either spec= or pool=/managed=/initial_pool_size=/"
                         "maximum_pool_size=, not both")
    if not pool and (initial_pool_size is not None or maximum_pool_size is not None):
        raise ValueError("initial_pool_size and maximum_pool_size need pool=True")
    if logging and not log_file_name:
        raise ValueError("logging=True needs log_file_name= (the CSV file to write)")
    if not logging and log_file_name:
        raise ValueError("log_file_name= is given but logging is off; pass logging=True")
    ids = _as_devices(devices)
    size = (lambda v: None if v is None else (parse_size(v) if isinstance(v, str) else int(v)))
    rt = runtime if runtime is not None else cuda_runtime()
    previous_device = rt.current_device()
    built = {}
    try:
        for d in ids:
            rt.set_device(d)
            if spec is not None:
                top = from_spec(spec, runtime)
            else:
                leaf_cls = ManagedMemoryResource if managed else CudaMemoryResource
                top = leaf_cls(runtime) if runtime is not None else leaf_cls()
                if pool:
                    top = PoolMemoryResource(top, size(initial_pool_size),
                                             size(maximum_pool_size))
            if logging:
                name = log_file_name
                if len(ids) > 1:
                    stem, dot, ext = name.rpartition(".")
                    name = f"{stem}.dev{d}.{ext}" if dot and "/" not in ext else f"{name}.dev{d}"
                top = LoggingResourceAdaptor(top, name)
            if statistics:
                top = StatisticsResourceAdaptor(top)
            built[d] = top
    finally:
        rt.set_device(previous_device)
    for d, r in built.items():
        set_per_device_resource(d, r)
    return built
