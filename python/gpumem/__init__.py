"""gpumem: GPU memory resources for CUDA, from Python.

The C++ library's resources under Python names (``PoolMemoryResource`` is
``gpumem::mr::pool_memory_resource``; the C++ names are also in ``gpumem.mr``):

* leaf resources: ``CudaMemoryResource``, ``ManagedMemoryResource``, ``CudaAsyncMemoryResource``, ...
* suballocators over any upstream: ``PoolMemoryResource``, ``ArenaMemoryResource``, ...
* adaptors: ``StatisticsResourceAdaptor``, ``LimitingResourceAdaptor``, ``LoggingResourceAdaptor``, ...
* the per-device registry: ``set_current_device_resource`` and friends;
* ``from_spec("pool:initial=1GiB>cuda_async")`` builds a stack from the command-line tool's spec;
* ``HostRuntime``: a host stand-in for CUDA, so resources run (and are tested) with no GPU;
* ``DeviceBuffer``: memory owned by a Python object;
* ``gpumem.torch`` and ``gpumem.cupy``: drop-in allocators for PyTorch and CuPy;
* ``replay(traces, resources)``: the ``gpumem replay`` command's results (its JSON) as a dict;
* ``reinitialize(pool=True, initial_pool_size="2GiB")``: each device's resource in one call;
  ``free_all_blocks()`` gives cached memory back;
* ``enable_statistics()``, ``with statistics():``, ``@profiler``: memory statistics of the
  current resource, of a block of code, per function;
* ``gpumem.numba``: Numba's external memory manager plugin.

Errors: ``OutOfMemoryError`` (a ``MemoryError``) carries the C++ message: how much was asked,
how much is free and how fragmented the resource is.
"""

from __future__ import annotations

import threading as _threading

from . import _gpumem
from ._cli import ReplayError, replay
from ._gpumem import *  # noqa: F401,F403  (the bound classes and functions)
from ._gpumem import (
    BadAlloc,
    CudaError,
    DeviceBuffer,
    DeviceMemoryResource,
    HostRuntime,
    LogicError,
    OutOfMemoryError,
    Runtime,
    cuda_runtime,
    get_current_device,
    get_num_devices,
)

__version__ = "0.1.0"

# -- the per-device registry -------------------------------------------------------------------
# The C++ registry holds raw pointers. These dicts hold the Python objects that its two views
# (pointers, refs) point at, so that a resource lives while it is set; a missing entry means the
# initial resource (a CudaMemoryResource over the CUDA runtime).
_registry_lock = _threading.Lock()
_pointer_view: dict = {}  # device -> resource set by set_per_device_resource
_ref_view: dict = {}  # device -> resource the ref view names


def get_per_device_resource(device: int) -> DeviceMemoryResource:
    """The resource of ``device`` (initially a CudaMemoryResource)."""
    with _registry_lock:
        r = _pointer_view.get(device)
        return r if r is not None else _gpumem._get_per_device_resource(device)


def set_per_device_resource(device: int, resource: DeviceMemoryResource | None):
    """Sets the resource of ``device`` in both views (None: the initial resource); returns the
    previous one. The resource is kept alive while it is set; use it only while ``device`` is
    current. Thread-safe."""
    with _registry_lock:
        previous = _pointer_view.get(device) or _gpumem._get_per_device_resource(device)
        _gpumem._set_per_device_resource(device, resource)
        for view in (_pointer_view, _ref_view):
            if resource is None:
                view.pop(device, None)
            else:
                view[device] = resource
        return previous


def get_current_device_resource() -> DeviceMemoryResource:
    """The resource of the calling thread's current device."""
    return get_per_device_resource(get_current_device())


def set_current_device_resource(resource: DeviceMemoryResource | None):
    """Sets the resource of the current device; returns the previous one."""
    return set_per_device_resource(get_current_device(), resource)


def _ref_of(device: int) -> DeviceMemoryResource:
    r = _ref_view.get(device)
    return r if r is not None else _gpumem._initial_device_resource()


def get_per_device_resource_ref(device: int) -> DeviceMemoryResource:
    """The resource that the ref view of the registry names for ``device``."""
    with _registry_lock:
        return _ref_of(device)


def set_per_device_resource_ref(device: int, resource: DeviceMemoryResource):
    """Sets the ref view of ``device`` only (C++ code that reads refs sees it); returns the
    previous ref."""
    with _registry_lock:
        previous = _ref_of(device)
        _gpumem._set_per_device_resource_ref(device, resource)
        _ref_view[device] = resource
        return previous


def reset_per_device_resource_ref(device: int):
    """Restores the initial resource in the ref view of ``device``; returns the previous ref."""
    with _registry_lock:
        previous = _ref_of(device)
        _gpumem._reset_per_device_resource_ref(device)
        _ref_view.pop(device, None)
        return previous


