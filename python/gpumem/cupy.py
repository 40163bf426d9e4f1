"""CuPy on gpumem: CuPy arrays allocated from a gpumem resource, on CuPy's current stream.

    import cupy, gpumem.cupy
    pool = gpumem.cupy.use("statistics>pool:initial=256MiB>cuda")
    x = cupy.arange(10**6) ** 2              # allocated from the pool
    print(pool.get_bytes_counter())

``allocator(resource)`` returns the function for ``cupy.cuda.set_allocator``: each allocation is
a ``gpumem.DeviceBuffer`` made on ``cupy.cuda.get_current_stream()`` and owned by CuPy's memory
object; CuPy's garbage collection frees it on that stream. Any gpumem resource works (a
CudaAsyncMemoryResource, a pool, an adaptor stack, ``from_spec(...)``).
"""

from __future__ import annotations

from . import DeviceBuffer, DeviceMemoryResource, from_spec, get_current_device_resource


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

    if isinstance(resource, str):
        resource = from_spec(resource)
    cupy.cuda.set_allocator(allocator(resource))
    return resource
