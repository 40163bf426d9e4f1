"""PyTorch on gpumem: route every CUDA tensor allocation of PyTorch through a gpumem resource.

    import torch, gpumem.torch
    stats = gpumem.torch.use("statistics>pool:initial=1GiB>cuda")   # before any CUDA tensor
    ...train...
    print(stats.get_bytes_counter())                                # readable at any time

``use()`` loads gpumem's allocator library (``library_path()``), which exports the two functions
``torch.cuda.memory.CUDAPluggableAllocator`` needs::

    void* gpumem_torch_malloc(ssize_t size, int device, cudaStream_t stream);
    void  gpumem_torch_free(void* ptr, ssize_t size, int device, cudaStream_t stream);

PyTorch calls them on its current stream, from any thread and without the GIL; the resource
must be thread-safe (the pool, arena, caching, fixed-size resources and the adaptors are).
When the library was built with PyTorch present (``pip install --no-build-isolation .``),
exhausting the resource raises ``torch.OutOfMemoryError`` carrying gpumem's message; otherwise a
``RuntimeError`` with the same message. PyTorch can switch allocators only before it first
initializes CUDA, so ``use()`` must run before the first CUDA tensor; called later it raises
RuntimeError saying so. The installed resource lives until the process ends.

With gpumem's allocator PyTorch's own statistics (``torch.cuda.memory_allocated`` and friends)
are unavailable; read the resource's (a StatisticsResourceAdaptor in the spec) instead.
"""

from __future__ import annotations

import ctypes
import os

from . import DeviceMemoryResource, from_spec, get_current_device

_LIBRARY = "_torch_allocator.so"
_installed: dict = {}  # device -> resource


def library_path() -> str:
    """Path of the shared library PyTorch's CUDAPluggableAllocator loads."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), _LIBRARY)


def _library() -> ctypes.CDLL:
    lib = ctypes.CDLL(library_path())
    lib.gpumem_torch_set_resource.argtypes = [ctypes.c_int, ctypes.c_void_p]
    lib.gpumem_torch_set_resource.restype = ctypes.c_int
    lib.gpumem_torch_get_resource.argtypes = [ctypes.c_int]
    lib.gpumem_torch_get_resource.restype = ctypes.c_void_p
    lib.gpumem_torch_has_c10.restype = ctypes.c_int
    return lib


def raises_torch_out_of_memory() -> bool:
    """True when the library was built against PyTorch's c10, so that out-of-memory surfaces as
    torch.OutOfMemoryError (otherwise RuntimeError with gpumem's message)."""
    return bool(_library().gpumem_torch_has_c10())


def _keep_forever(resource) -> None:
    # Tensors may be freed during interpreter shutdown, after this module's globals are gone:
    # the resource must outlive them, so it is never destroyed.
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(resource))


def _too_late_message(detail: str) -> str:
    return (
        "gpumem.torch.use() must be called before PyTorch's first CUDA allocation (PyTorch can "
        "only switch allocators before it initializes CUDA): " + detail + ". Call it right "
        "after `import torch`, before creating any CUDA tensor or calling torch.cuda functions "
        "that initialize CUDA."
    )


def use(resource: str | DeviceMemoryResource = "pool>cuda", device: int | None = None):
    """Builds ``resource`` (a spec string for ``gpumem.from_spec``, or a resource) and makes it
    PyTorch's CUDA allocator for ``device`` (default: the current device). Returns the resource;
    its statistics stay readable while PyTorch allocates through it.

    Raises RuntimeError when PyTorch has already initialized CUDA or another allocator was
    installed, and ImportError when PyTorch is missing.
    """
    import torch  # noqa: F401  (ImportError says what is missing)

    if _installed:
        raise RuntimeError(
            f"gpumem.torch.use() was already called (devices {sorted(_installed)}); PyTorch "
            "cannot switch allocators again"
        )
    if torch.cuda.is_initialized():
        raise RuntimeError(_too_late_message("torch.cuda is already initialized"))
    if device is None:
        device = get_current_device()
    if isinstance(resource, str):
        resource = from_spec(resource)
    if not isinstance(resource, DeviceMemoryResource):
        raise TypeError(f"expected a spec string or a gpumem resource, got {resource!r}")
    lib = _library()
    if lib.gpumem_torch_set_resource(device, resource._handle) != 0:
        raise ValueError(f"device {device} is out of range for the gpumem torch allocator")
    allocator = torch.cuda.memory.CUDAPluggableAllocator(
        library_path(), "gpumem_torch_malloc", "gpumem_torch_free"
    )
    try:
        torch.cuda.memory.change_current_allocator(allocator)
    except RuntimeError as e:
        lib.gpumem_torch_set_resource(device, None)
        raise RuntimeError(_too_late_message(str(e).splitlines()[0])) from e
    _keep_forever(resource)
    _installed[device] = resource
    return resource


def resource(device: int | None = None):
    """The resource PyTorch allocates from on ``device`` (None: current), or None."""
    return _installed.get(get_current_device() if device is None else device)
