"""Numba on gpumem: Numba's CUDA device arrays allocated from gpumem, through Numba's External
Memory Management (EMM) plugin interface.

    import gpumem.numba
    gpumem.numba.use("pool:initial=1GiB")   # before Numba first touches the GPU
    d = numba.cuda.device_array(1 << 20)     # allocated from the pool

or, with no change to the program: ``NUMBA_CUDA_MEMORY_MANAGER=gpumem.numba python prog.py``
(Numba then allocates from each device's current gpumem resource; see
``gpumem.set_per_device_resource``).

Each allocation comes from the gpumem resource of the device of Numba's context (its current
resource at the time of the allocation), on the default stream, and goes back to it when Numba
frees the array. Pinned host memory stays Numba's own. Needs Numba's CUDA target (the
``numba-cuda`` package).
"""

from __future__ import annotations

import ctypes

try:
    from numba import cuda as _cuda
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError(
        "gpumem.numba needs Numba's CUDA target: pip install numba-cuda"
    ) from e

from . import DeviceMemoryResource, from_spec, get_per_device_resource, set_per_device_resource

__all__ = ["GpumemNumbaManager", "use"]


def _release(resource: DeviceMemoryResource, ptr: int, nbytes: int):
    """The finalizer of one allocation (it must not hold the MemoryPointer it frees)."""

    def release():
        resource.deallocate(ptr, nbytes)

    return release


class GpumemNumbaManager(_cuda.GetIpcHandleMixin, _cuda.HostOnlyCUDAMemoryManager):
    """Numba's EMM plugin backed by gpumem: device allocations come from the gpumem resource of
    the context's device (``gpumem.get_per_device_resource(device)``); host allocations and
    pinning are Numba's own. IPC handles (``get_ipc_handle``) work for memory that came from
    ``cudaMalloc`` (``cuda`` and the suballocators over it), not from ``vmm_pool`` or
    ``cuda_async``."""

    def _device(self) -> int:
        return int(self.context.device.id)

    def _resource(self) -> DeviceMemoryResource:
        return get_per_device_resource(self._device())

    def initialize(self) -> None:
        """Nothing to set up: the device's resource is looked up at each allocation."""
        self._resource()

    def memalloc(self, size: int):
        """``size`` bytes from the device's gpumem resource, as Numba's ``MemoryPointer``."""
        resource = self._resource()
        nbytes = max(int(size), 1)  # a zero-byte array still gets a distinct pointer
        ptr = resource.allocate(nbytes)
        return _cuda.MemoryPointer(self.context, ctypes.c_void_p(ptr), int(size),
                                   finalizer=_release(resource, ptr, nbytes))

    def get_memory_info(self):
        """Free and total memory of the device (what the CUDA driver reports)."""
        free, total = self._resource().runtime.memory_info()
        return _cuda.MemoryInfo(free=free, total=total)

    @property
    def interface_version(self) -> int:
        return 1


_numba_memory_manager = GpumemNumbaManager
"""What Numba loads when NUMBA_CUDA_MEMORY_MANAGER=gpumem.numba."""


def use(resource: str | DeviceMemoryResource | None = None, device: int | None = None):
    """Makes gpumem Numba's CUDA memory manager. ``resource`` (a spec string such as
    ``"pool:initial=1GiB"`` or a resource) becomes the gpumem resource of ``device`` (default:
    the current device); None keeps each device's current one. Call it before Numba first uses
    the GPU. Returns the device's resource."""
    from . import get_current_device

    d = get_current_device() if device is None else int(device)
    if isinstance(resource, str):
        resource = from_spec(resource)
    if resource is not None:
        set_per_device_resource(d, resource)
    _cuda.set_memory_manager(GpumemNumbaManager)
    return get_per_device_resource(d)
