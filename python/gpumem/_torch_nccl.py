"""NCCL buffer registration that follows a gpumem pool's memory (``gpumem.torch.nccl_registration``).

NCCL's user-buffer registration (``ncclCommRegister``) lets collectives on registered memory skip
their copies through NCCL's own buffers. A registration covers fixed bytes, while a gpumem pool
maps and unmaps physical memory as it grows, moves free memory, trims, pauses and resumes: the
registration made here follows it (gpumem's ``VmmRegistrar``), calling NCCL's C functions straight
from the thread that maps or unmaps, without Python.

NCCL before 2.29.2 registers only buffers made of one ``cuMemCreate`` handle: with it each
physical handle is registered on its own (``unit="handle"``); 2.29.2 and later take each run of
handles mapped together (``unit="run"``). The pool's handles should be made for NCCL: spec
``vmm_pool:shareable=1,rdma=1`` (``shareable_handles=True, gpu_direct_rdma=True``).
"""

from __future__ import annotations

import ctypes
import os

MULTI_HANDLE_NCCL = (2, 29, 2)
"""The first NCCL that registers buffers made of several physical handles."""


def nccl_library(paths=None) -> ctypes.CDLL:
    """The NCCL library this process uses: the one already loaded (PyTorch's), else the
    ``nvidia-nccl`` package's, else ``libnccl.so.2`` from the system's library path (``paths``:
    try these instead)."""
    candidates = (list(paths) if paths is not None else
                  _loaded_nccl() + _packaged_nccl() + ["libnccl.so.2"])
    errors = []
    for path in candidates:
        try:
            return ctypes.CDLL(path)
        except OSError as e:
            errors.append(f"{path}: {e}")
    raise RuntimeError("gpumem.torch.nccl_registration: no NCCL library could be loaded ("
                       + "; ".join(errors) + "); install PyTorch with CUDA or nvidia-nccl")


def _loaded_nccl() -> list:
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                fields = line.split()
                if len(fields) >= 6 and os.path.basename(fields[-1]).startswith("libnccl.so"):
                    return [fields[-1]]
    except OSError:
        pass
    return []


def _packaged_nccl() -> list:
    try:
        import nvidia.nccl  # noqa: PLC0415  (the nvidia-nccl-cu* wheels)
    except ImportError:
        return []
    return [os.path.join(d, "lib", "libnccl.so.2") for d in getattr(nvidia.nccl, "__path__", [])
            if os.path.exists(os.path.join(d, "lib", "libnccl.so.2"))]


def nccl_version(lib) -> tuple:
    """(major, minor, patch) of the NCCL library ``lib`` (ncclGetVersion)."""
    code = ctypes.c_int(0)
    get = lib.ncclGetVersion
    get.argtypes = [ctypes.POINTER(ctypes.c_int)]
    get.restype = ctypes.c_int
    if get(ctypes.byref(code)) != 0:
        raise RuntimeError("ncclGetVersion failed")
    v = code.value
    return (v // 10000, v % 10000 // 100, v % 100) if v >= 10000 else (v // 1000, v % 1000 // 100,
                                                                      v % 100)


def unit_for(version: tuple) -> str:
    """The registration unit an NCCL of ``version`` accepts: "run" from 2.29.2 on, else "handle"."""
    return "run" if tuple(version) >= MULTI_HANDLE_NCCL else "handle"


def _function_address(lib, name: str) -> int:
    try:
        fn = getattr(lib, name)
    except AttributeError:
        raise RuntimeError(f"gpumem.torch.nccl_registration: the NCCL library has no {name} "
                           "(buffer registration needs NCCL 2.19 or later)") from None
    return ctypes.cast(fn, ctypes.c_void_p).value


def matching_library(lib, communicators_version, path: str = "") -> object:
    """``lib`` when its NCCL version is the one the communicators run on (``communicators_version``,
    PyTorch's ``torch.cuda.nccl.version()``; None: unknown, not checked), else RuntimeError: the
    functions of one NCCL must not be called on another NCCL's communicator (PyTorch's wheels carry
    an NCCL of their own, which a separately installed ``nvidia-nccl`` does not replace)."""
    if communicators_version is None:
        return lib
    found = nccl_version(lib)
    wanted = tuple(int(x) for x in tuple(communicators_version)[:3])
    if found != wanted:
        where = f" ({path})" if path else ""
        raise RuntimeError(
            "gpumem.torch.nccl_registration: the NCCL library found" + where + " is version "
            + ".".join(map(str, found)) + ", but PyTorch's communicators run on NCCL "
            + ".".join(map(str, wanted)) + "; registering through another NCCL's functions is not "
            "safe. Make the library PyTorch loads the one found (the nvidia-nccl package of that "
            "version), or register with PyTorch's own ProcessGroupNCCL.register_mem_pool")
    return lib


