"""CUDA tensors of gpumem memory and ``torch.multiprocessing``.

PyTorch sends a CUDA tensor to another process as a CUDA IPC handle of the allocation holding it
(``cudaIpcGetMemHandle``, asked of its allocator) and opens it on the other side through its
allocator again. Neither works with gpumem's memory: PyTorch's pluggable allocators (what
``gpumem.torch.use()`` installs) support neither step, and the memory of a
``gpumem.torch.mem_pool()`` is virtual-memory-API memory, which CUDA IPC handles cannot describe.
PyTorch's own errors for these cases do not say what to do; gpumem's checks, placed in front of
PyTorch's (``guard()``), raise ``SharingError`` naming the tensor and the way out:

* sending, from a process under ``use()``: every CUDA tensor is gpumem's — send ``tensor.cpu()``;
* sending a tensor that lies in a ``mem_pool()``: clone it outside ``torch.cuda.use_mem_pool``
  (PyTorch's allocator) and send the clone;
* receiving into a process under ``use()``: receive in a process without ``use()`` (a
  ``mem_pool()`` region keeps PyTorch's allocator for the rest), or have the sender send CPU
  tensors.

Everything else goes to PyTorch unchanged.
"""

from __future__ import annotations


class SharingError(RuntimeError):
    """A CUDA tensor that cannot cross processes through torch.multiprocessing because gpumem
    holds its memory (or serves the receiving process); the message says what to do."""


def send_refusal(*, nbytes: int, device: int, whole_process: bool, pool_spec: str | None):
    """Why a CUDA tensor's storage of ``nbytes`` on ``device`` cannot be sent (None: it can):
    ``whole_process``: gpumem.torch.use() serves this process; ``pool_spec``: the spec of the
    gpumem.torch.mem_pool() holding it (None: none does)."""
    what = f"a CUDA tensor (storage of {nbytes} bytes on cuda:{device})"
    if whole_process:
        return (f"gpumem.torch: cannot send {what} to another process: gpumem.torch.use() serves "
                "this process's CUDA memory, and PyTorch shares CUDA memory between processes "
                "only through its own allocator. Send tensor.cpu() instead, or share gpumem "
                "memory explicitly (VmmPoolMemoryResource.allocate_single_handle and "
                "export_single_handle).")
    if pool_spec is not None:
        return (f"gpumem.torch: cannot send {what} to another process: it lies in a "
                f"gpumem.torch.mem_pool() ('{pool_spec}'), whose memory CUDA IPC handles cannot "
                "describe. Send a copy made outside `torch.cuda.use_mem_pool` (tensor.clone() "
                "there uses PyTorch's allocator), or tensor.cpu().")
    return None


def receive_refusal(*, nbytes: int, device: int, whole_process: bool):
    """Why a CUDA tensor sent by another process cannot be opened here (None: it can)."""
    if not whole_process:
        return None
    return (f"gpumem.torch: cannot receive a CUDA tensor (storage of {nbytes} bytes on "
            f"cuda:{device}) from another process: gpumem.torch.use() serves this process's CUDA "
            "memory, and PyTorch opens other processes' CUDA memory only through its own "
            "allocator. Receive it in a process that does not call gpumem.torch.use() (a "
            "gpumem.torch.mem_pool() region keeps PyTorch's allocator for the rest), or have "
            "the sender send tensor.cpu().")


def owning_pool_spec(ptr: int, pools) -> str | None:
    """The spec of the pool among ``pools`` ((MemPool, spec) pairs) whose segments hold ``ptr``,
    from each pool's ``snapshot()`` (PyTorch's segment list); None when none does."""
    for pool, spec in pools:
        try:
            segments = pool.snapshot()
        except Exception:  # noqa: BLE001  (a pool PyTorch cannot describe holds nothing we know)
            continue
        for seg in segments:
            start = int(seg.get("address", 0))
            if start <= ptr < start + int(seg.get("total_size", 0)):
                return spec
    return None


def _storage_of(tensor):
    storage = tensor.untyped_storage()
    device = getattr(tensor.device, "index", None)
    return storage.data_ptr(), storage.nbytes(), 0 if device is None else device


def check_send(tensor, whole_process: bool, pools) -> None:
    """Raises SharingError when ``tensor`` (a CUDA tensor) holds gpumem memory."""
    if not getattr(tensor, "is_cuda", False):
        return
    ptr, nbytes, device = _storage_of(tensor)
    spec = None if whole_process or ptr == 0 else owning_pool_spec(ptr, pools)
    why = send_refusal(nbytes=nbytes, device=device, whole_process=whole_process and ptr != 0,
                       pool_spec=spec)
    if why is not None:
        raise SharingError(why)


_guarded = {"send": False, "receive": False}


def guard(whole_process, pools) -> None:
    """Puts gpumem's checks in front of torch.multiprocessing's CUDA tensor pickling (once):
    ``whole_process()`` tells whether use() serves this process, ``pools()`` lists the live
    mem_pool()s as (MemPool, spec) pairs."""
    if _guarded["send"]:
        return
    import torch
    import torch.multiprocessing  # noqa: F401  (PyTorch registers its reducers on this import)
    from multiprocessing.reduction import ForkingPickler

    from torch.multiprocessing import reductions

    torch_reduce_tensor = reductions.reduce_tensor
    torch_rebuild = reductions.rebuild_cuda_tensor

    def reduce_tensor(tensor):
        check_send(tensor, whole_process(), pools())
        return torch_reduce_tensor(tensor)

    def rebuild_cuda_tensor(*args, **kwargs):
        # (tensor_cls, size, stride, offset, storage_cls, dtype, device, handle, nbytes, ...)
        nbytes = args[8] if len(args) > 8 else 0
        why = receive_refusal(nbytes=nbytes, device=args[6] if len(args) > 6 else 0,
                              whole_process=whole_process() and nbytes != 0)
        if why is not None:
            raise SharingError(why)
        return torch_rebuild(*args, **kwargs)

    # Pickled by PyTorch's name: a receiver without gpumem finds PyTorch's function there.
    rebuild_cuda_tensor.__module__ = torch_rebuild.__module__
    rebuild_cuda_tensor.__qualname__ = torch_rebuild.__qualname__
    reductions.rebuild_cuda_tensor = rebuild_cuda_tensor
    for cls in (*torch._tensor_classes, torch.Tensor, torch.nn.parameter.Parameter):
        ForkingPickler.register(cls, reduce_tensor)
    _guarded["send"] = _guarded["receive"] = True