def get_current_device_resource_ref() -> DeviceMemoryResource:
    """The ref view's resource of the current device."""
    return get_per_device_resource_ref(get_current_device())


def set_current_device_resource_ref(resource: DeviceMemoryResource):
    """Sets the ref view of the current device; returns the previous ref."""
    return set_per_device_resource_ref(get_current_device(), resource)


def reset_current_device_resource_ref():
    """Restores the initial resource in the current device's ref view; returns the previous."""
    return reset_per_device_resource_ref(get_current_device())


# -- sleep and wake (docs/sleep.md) ----------------------------------------------------------------
# region / pause / resume act on a VmmRegionMemoryResource (or, for pause / resume without a tag, a
# VmmPoolMemoryResource): the one given, or else the current device's resource.


def _sleep_target(resource, what: str, pool_ok: bool):
    if resource is None:
        resource = get_current_device_resource()
    if isinstance(resource, VmmRegionMemoryResource):
        return resource
    if pool_ok and isinstance(resource, VmmPoolMemoryResource):
        return resource
    wanted = "a VmmRegionMemoryResource" + (" or a VmmPoolMemoryResource" if pool_ok else "")
    raise TypeError(
        f"gpumem.{what}: needs {wanted}, got {type(resource).__name__}; pass resource=, or "
        "make one the current device resource with gpumem.set_current_device_resource()")


def region(tag: str, resource=None):
    """``with gpumem.region("kv_cache"):`` routes this thread's allocations from ``resource`` (None:
    the current device resource, a VmmRegionMemoryResource) to region ``tag``."""
    return _sleep_target(resource, "region", False).region(tag)


def pause(tag: str | None = None, offload: bool | str = False, resource=None,
          streams=None) -> int:
    """Gives the physical memory of region ``tag`` (None: every region, or the whole pool) back to
    the device, keeping every address; ``offload=True`` keeps the contents in pinned host memory
    until ``resume``, ``offload="file"`` in a temporary file (the resource's
    ``offload_directory``). Waits for the whole device first, or, given ``streams``, for those
    streams only. Returns how many regions (or pools) this call paused."""
    target = _sleep_target(resource, "pause", tag is None)
    if isinstance(target, VmmPoolMemoryResource):
        return int(target.pause(offload=offload, streams=streams))
    return target.pause(tag, offload=offload, streams=streams)


def resume(tag: str | None = None, resource=None) -> int:
    """Maps region ``tag`` (None: every region, or the whole pool) again at the same addresses and
    copies offloaded contents back. Returns how many regions (or pools) this call resumed."""
    target = _sleep_target(resource, "resume", tag is None)
    if isinstance(target, VmmPoolMemoryResource):
        return int(target.resume())
    return target.resume(tag)


# -- upstreams and runtimes ------------------------------------------------------------------------
# A resource built over an upstream remembers it (``upstream``) and, unless given one, uses the
# upstream's runtime for its events (``runtime``): a pool over a HostRuntime leaf runs entirely on
# the host stand-in.


def _runtime_property(self) -> Runtime:
    """The runtime this resource uses (the real CUDA runtime unless a HostRuntime was given)."""
    rt = getattr(self, "_runtime", None)
    return rt if rt is not None else cuda_runtime()


def _upstream_property(self):
    """The resource this one allocates from (None for a leaf)."""
    return getattr(self, "_upstream", None)


DeviceMemoryResource.runtime = property(_runtime_property)
DeviceMemoryResource.upstream = property(_upstream_property)


def _param_names(cpp_init) -> list[str]:
    """The parameter names of a bound constructor, from the signature pybind11 documents."""
    import re

    first = (cpp_init.__doc__ or "").split("\n", 1)[0]
    inside = first[first.find("(") + 1 : first.rfind(")")]
    return [m.group(1) for m in re.finditer(r"(?:^|, )(\w+):", inside)][1:]  # without self


def _remember_config(self, names: list[str], args: tuple, kwargs: dict) -> None:
    """Keeps the arguments a resource was made with, by name, for repr()."""
    config = {(names[i] if i < len(names) else f"arg{i}"): a for i, a in enumerate(args)}
    config.update(kwargs)
    if config.get("runtime") is None:
        config.pop("runtime", None)
    self._config = config


def _resource_repr(self) -> str:
    config = getattr(self, "_config", None)
    if config is None:
        spec = getattr(self, "spec", None)
        if spec is None:
            return _cpp_repr(self)
        config = {"spec": spec}
    inner = ", ".join(f"{k}={v!r}" for k, v in config.items())
    return f"{type(self).__name__}({inner})"


def _host_runtime_repr(self) -> str:
    return f"HostRuntime(capacity_bytes={self.capacity_bytes}, backed={self.backed})"


_cpp_repr = DeviceMemoryResource.__repr__
DeviceMemoryResource.__repr__ = _resource_repr
HostRuntime.__repr__ = _host_runtime_repr