def torch_nccl_version():
    """PyTorch's NCCL version (a tuple), or None when PyTorch cannot say."""
    try:
        import torch

        v = torch.cuda.nccl.version()
    except Exception:  # noqa: BLE001  (no CUDA build, no NCCL: nothing to compare with)
        return None
    return tuple(v) if isinstance(v, (tuple, list)) else None


def communicator(process_group) -> int:
    """The address of the ncclComm_t behind a PyTorch NCCL process group (None: the default)."""
    import torch
    import torch.distributed as dist

    group = process_group
    if group is None:
        group = dist.distributed_c10d._get_default_group()
    backend = group._get_backend(torch.device("cuda"))
    comm = int(backend._comm_ptr())
    if comm == 0:
        raise RuntimeError("gpumem.torch.nccl_registration: the process group has no NCCL "
                           "communicator yet; run one collective first, or create the group "
                           "with device_id= so that it connects at once")
    return comm


class MemPoolRegistration:
    """A registration that follows the memory of one device of a ``gpumem.torch.mem_pool()``
    (made by ``nccl_registration``); the same members as ``gpumem.VmmRegistrar``, except that
    ``registrations()`` gives how many there are (the ranges stay inside the allocator)."""

    def __init__(self, lib, slot: int, device: int, comm: int, register_fn: int,
                 deregister_fn: int, unit: str):
        _declare(lib)
        self._lib, self._slot, self.device, self.unit = lib, slot, device, unit
        self._id = lib.gpumem_torch_pool_register(slot, device, comm, register_fn, deregister_fn,
                                                  unit.encode())
        if self._id < 0:
            raise RuntimeError(lib.gpumem_torch_pool_last_error().decode(errors="replace"))

    def _stats(self) -> list:
        out = (ctypes.c_ulonglong * 5)()
        if self._id < 0 or self._lib.gpumem_torch_pool_registration_stats(
                self._slot, self._id, out, 5) != 5:
            return [0] * 5
        return list(out)

    @property
    def closed(self) -> bool:
        return self._id < 0

    def close(self) -> None:
        """Stops following the pool and deregisters everything (again: nothing)."""
        if self._id >= 0:
            self._lib.gpumem_torch_pool_deregister(self._slot, self._id)
            self._id = -1

    def registrations(self) -> int:
        """How many registrations there are now (``registered_bytes``: their bytes)."""
        return self._stats()[0]

    @property
    def registered_bytes(self) -> int:
        return self._stats()[1]

    @property
    def registered(self) -> int:
        return self._stats()[2]

    @property
    def deregistered(self) -> int:
        return self._stats()[3]

    @property
    def failures(self) -> int:
        return self._stats()[4]

    @property
    def last_failure(self) -> str:
        if self._id < 0:
            return ""
        text = self._lib.gpumem_torch_pool_registration_failure(self._slot, self._id)
        return text.decode(errors="replace")

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> bool:
        self.close()
        return False


def _declare(lib) -> None:
    lib.gpumem_torch_pool_register.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_void_p,
                                               ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p]
    lib.gpumem_torch_pool_register.restype = ctypes.c_int
    lib.gpumem_torch_pool_deregister.argtypes = [ctypes.c_int, ctypes.c_int]
    lib.gpumem_torch_pool_deregister.restype = ctypes.c_int
    lib.gpumem_torch_pool_registration_stats.argtypes = [ctypes.c_int, ctypes.c_int,
                                                         ctypes.c_void_p, ctypes.c_int]
    lib.gpumem_torch_pool_registration_stats.restype = ctypes.c_int
    lib.gpumem_torch_pool_registration_failure.argtypes = [ctypes.c_int, ctypes.c_int]
    lib.gpumem_torch_pool_registration_failure.restype = ctypes.c_char_p
    lib.gpumem_torch_pool_last_error.restype = ctypes.c_char_p


def registration(pool, comm: int, nccl, unit: str | None, device: int | None, pool_slot):
    """What nccl_registration builds once the communicator and the library are known: ``nccl``
    is a loaded NCCL library (or an object with its three functions); ``pool_slot(pool)`` gives
    the slot of a mem_pool() (None for anything else)."""
    from . import VmmPoolMemoryResource, VmmRegistrar
    from .torch import _library

    if unit is None:
        unit = unit_for(nccl_version(nccl))
    register_fn = _function_address(nccl, "ncclCommRegister")
    deregister_fn = _function_address(nccl, "ncclCommDeregister")
    if isinstance(pool, VmmPoolMemoryResource):
        return VmmRegistrar(pool, comm, register_fn, deregister_fn, unit)
    slot = pool_slot(pool)
    if slot is None:
        raise TypeError("gpumem.torch.nccl_registration follows a gpumem.torch.mem_pool() or a "
                        f"gpumem.VmmPoolMemoryResource, not {type(pool).__name__}")
    if device is None:
        import torch

        device = torch.cuda.current_device()
    return MemPoolRegistration(_library(), slot, device, comm, register_fn, deregister_fn, unit)
