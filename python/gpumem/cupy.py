"""CuPy on gpumem: CuPy arrays allocated from a gpumem resource, on CuPy's current stream.

    import cupy, gpumem.cupy
    pool = gpumem.cupy.use("statistics>pool:initial=256MiB>cuda")
    x = cupy.arange(10**6) ** 2              # allocated from the pool
    print(pool.get_bytes_counter())

``allocator(resource)`` returns the function for ``cupy.cuda.set_allocator``: each allocation is
a ``gpumem.DeviceBuffer`` made on ``cupy.cuda.get_current_stream()`` and owned by CuPy's memory
object; CuPy's garbage collection frees it on that stream. Any gpumem resource works (a
CudaAsyncMemoryResource, a pool, an adaptor stack, ``from_spec(...)``).

``use_pinned()`` makes a gpumem host resource (default: ``PinnedMemoryResource``, page-locked
memory from ``cudaMallocHost``) CuPy's pinned-memory allocator, which CuPy uses for
asynchronous copies between host and device. ``free_all_blocks()`` gives the memory the resource
caches back to the device, as ``cupy.get_default_memory_pool().free_all_blocks()`` does for
CuPy's own pool.
"""

from __future__ import annotations

from . import (
    DeviceBuffer,
    DeviceMemoryResource,
    HostMemoryResource,
    from_spec,
    get_current_device_resource,
)
from . import free_all_blocks as _free_all_blocks

_in_use: DeviceMemoryResource | None = None  # the resource use() installed


def allocator(resource: str | DeviceMemoryResource | None = None):
    """A CuPy allocator (``size -> cupy.cuda.MemoryPointer``) backed by ``resource`` (a spec
    string, a resource, or None for the current device's gpumem resource)."""
    import cupy

    if isinstance(resource, str):
        resource = from_spec(resource)

    def gpumem_allocator(nbytes: int):
        mr = resource if resource is not None else get_current_device_resource()
        stream = cupy.cuda.get_current_stream().ptr
        buf = DeviceBuffer(nbytes, stream, mr)
        mem = cupy.cuda.UnownedMemory(buf.ptr, nbytes, buf, cupy.cuda.Device().id)
        return cupy.cuda.MemoryPointer(mem, 0)

    gpumem_allocator.resource = resource
    return gpumem_allocator


def use(resource: str | DeviceMemoryResource = "pool>cuda"):
    """Builds ``resource`` (spec string or resource), makes it CuPy's allocator, returns it."""
    import cupy

    global _in_use
    if isinstance(resource, str):
        resource = from_spec(resource)
    cupy.cuda.set_allocator(allocator(resource))
    _in_use = resource
    return resource


def free_all_blocks(resource: DeviceMemoryResource | None = None) -> bool:
    """Gives the free memory of ``resource`` (None: the one ``use()`` installed, else the
    current device's gpumem resource) and the layers below it back to the device, where they can
    (see ``gpumem.free_all_blocks``). Arrays still alive keep their memory."""
    return _free_all_blocks(resource if resource is not None else _in_use)


class _HostBlock:
    """One host allocation, freed when CuPy lets go of it (CuPy reads ``ptr`` and ``size``)."""

    __slots__ = ("ptr", "size", "_resource", "_nbytes")

    def __init__(self, resource: HostMemoryResource, size: int):
        self._resource = resource
        self._nbytes = max(int(size), 1)
        self.ptr = resource.allocate(self._nbytes)
        self.size = int(size)

    def __del__(self):
        if self.ptr:
            self._resource.deallocate(self.ptr, self._nbytes)
            self.ptr = 0


def pinned_allocator(resource: HostMemoryResource | None = None):
    """A CuPy pinned-memory allocator (``size -> cupy.cuda.PinnedMemoryPointer``) backed by the
    gpumem host resource ``resource`` (None: a new ``PinnedMemoryResource``)."""
    import cupy

    from . import PinnedMemoryResource

    if resource is None:
        resource = PinnedMemoryResource()
    if not isinstance(resource, HostMemoryResource):
        raise TypeError(f"a pinned-memory allocator needs a gpumem host resource "
                        f"(PinnedMemoryResource, ...), got {resource!r}")

    def gpumem_pinned_allocator(nbytes: int):
        return cupy.cuda.PinnedMemoryPointer(_HostBlock(resource, nbytes), 0)

    gpumem_pinned_allocator.resource = resource
    return gpumem_pinned_allocator


def use_pinned(resource: HostMemoryResource | None = None) -> HostMemoryResource:
    """Makes ``resource`` (None: a new ``PinnedMemoryResource``) CuPy's pinned-memory allocator;
    returns it."""
    import cupy

    fn = pinned_allocator(resource)
    cupy.cuda.set_pinned_memory_allocator(fn)
    return fn.resource