def _wrap_leaf(cls):
    cpp_init = cls.__init__
    names = _param_names(cpp_init)

    def __init__(self, *args, **kwargs):
        cpp_init(self, *args, **kwargs)
        _remember_config(self, names, args, kwargs)
        self._runtime = kwargs.get("runtime", args[-1] if args else None)
        if not isinstance(self._runtime, Runtime):
            self._runtime = None

    __init__.__doc__ = cpp_init.__doc__
    cls.__init__ = __init__


def _wrap_over_upstream(cls, takes_runtime: bool):
    cpp_init = cls.__init__
    names = _param_names(cpp_init)

    def __init__(self, *args, **kwargs):
        _remember_config(self, names, args, dict(kwargs))
        upstream = args[0] if args else kwargs.get("upstream")
        if takes_runtime and kwargs.get("runtime") is None and isinstance(
            upstream, DeviceMemoryResource
        ):
            kwargs["runtime"] = upstream.runtime
        cpp_init(self, *args, **kwargs)
        self._upstream = upstream
        self._runtime = kwargs.get("runtime") or (
            upstream.runtime if isinstance(upstream, DeviceMemoryResource) else None
        )

    __init__.__doc__ = cpp_init.__doc__
    cls.__init__ = __init__


for _name in ("CudaMemoryResource", "ManagedMemoryResource", "SystemMemoryResource",
              "SamHeadroomMemoryResource", "VmmPoolMemoryResource", "VmmRegionMemoryResource"):
    if hasattr(_gpumem, _name):
        _wrap_leaf(getattr(_gpumem, _name))
for _name, _takes_runtime in (
    ("PoolMemoryResource", True), ("FixedSizeMemoryResource", True),
    ("ArenaMemoryResource", True), ("BinningMemoryResource", True),
    ("CachingMemoryResource", True), ("PrefetchResourceAdaptor", True),
    ("StatisticsResourceAdaptor", False), ("TrackingResourceAdaptor", False),
    ("LoggingResourceAdaptor", False), ("LimitingResourceAdaptor", False),
    ("AlignedResourceAdaptor", False), ("FailureCallbackResourceAdaptor", False),
    ("ThreadSafeResourceAdaptor", False),
):
    if hasattr(_gpumem, _name):
        _wrap_over_upstream(getattr(_gpumem, _name), _takes_runtime)
del _name, _takes_runtime


# -- resource specs ----------------------------------------------------------------------------------


def from_spec(spec: str, runtime: Runtime | None = None) -> DeviceMemoryResource:
    """Builds a resource stack from a spec of the ``gpumem`` tool, e.g.
    ``"pool:initial=1GiB>cuda_async"`` or ``"statistics>binning>cuda"``.

    Layers are separated by ``>``, leftmost outermost; ``name:key=value,...`` sets parameters
    (sizes like ``256MiB``). A stack that does not end in a leaf gets ``cuda``. ``runtime``: None
    for the real GPU, or a HostRuntime (``backed=False`` simulates the address space). The
    returned object is the top layer (e.g. a StatisticsResourceAdaptor, so its statistics are
    readable) and owns the whole stack. Raises SpecError (a ValueError) saying what to write
    instead; ``list_resources()`` lists the names and parameters.
    """
    top = _gpumem._build_spec(spec, runtime)
    top._runtime = runtime
    top.spec = canonical_spec(spec)
    return top


# -- C++ names ---------------------------------------------------------------------------------------


class _CppNames:
    """The resources under their C++ names: ``gpumem.mr.pool_memory_resource`` is
    ``gpumem.PoolMemoryResource``."""

    def __init__(self):
        import re

        for name in dir(_gpumem):
            if name.endswith(("MemoryResource", "ResourceAdaptor", "Resource")) and name[0].isupper():
                snake = re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()
                setattr(self, snake, getattr(_gpumem, name))
        for name in ("get_per_device_resource", "set_per_device_resource",
                     "get_current_device_resource", "set_current_device_resource",
                     "get_per_device_resource_ref", "set_per_device_resource_ref",
                     "reset_per_device_resource_ref", "get_current_device_resource_ref",
                     "set_current_device_resource_ref", "reset_current_device_resource_ref"):
            setattr(self, name, globals()[name])


mr = _CppNames()


# -- statistics, setup, giving memory back -----------------------------------------------------------

from ._setup import free_all_blocks, reinitialize  # noqa: E402
from ._statistics import (  # noqa: E402
    ProfilerRecord,
    ProfilerRecords,
    Statistics,
    StatisticsNotEnabledError,
    StatisticsScope,
    default_profiler_records,
    enable_statistics,
    get_statistics,
    pop_statistics,
    profiler,
    push_statistics,
    statistics,
)

DeviceMemoryResource.free_all_blocks = free_all_blocks
