"""PyTorch on gpumem: route every CUDA tensor allocation of PyTorch through gpumem.

    import torch, gpumem.torch
    gpumem.torch.use()                  # before any CUDA tensor; every GPU gets its own vmm_pool
    ...train...
    print(gpumem.torch.max_memory_allocated(), gpumem.torch.memory_summary())

or, with no change to the program (the spec comes from the environment variable
``GPUMEM_TORCH_ALLOC``, default ``vmm_pool:peers=all``)::

    GPUMEM_TORCH_ALLOC="vmm_pool" python -m gpumem.torch train.py --its --own --arguments

``use()`` installs gpumem's allocator library (``library_path()``) as PyTorch's CUDA allocator
through ``torch.cuda.memory.CUDAPluggableAllocator``. Each device gets its own resource, built
from the spec the first time PyTorch allocates on that device. PyTorch calls the library from any
thread, without the GIL, on its current stream.

PyTorch can switch allocators only before it first initializes CUDA, so ``use()`` must run before
the first CUDA tensor; called later it raises RuntimeError saying so. The resources live until the
process ends.

Statistics: ``memory_stats()`` (PyTorch's key names), ``memory_allocated()``,
``max_memory_allocated()``, ``memory_reserved()``, ``max_memory_reserved()``,
``reset_peak_memory_stats()``, ``memory_summary()``. PyTorch's own functions of those names do not
work under a pluggable allocator; ``use()`` points them at these (``patch_torch=False`` leaves
them alone). ``torch.cuda.empty_cache()`` and ``empty_cache()`` give free memory back.
``record(path)`` writes a trace that ``gpumem replay`` replays (``frames=True``: with the Python
call stack of each allocation; ``snapshot="x.pickle"``: also a PyTorch memory snapshot that
https://pytorch.org/memory_viz opens, see ``write_snapshot``).

CUDA graphs: ``torch.cuda.graph`` captures allocate from a private pool per graph pool, kept
until PyTorch releases it (``graph_pools()`` lists them).

Sleep and wake: ``use_regions()`` installs a ``VmmRegionMemoryResource``; then
``with region("kv_cache"):`` tags the tensors allocated inside, and ``pause(tag, offload=...)`` /
``resume(tag)`` give their device memory back and take it again at the same addresses.
``torch_memory_saver`` offers the same under torch_memory_saver's names (``region``, ``pause``,
``resume``, ``disable``, ``cuda_graph``).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import sys

from . import _gpumem
from . import (DeviceMemoryResource, SpecError, VmmRegionMemoryResource, canonical_spec,
               from_spec, get_current_device)
from ._memory_saver import TorchMemorySaver

ENV_VAR = "GPUMEM_TORCH_ALLOC"
"""The environment variable ``use()`` reads when it is given no spec."""

DEFAULT_SPEC = "vmm_pool:peers=all"
"""What ``use()`` installs when given no spec and ``GPUMEM_TORCH_ALLOC`` is not set: on every
device a pool over reserved address space that maps memory as it grows and gives it back on
``empty_cache()`` (it holds less than PyTorch's own allocator in our measurements; see
docs/python.md). ``peers=all`` gives every other GPU access to its memory, which copies between
devices and ``torch.nn.DataParallel`` need; with one GPU it changes nothing."""

_LIBRARY = "_torch_allocator.so"
_installed: dict = {}  # device (None: every device) -> canonical spec or resource
_lib = None
_torch_originals: dict = {}  # (module, name) -> PyTorch's function, while patched


class AllocatorConfigError(SpecError):
    """A spec for ``gpumem.torch.use()`` or ``GPUMEM_TORCH_ALLOC`` that is not valid. A
    ``ValueError`` (through ``gpumem.SpecError``); ``value`` is the text that was given and
    ``source`` where it came from (the environment variable or ``use()``)."""

    def __init__(self, message: str, value: str = "", source: str = ""):
        super().__init__(message)
        self.value = value
        self.source = source


def library_path() -> str:
    """Path of the shared library PyTorch's CUDAPluggableAllocator loads."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), _LIBRARY)


def _library() -> ctypes.CDLL:
    global _lib
    if _lib is not None:
        return _lib
    lib = ctypes.CDLL(library_path())
    # Resource objects of this package are called through two C functions of its extension: an
    # exception cannot cross from the extension's C++ runtime into the allocator library's.
    lib.gpumem_torch_set_resource_calls.argtypes = [ctypes.c_void_p] * 3
    lib.gpumem_torch_set_resource_calls.restype = None
    lib.gpumem_torch_set_resource_calls(*_gpumem._resource_calls())
    lib.gpumem_torch_pool_open.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_int]
    lib.gpumem_torch_pool_open.restype = ctypes.c_int
    lib.gpumem_torch_pool_close.argtypes = [ctypes.c_int]
    lib.gpumem_torch_pool_close.restype = ctypes.c_int
    lib.gpumem_torch_pool_stats.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int]
    lib.gpumem_torch_pool_stats.restype = ctypes.c_int
    lib.gpumem_torch_pool_last_error.restype = ctypes.c_char_p
    lib.gpumem_torch_pool_slots.restype = ctypes.c_int
    lib.gpumem_torch_pool_trim.argtypes = [ctypes.c_int]
    lib.gpumem_torch_pool_trim.restype = ctypes.c_int
    lib.gpumem_torch_pool_open_paged.argtypes = [ctypes.c_double, ctypes.c_void_p, ctypes.c_int]
    lib.gpumem_torch_pool_open_paged.restype = ctypes.c_int
    lib.gpumem_torch_pool_paged_stats.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int]
    lib.gpumem_torch_pool_paged_stats.restype = ctypes.c_int
    lib.gpumem_torch_pages_event.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_ulonglong,
                                             ctypes.c_ulonglong, ctypes.c_void_p]
    lib.gpumem_torch_pages_event.restype = ctypes.c_int
    lib.gpumem_torch_set_resource.argtypes = [ctypes.c_int, ctypes.c_void_p]
    lib.gpumem_torch_set_resource.restype = ctypes.c_int
    lib.gpumem_torch_set_resource2.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int]
    lib.gpumem_torch_set_resource2.restype = ctypes.c_int
    lib.gpumem_torch_get_resource.argtypes = [ctypes.c_int]
    lib.gpumem_torch_get_resource.restype = ctypes.c_void_p
    lib.gpumem_torch_has_c10.restype = ctypes.c_int
    lib.gpumem_torch_configure.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p,
                                           ctypes.c_int]
    lib.gpumem_torch_configure.restype = ctypes.c_int
    lib.gpumem_torch_release.argtypes = [ctypes.c_int]
    lib.gpumem_torch_release.restype = ctypes.c_int
    lib.gpumem_torch_stats.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_ulonglong),
                                       ctypes.c_int]
    lib.gpumem_torch_stats.restype = ctypes.c_int
    lib.gpumem_torch_reset_peak.argtypes = [ctypes.c_int]
    lib.gpumem_torch_reset_accumulated.argtypes = [ctypes.c_int]
    lib.gpumem_torch_record_start.argtypes = [ctypes.c_char_p]
    lib.gpumem_torch_record_start.restype = ctypes.c_int
    lib.gpumem_torch_record_start2.argtypes = [ctypes.c_char_p, _FRAMES_FN]
    lib.gpumem_torch_record_start2.restype = ctypes.c_int
    lib.gpumem_torch_record_stop.restype = ctypes.c_int
    lib.gpumem_torch_last_error.restype = ctypes.c_char_p
    lib.gpumem_torch_malloc.argtypes = [ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p]
    lib.gpumem_torch_malloc.restype = ctypes.c_void_p
    lib.gpumem_torch_try_malloc.argtypes = [ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p]
    lib.gpumem_torch_try_malloc.restype = ctypes.c_void_p
    lib.gpumem_torch_free.argtypes = [ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_int,
                                      ctypes.c_void_p]
    lib.gpumem_torch_free.restype = None
    lib.gpumem_torch_empty_cache.restype = None
    lib.gpumem_torch_set_graph_support.argtypes = [ctypes.c_char_p]
    lib.gpumem_torch_set_graph_support.restype = None
    lib.gpumem_torch_graph_pools.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int]
    lib.gpumem_torch_graph_pools.restype = ctypes.c_int
    lib.gpumem_torch_test_begin_pool.argtypes = [ctypes.c_int, ctypes.c_ulonglong,
                                                 ctypes.c_ulonglong, ctypes.c_void_p]
    lib.gpumem_torch_test_begin_pool.restype = ctypes.c_int
    _lib = lib
    return lib


def _last_error() -> str:
    return _library().gpumem_torch_last_error().decode(errors="replace")


def raises_torch_out_of_memory() -> bool:
    """True when the library was built against PyTorch's c10, so that out-of-memory surfaces as
    torch.OutOfMemoryError (otherwise RuntimeError with gpumem's message)."""
    return bool(_library().gpumem_torch_has_c10())


# -- configuration -----------------------------------------------------------------------------

_DEVICE_ENTRY = re.compile(r"^\s*(\d+)\s*=(.*)$")


def _check_spec(spec: str, value: str, source: str) -> str:
    """The canonical text of one spec; AllocatorConfigError naming `value` when it is not valid."""
    import gpumem

    where = f"{source}={value!r}" if source == ENV_VAR else f"spec {value!r}"
    if not spec.strip():
        raise AllocatorConfigError(
            f"{where}: empty spec; write a resource stack such as 'pool' or "
            "'pool:initial=1GiB>cuda_async'", value, source)
    try:
        text = canonical_spec(spec.strip())
    except SpecError as e:
        raise AllocatorConfigError(f"{where}: {e}", value, source) from None
    entries = {r["name"]: r for r in gpumem.list_resources()}
    for layer in text.split(">"):
        name, _, params = layer.partition(":")
        entry = entries.get(name)
        if entry is None:
            raise AllocatorConfigError(
                f"{where}: unknown resource {name!r}; valid names: {', '.join(sorted(entries))}",
                value, source)
        for param in filter(None, params.split(",")):
            key = param.partition("=")[0]
            if key not in entry["params"]:
                known = ", ".join(entry["params"]) or "none"
                raise AllocatorConfigError(
                    f"{where}: {name!r} has no parameter {key!r} (its parameters: {known})",
                    value, source)
    # Values (sizes, numbers, their combinations) are checked by building the stack over a
    # simulated device that touches no memory; stacks that need a real GPU are checked there,
    # and so are stacks that log (building one would create its file).
    if any(layer.partition(":")[0] == "logging" for layer in text.split(">")):
        return text
    try:
        gpumem.from_spec(text, gpumem.HostRuntime(capacity_bytes=1 << 44, backed=False))
    except gpumem.LogicError as e:
        if "needs a GPU" not in str(e):
            raise AllocatorConfigError(f"{where}: {e}", value, source) from None
    except Exception:  # noqa: BLE001  (out of simulated memory and the like: not the spec's fault)
        pass
    return text


def parse_config(value: str, source: str = ENV_VAR) -> dict:
    """Parses the text of ``GPUMEM_TORCH_ALLOC`` (or a spec given to ``use()``) into
    ``{device: spec}``, ``None`` standing for every device without its own entry.

    The text is a spec of the ``gpumem`` command-line tool (``pool``,
    ``pool:initial=1GiB>cuda_async``, ``statistics>vmm_pool``), or several entries separated by
    ``;``, each either a spec for every device or ``N=spec`` for device N::

        pool                        every device: a pool
        0=pool;1=vmm_pool           device 0: a pool, device 1: a virtual-memory pool, others: none
        vmm_pool;0=pool             device 0: a pool, every other device: a virtual-memory pool

    Raises AllocatorConfigError (a ValueError) naming the value and what is wrong with it.
    """
    if not isinstance(value, str):
        raise TypeError(f"expected a spec string, got {value!r}")
    out: dict = {}
    parts = value.split(";")
    for i, part in enumerate(parts):
        if not part.strip():
            if i == len(parts) - 1:
                continue
            raise AllocatorConfigError(
                f"{ENV_VAR}={value!r}: an empty entry between ';'" if source == ENV_VAR
                else f"spec {value!r}: an empty entry between ';'", value, source)
        m = _DEVICE_ENTRY.match(part)
        device, spec = (int(m.group(1)), m.group(2)) if m else (None, part)
        if device in out:
            what = "every device" if device is None else f"device {device}"
            raise AllocatorConfigError(
                (f"{ENV_VAR}={value!r}" if source == ENV_VAR else f"spec {value!r}")
                + f": {what} is given twice", value, source)
        out[device] = _check_spec(spec, value, source)
    if not out:
        raise AllocatorConfigError(
            (f"{ENV_VAR}={value!r}" if source == ENV_VAR else f"spec {value!r}")
            + ": empty; write a resource stack such as 'pool'", value, source)
    return out


def config_from_env() -> dict | None:
    """``parse_config(os.environ["GPUMEM_TORCH_ALLOC"])``, or None when it is not set (or
    empty)."""
    value = os.environ.get(ENV_VAR, "")
    return parse_config(value, ENV_VAR) if value.strip() else None


def _too_late_message(detail: str) -> str:
    return (
        "gpumem.torch.use() must be called before PyTorch's first CUDA allocation (PyTorch can "
        "only switch allocators before it initializes CUDA): " + detail + ". Call it right "
        "after `import torch`, before creating any CUDA tensor or calling torch.cuda functions "
        "that initialize CUDA, or start the program with `python -m gpumem.torch`."
    )


def _resolve(spec, devices, device) -> dict:
    """{device or None: canonical spec} from use()'s arguments."""
    if device is not None:
        if devices is not None:
            raise TypeError("give either device= or devices=, not both")
        devices = [device]
    if spec is None:
        config = config_from_env() or {None: DEFAULT_SPEC}
    elif isinstance(spec, str):
        config = parse_config(spec, "use()")
    elif isinstance(spec, dict):
        config = {}
        for k, v in spec.items():
            if k is not None and (not isinstance(k, int) or k < 0):
                raise TypeError(f"device keys are ints >= 0 (or None for every device), got {k!r}")
            config[k] = _check_spec(v, v, "use()")
        if not config:
            raise AllocatorConfigError("use() was given an empty dict of specs")
    else:
        raise TypeError(f"expected a spec string, a dict of them or a gpumem resource, got "
                        f"{spec!r}")
    if devices is not None:
        devices = [int(d) for d in devices]
        default = config.get(None)
        chosen = {}
        for d in devices:
            s = config.get(d, default)
            if s is None:
                raise AllocatorConfigError(f"no spec for device {d} (specs are for "
                                           f"{sorted(k for k in config if k is not None)})")
            chosen[d] = s
        config = chosen
    return config


def use(spec=None, devices=None, *, device: int | None = None, runtime=None,
        patch_torch: bool = True):
    """Makes gpumem PyTorch's CUDA allocator, before PyTorch initializes CUDA.

    ``spec`` is

    * None: the spec in ``GPUMEM_TORCH_ALLOC`` if set, else ``DEFAULT_SPEC``
      (``"vmm_pool:peers=all"``);
    * a spec string (the ``gpumem`` tool's grammar, e.g. ``"pool:initial=1GiB"``), for every
      device, or per device as in ``GPUMEM_TORCH_ALLOC`` (``"0=pool;1=vmm_pool"``, see
      ``parse_config``);
    * a dict ``{device: spec}`` (key None: every device without its own entry);
    * a gpumem resource object, which serves one device (``device``, default the current one).

    Each device gets its own resource, built the first time PyTorch allocates on it. ``devices``
    (a list of indices) limits the spec to those devices; an allocation on another device then
    raises, naming it. ``device=N`` is ``devices=[N]``. ``runtime``: a ``gpumem.HostRuntime`` to
    run without a GPU (tests). ``patch_torch``: point ``torch.cuda.memory_stats`` and friends at
    this module's functions (they raise under any pluggable allocator otherwise).

    Returns the resource object when one was given, else the installed ``{device: spec}`` (None:
    every device). Raises RuntimeError when PyTorch has already initialized CUDA or use() was
    already called, AllocatorConfigError (a ValueError) for a bad spec, ImportError without
    PyTorch.
    """
    import torch

    if _installed:
        raise RuntimeError(
            f"gpumem.torch.use() was already called ({_describe_installed()}); PyTorch "
            "cannot switch allocators again"
        )
    if torch.cuda.is_initialized():
        raise RuntimeError(_too_late_message("torch.cuda is already initialized"))
    lib = _library()
    rt_handle = runtime._handle if runtime is not None else None
    simulated = int(runtime is not None and not getattr(runtime, "backed", True))
    resource = None
    if isinstance(spec, DeviceMemoryResource):
        if devices is not None:
            raise TypeError("a resource object serves one device: give device=N, not devices=")
        resource = spec
        if device is None:
            device = get_current_device()
        on_cuda = getattr(resource, "_runtime", None) is None and _has_gpu()
        if lib.gpumem_torch_set_resource2(device, resource._handle, int(on_cuda)) != 0:
            raise ValueError(f"device {device} is out of range for the gpumem torch allocator")
        config = {device: resource}
    else:
        config = _resolve(spec, devices, device)
        for d, s in config.items():
            rc = lib.gpumem_torch_configure(-1 if d is None else d, s.encode(), rt_handle,
                                            simulated)
            if rc != 0:
                _unconfigure(config)
                raise AllocatorConfigError(f"device {d}: {_last_error()}", s, "use()")
    allocator = torch.cuda.memory.CUDAPluggableAllocator(
        library_path(), "gpumem_torch_malloc", "gpumem_torch_free"
    )
    _set_reset_fn(allocator, lib)
    _set_graph_hooks(allocator, lib, getattr(torch, "__version__", "unknown"))
    try:
        torch.cuda.memory.change_current_allocator(allocator)
    except RuntimeError as e:
        _unconfigure(config)
        raise RuntimeError(_too_late_message(str(e).splitlines()[0])) from e
    if resource is not None:
        _keep_forever(resource)
    if runtime is not None:
        _keep_forever(runtime)  # the resources built over it are never destroyed either
    _installed.update(config)
    if patch_torch:
        _patch_torch(torch)
    _guard_sharing()
    return resource if resource is not None else dict(config)


def _has_gpu() -> bool:
    import gpumem

    try:
        return gpumem.get_num_devices() > 0
    except Exception:  # noqa: BLE001
        return False


def _unconfigure(config: dict) -> None:
    lib = _library()
    for d, s in config.items():
        if isinstance(s, DeviceMemoryResource):
            lib.gpumem_torch_set_resource(d, None)
        else:
            lib.gpumem_torch_configure(-1 if d is None else d, None, None, 0)


def _set_reset_fn(allocator, lib) -> None:
    # torch.cuda.empty_cache() reaches CUDAPluggableAllocator's reset_fn (PyTorch 2.0+).
    try:
        target = allocator.allocator()
        target.set_reset_fn(ctypes.cast(lib.gpumem_torch_empty_cache, ctypes.c_void_p).value)
    except AttributeError:
        pass  # an older PyTorch: gpumem.torch.empty_cache() still works


# -- CUDA graphs ----------------------------------------------------------------------------------

_GRAPH_HOOKS = (("set_begin_allocate_to_pool", "gpumem_torch_begin_allocate_to_pool"),
                ("set_end_allocate_to_pool_fn", "gpumem_torch_end_allocate_to_pool"),
                ("set_release_pool", "gpumem_torch_release_pool"))


def _set_graph_hooks(allocator, lib, torch_version: str) -> list:
    """Gives PyTorch the allocator's CUDA graph pool hooks, so that ``torch.cuda.graph`` captures
    allocate from a private pool per graph. Returns the names of the hooks this PyTorch lacks
    (empty when all were given); the library then refuses allocations during a capture, naming
    them and the PyTorch version."""
    try:
        target = allocator.allocator()
    except AttributeError:
        target = None
    missing = [name for name, _ in _GRAPH_HOOKS if target is None or not hasattr(target, name)]
    if not missing:
        for name, symbol in _GRAPH_HOOKS:
            getattr(target, name)(ctypes.cast(getattr(lib, symbol), ctypes.c_void_p).value)
        lib.gpumem_torch_set_graph_support(b"")
    else:
        lib.gpumem_torch_set_graph_support(
            (f"PyTorch {torch_version} offers no graph memory pool hooks for a pluggable "
             f"allocator (CUDAPluggableAllocator lacks {', '.join(missing)}); a newer PyTorch "
             "has them").encode())
    return missing


def graph_pools(device=None) -> list:
    """The private memory pools of CUDA graphs on ``device`` (None: current), one dict each:
    ``id`` (PyTorch's pool id, as ``torch.cuda.graph_pool_handle()`` or ``graph.pool()`` give
    it), ``captures`` (captures into it not yet released), ``blocks`` (its blocks PyTorch holds),
    ``held`` (blocks of the main pool freed during a capture, kept until the release, since the
    graph may use them at every replay) and ``reserved_bytes`` (what the pool holds from the
    device). A pool exists from its first capture until every graph captured into it is reset or
    destroyed and its blocks are freed."""
    d = _device_index(device)
    lib = _library()
    n = lib.gpumem_torch_graph_pools(d, None, 0)
    if n < 0:
        raise ValueError(f"device {d} is out of range for the gpumem torch allocator")
    out = (ctypes.c_ulonglong * (6 * max(n, 1)))()
    n = min(n, lib.gpumem_torch_graph_pools(d, out, n))
    return [{"id": (out[6 * i], out[6 * i + 1]), "captures": out[6 * i + 2],
             "blocks": out[6 * i + 3], "held": out[6 * i + 4],
             "reserved_bytes": out[6 * i + 5]} for i in range(n)]


def _describe_installed() -> str:
    parts = []
    for d, s in _installed.items():
        what = "every device" if d is None else f"device {d}"
        parts.append(f"{what}: {s if isinstance(s, str) else type(s).__name__}")
    return "; ".join(parts)


def _keep_forever(resource) -> None:
    # Tensors may be freed during interpreter shutdown, after this module's globals are gone:
    # the resource must outlive them, so it is never destroyed.
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(resource))


def resource(device: int | None = None):
    """The resource object given to ``use()`` for ``device`` (None: current), or None (also for
    resources built from a spec, which live inside gpumem's allocator library)."""
    r = _installed.get(_device_index(device))
    return r if isinstance(r, DeviceMemoryResource) else None


def installed() -> dict:
    """What ``use()`` installed: ``{device: spec or resource}`` (None: every device); empty
    before ``use()``."""
    return dict(_installed)


# -- sleep and wake: regions -----------------------------------------------------------------

def use_regions(device: int | None = None, **options) -> VmmRegionMemoryResource:
    """Installs a ``VmmRegionMemoryResource(device=..., **options)`` as PyTorch's allocator for
    ``device`` (None: the current one), before PyTorch initializes CUDA (as ``use()``), and
    returns it. Its regions can then be paused and resumed: ``region``, ``pause``, ``resume``."""
    if device is None:
        device = _device_index(None)
    resource = VmmRegionMemoryResource(device=device, **options)
    return use(resource, device=device)


def region_resource(device=None):
    """The ``VmmRegionMemoryResource`` PyTorch allocates from on ``device`` (None: current), or
    None when ``use()`` installed something else or nothing."""
    r = _installed.get(_device_index(device))
    return r if isinstance(r, VmmRegionMemoryResource) else None


def _regions_of(device, what: str) -> VmmRegionMemoryResource:
    res = region_resource(device)
    if res is None:
        d = _device_index(device)
        if d in _installed:
            now = f"device {d} has {_installed[d]!r}"
        elif _installed:
            now = f"gpumem.torch.use() installed {_describe_installed()}"
        else:
            now = "gpumem.torch.use() was not called"
        raise RuntimeError(
            f"gpumem.torch.{what}: PyTorch does not allocate from a gpumem region resource on "
            f"device {d} ({now}); call gpumem.torch.use_regions() before the first CUDA tensor")
    return res


def region(tag: str, device=None):
    """``with gpumem.torch.region("kv_cache"):``: the tensors this thread allocates on ``device``
    inside the block belong to region ``tag`` (nestable; outside any region: ``"default"``)."""
    return _regions_of(device, "region").region(tag)


def pause(tag: str | None = None, offload: bool | str = False, device=None,
          streams=None) -> int:
    """Releases the device memory of region ``tag`` (None: every region, ``"default"`` too),
    keeping every address. ``offload=True`` keeps the contents in pinned host memory until
    ``resume``; ``offload="file"`` writes them to a temporary file instead (in the
    ``offload_directory`` given to ``use_regions``, else ``TMPDIR`` or /tmp; through at most
    128 MiB of pinned memory), for contents larger than the host memory one wants to pin.
    Waits for all of the device's work first; ``streams`` (``torch.cuda.Stream`` objects or
    ``cudaStream_t`` ints) waits for those streams only, leaving others' work running.
    Allocating in a paused region raises. Returns how many regions this paused."""
    res = _regions_of(device, "pause")
    return res.pause(tag, offload=offload, streams=streams)


def resume(tag: str | None = None, device=None) -> int:
    """Maps region ``tag`` (None: every region) again at the same addresses and copies offloaded
    contents back. Returns how many regions this resumed."""
    return _regions_of(device, "resume").resume(tag)


def regions(device=None) -> list:
    """The region names used so far on ``device``, sorted."""
    return _regions_of(device, "regions").regions()


# -- PyTorch memory pools (torch.cuda.MemPool) from gpumem ----------------------------------------

_open_slots: dict = {}   # slot -> spec, for pools alive or whose segments PyTorch still holds
_closing: set = set()    # slots whose MemPool is gone, closed once PyTorch gave their segments back


def mem_pool(spec: str | None = None, *, runtime=None, use_on_oom: bool = False,
             no_split: bool = False, paged: bool = False, slack: float = 0.0):
    """A ``torch.cuda.MemPool`` whose segments come from a gpumem stack built from ``spec`` (None:
    ``DEFAULT_SPEC``), beside PyTorch's own allocator for the rest of the process::

        pool = gpumem.torch.mem_pool()
        with torch.cuda.use_mem_pool(pool):
            kv_cache = torch.empty(n, device="cuda")   # placed by PyTorch in gpumem's segments

    Inside the pool PyTorch places the tensors and asks gpumem only for segments, on any device
    (each device gets its own stack); ``torch.cuda.memory_stats``, ``memory_snapshot`` and
    ``pool.snapshot()`` report them as for PyTorch's own pools. Several pools may live at once
    (up to ``gpumem_torch_pool_slots()``, 16). For memory registered with NCCL
    (``nccl_registration``, or ``register_mem_pool``) make the handles as NCCL asks:
    ``mem_pool("vmm_pool:peers=all,shareable=1,rdma=1")``. ``runtime``: a ``gpumem.HostRuntime``
    (tests). ``use_on_oom`` and ``no_split`` are ``torch.cuda.MemPool``'s own switches (the pool
    as a last resort when an allocation outside it runs out of memory; one tensor per segment, as
    PyTorch's symmetric memory wants), passed on when set.

    ``paged=True`` (no ``spec``): the segments PyTorch holds are address space only, and the
    device holds only the pages (2 MiB on current GPUs) that PyTorch's live tensors touch, plus
    free pages up to ``slack`` times the most pages live at once (0: none beyond the most pages
    ever live at once); beyond that a free page moves
    (unmapped where it is free, mapped where a tensor needs it, once the work queued before its
    free has finished). PyTorch keeps freed blocks cached in its segments, so a plain pool holds
    what its caching holds; a paged pool holds about its live tensors. It follows PyTorch's
    allocator trace through a small C++ extension built against this PyTorch on first use (a C++
    compiler is needed; the build is cached). Moving pages costs driver calls (tens of
    microseconds each) where tensors of changing shapes land on new pages; ``slack`` trades
    memory for fewer moves. Not for pools used while a CUDA graph is captured.

    Needs a PyTorch whose ``torch.cuda.MemPool`` takes an allocator (2.5 and later), and for the
    two switches one whose ``MemPool`` has them. Raises AllocatorConfigError for a bad spec,
    ValueError for ``paged`` with a spec or a bad ``slack``, RuntimeError when every slot is taken
    or the paged pool's extension cannot be built, TypeError when this PyTorch's ``MemPool`` lacks
    a switch that was set."""
    import torch

    if paged:
        return _paged_mem_pool(torch, spec, slack, runtime, use_on_oom, no_split)
    spec = _check_spec(DEFAULT_SPEC if spec is None else spec, spec, "mem_pool()")
    lib = _library()
    _close_finished()
    rt_handle = runtime._handle if runtime is not None else None
    simulated = int(runtime is not None and not getattr(runtime, "backed", True))
    slot = lib.gpumem_torch_pool_open(spec.encode(), rt_handle, simulated)
    if slot < 0:
        why = lib.gpumem_torch_pool_last_error().decode(errors="replace")
        if "slots is in use" in why:
            raise RuntimeError(why)
        raise AllocatorConfigError(why, spec, "mem_pool()")
    return _pool_over_slot(torch, lib, slot, spec, runtime, use_on_oom, no_split)


def _paged_mem_pool(torch, spec, slack, runtime, use_on_oom, no_split):
    """mem_pool(paged=True): a slot of paged segments, PyTorch's trace followed."""
    if spec is not None:
        raise ValueError(f"mem_pool(paged=True) takes no spec (got {spec!r}): its pages come "
                         "from the device directly")
    if isinstance(slack, bool) or not isinstance(slack, (int, float)) or not 0 <= slack <= 1e6:
        raise ValueError(f"mem_pool(paged=True, slack={slack!r}): slack is a fraction of at "
                         "least 0 (0.05 keeps free pages up to 5 % of the most pages live)")
    lib = _library()
    _close_finished()
    if runtime is None:  # the trace tells the pool where PyTorch puts each block
        _follow_trace(torch, lib)
    simulated = int(runtime is not None and not getattr(runtime, "backed", True))
    slot = lib.gpumem_torch_pool_open_paged(float(slack),
                                            runtime._handle if runtime else None, simulated)
    if slot < 0:
        why = lib.gpumem_torch_pool_last_error().decode(errors="replace")
        raise RuntimeError(why) if "slots is in use" in why else ValueError(why)
    return _pool_over_slot(torch, lib, slot, f"paged:slack={slack}", runtime, use_on_oom,
                           no_split)


_trace_followed = []


def _follow_trace(torch, lib) -> None:
    """Builds (once per PyTorch, cached by PyTorch) and loads the extension that forwards
    PyTorch's allocator trace to gpumem_torch_pages_event; attaches it once per process."""
    if _trace_followed:
        return
    import os

    source = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_torch_pages.cpp")
    try:
        from torch.utils import cpp_extension

        torch.cuda.init()  # the tracker reaches the devices PyTorch has set up
        ext = cpp_extension.load(name="gpumem_torch_pages", sources=[source],
                                 extra_cflags=["-O2"], with_cuda=True, verbose=False)
    except Exception as e:  # noqa: BLE001  (said in the error)
        raise RuntimeError(
            "gpumem.torch.mem_pool(paged=True) builds a small C++ extension against this PyTorch "
            f"on first use, and that failed: {type(e).__name__}: {e}. It needs a C++ compiler, "
            "ninja and the CUDA toolkit's headers (CUDA_HOME).") from e
    ext.attach(ctypes.cast(lib.gpumem_torch_pages_event, ctypes.c_void_p).value,
               ctypes.cast(lib.gpumem_torch_pool_last_error, ctypes.c_void_p).value)
    _trace_followed.append(ext)


def _pool_over_slot(torch, lib, slot, spec, runtime, use_on_oom, no_split):
    """The MemPool over slot `slot`'s segment functions (the slot given back if it fails)."""
    _open_slots[slot] = spec
    if runtime is not None:
        _keep_forever(runtime)
    try:
        allocator = torch.cuda.memory.CUDAPluggableAllocator(
            library_path(), f"gpumem_torch_pool_malloc_{slot}", f"gpumem_torch_pool_free_{slot}")
        pool = _make_mem_pool(torch, allocator, use_on_oom=use_on_oom, no_split=no_split)
    except Exception:
        lib.gpumem_torch_pool_close(slot)
        _open_slots.pop(slot, None)
        raise
    import weakref

    weakref.finalize(pool, _closing.add, slot)
    _pool_of[id(pool)] = slot
    weakref.finalize(pool, _pool_of.pop, id(pool), None)
    _live_pools[slot] = weakref.ref(pool)
    _guard_sharing()
    return pool


def _make_mem_pool(torch, allocator, **switches):
    """torch.cuda.MemPool over ``allocator``, with the switches that are set (only those: an
    older MemPool takes none)."""
    chosen = {k: True for k, v in switches.items() if v}
    try:
        return torch.cuda.MemPool(allocator.allocator(), **chosen)
    except TypeError as e:
        if not chosen:
            raise
        raise TypeError(f"gpumem.torch.mem_pool: this PyTorch's torch.cuda.MemPool does not take "
                        f"{' or '.join(chosen)} ({e}); use a PyTorch that has it, or leave it "
                        "unset") from None


_pool_of: dict = {}  # id(MemPool) -> slot, while the MemPool lives
_live_pools: dict = {}  # slot -> weakref to its MemPool (torch.multiprocessing's checks)


def _close_finished() -> None:
    """Closes the slots of pools that are gone and whose segments PyTorch gave back."""
    lib = _library()
    for slot in sorted(_closing):
        if lib.gpumem_torch_pool_close(slot) == 0:
            _closing.discard(slot)
            _open_slots.pop(slot, None)


def mem_pool_stats(pool) -> dict:
    """What gpumem holds for ``pool`` (a ``mem_pool()``): ``segments`` and ``segment_bytes`` that
    PyTorch holds now, ``allocations`` and ``failures`` so far, and ``held_bytes`` (what the
    stacks hold from the devices; for a paged pool, the pages backed). A paged pool adds
    ``live_pages`` (pages live tensors touch), ``peak_live_pages``, ``free_pages`` (backed, no
    live tensor), ``pages_created``, ``pages_moved``, ``moves_waited`` (moves that waited for
    the device), ``pages_released``, ``page_bytes``, and ``backing_seconds`` and
    ``freeing_seconds`` (host time spent following PyTorch's allocations and frees, driver calls
    and waits included)."""
    slot = _pool_of.get(id(pool))
    if slot is None:
        raise ValueError("not a pool made by gpumem.torch.mem_pool() (or it is gone)")
    lib = _library()
    out = (ctypes.c_ulonglong * 5)()
    lib.gpumem_torch_pool_stats(slot, out, 5)
    keys = ("segments", "segment_bytes", "allocations", "failures", "held_bytes")
    stats = dict(zip(keys, out))
    paged = (ctypes.c_ulonglong * 11)()
    if lib.gpumem_torch_pool_paged_stats(slot, paged, 11) == 11:
        keys = ("held_bytes", "live_pages", "peak_live_pages", "free_pages", "pages_created",
                "pages_moved", "moves_waited", "pages_released", "page_bytes")
        stats.update(zip(keys, paged))
        stats["backing_seconds"] = paged[9] / 1e6
        stats["freeing_seconds"] = paged[10] / 1e6
    return stats


def mem_pool_trim(pool) -> None:
    """Gives the free memory of ``pool`` (a ``mem_pool()``) back to the devices: what PyTorch gave
    back to it (``torch.cuda.empty_cache()`` returns a pool's unused segments), not what PyTorch
    still holds; for a paged pool, every free page too (PyTorch's cached blocks keep their
    addresses, and get pages again when used)."""
    slot = _pool_of.get(id(pool))
    if slot is None:
        raise ValueError("not a pool made by gpumem.torch.mem_pool() (or it is gone)")
    _library().gpumem_torch_pool_trim(slot)


def mem_pool_spec(pool) -> str:
    """The spec the segments of ``pool`` (a ``mem_pool()``) come from."""
    slot = _pool_of.get(id(pool))
    if slot is None:
        raise ValueError("not a pool made by gpumem.torch.mem_pool() (or it is gone)")
    return _open_slots[slot]


# -- NCCL buffer registration that follows the memory (python/gpumem/_torch_nccl.py) -----------

def nccl_registration(process_group, pool, *, unit: str | None = None, device: int | None = None):
    """Registers with NCCL (``ncclCommRegister``) every byte ``pool`` has mapped, and keeps it so
    while the pool grows, moves free memory, trims, pauses and resumes: new memory is registered
    after it is mapped, memory given back is deregistered (before a pause unmaps it). ``pool`` is a
    ``mem_pool()`` (its stack on ``device``, default the current device; the spec must take memory
    from a ``vmm_pool``) or a ``gpumem.VmmPoolMemoryResource``. ``process_group``: an NCCL process
    group of ``torch.distributed`` (None: the default group), whose communicator registers.

    ``unit``: ``"handle"`` registers each physical handle on its own (NCCL before 2.29.2 registers
    only single-handle buffers), ``"run"`` each run of handles mapped together (NCCL 2.29.2 and
    later); None picks it from the NCCL version. For NCCL, make the pool's memory shareable and
    RDMA capable: ``mem_pool("vmm_pool:peers=all,shareable=1,rdma=1")``.

    Returns a registration (``close()``, or use it as a context manager; ``failures`` and
    ``last_failure`` report NCCL calls that failed, which never raise through the pool). Close it
    before destroying the process group. Use it instead of ``register_mem_pool``, not beside it::

        pool = gpumem.torch.mem_pool("vmm_pool:shareable=1,rdma=1")
        with torch.cuda.use_mem_pool(pool):
            grads = torch.empty(n, device="cuda")
        with gpumem.torch.nccl_registration(None, pool):
            dist.all_reduce(grads)       # on registered memory
    """
    from . import _torch_nccl

    comm = _torch_nccl.communicator(process_group)
    lib = _torch_nccl.nccl_library()
    lib = _torch_nccl.matching_library(lib, _torch_nccl.torch_nccl_version(),
                                       getattr(lib, "_name", ""))
    return _torch_nccl.registration(pool, comm, lib, unit, device, lambda p: _pool_of.get(id(p)))


# -- torch.multiprocessing (python/gpumem/_torch_sharing.py) --------------------------------------

from ._torch_sharing import SharingError  # noqa: E402


def _guard_sharing() -> None:
    """Puts gpumem's checks in front of torch.multiprocessing's CUDA tensor pickling: a tensor of
    gpumem memory sent away, or one received under use(), raises SharingError saying what to do."""
    from . import _torch_sharing

    def pools():
        return [(ref(), _open_slots.get(slot, "")) for slot, ref in list(_live_pools.items())
                if ref() is not None]

    try:
        _torch_sharing.guard(lambda: bool(_installed), pools)
    except ImportError:  # a PyTorch without torch.multiprocessing: nothing to guard
        pass


torch_memory_saver = TorchMemorySaver()
"""torch_memory_saver's singleton, over gpumem's regions: ``from gpumem.torch import
torch_memory_saver`` in place of ``from torch_memory_saver import torch_memory_saver``."""


# -- statistics --------------------------------------------------------------------------------

def _device_index(device) -> int:
    if device is None:
        torch = sys.modules.get("torch")
        try:
            if torch is not None and torch.cuda.is_initialized():
                return int(torch.cuda.current_device())
        except Exception:  # noqa: BLE001  (a fake or partial torch: fall back to gpumem's view)
            pass
        try:
            return get_current_device()
        except Exception:  # noqa: BLE001  (no GPU: device 0)
            return 0
    if isinstance(device, int):
        return device
    if isinstance(device, str):
        m = re.fullmatch(r"\s*cuda(?::(\d+))?\s*", device)
        if not m:
            raise ValueError(f"expected a CUDA device ('cuda', 'cuda:1', an int), got {device!r}")
        return int(m.group(1)) if m.group(1) else _device_index(None)
    index = getattr(device, "index", None)  # torch.device
    if getattr(device, "type", "cuda") != "cuda":
        raise ValueError(f"expected a CUDA device, got {device!r}")
    return _device_index(None) if index is None else int(index)


_STAT_COUNT = 18
_KINDS = ("current", "peak", "allocated", "freed")


def _raw_stats(device) -> list:
    d = _device_index(device)
    out = (ctypes.c_ulonglong * _STAT_COUNT)()
    if _library().gpumem_torch_stats(d, out, _STAT_COUNT) < 0:
        raise ValueError(f"device {d} is out of range for the gpumem torch allocator")
    return list(out)


def memory_stats(device=None) -> dict:
    """The statistics of ``device`` (None: current) under PyTorch's key names and meanings:

    * ``allocated_bytes.all.{current,peak,allocated,freed}``: bytes of the blocks PyTorch holds
      (what it asked for); ``active_bytes`` and ``requested_bytes`` are the same figures (gpumem
      frees at once, on the block's stream, so nothing is active without being allocated);
    * ``allocation.all.*`` and ``active.all.*``: the number of those blocks;
    * ``reserved_bytes.all.*``: bytes gpumem holds from the device (memory obtained through
      cudaMalloc / the virtual-memory API, or a CUDA pool's reserved memory); for a resource
      object given to ``use()`` gpumem cannot see this and reports the allocated figures;
    * ``num_device_alloc``, ``num_device_free``: memory obtained from / given back to the device;
    * ``num_alloc_retries``: allocations that ran out of memory, gave free memory back and tried
      again; ``num_ooms``: allocations that failed (raised out-of-memory).

    There is no ``small_pool`` / ``large_pool`` split. All zeros before the first allocation.
    """
    v = _raw_stats(device)
    reserved = v[8:12] if v[17] else v[0:4]
    out = {}
    for name, values in (("active", v[4:8]), ("active_bytes", v[0:4]), ("allocated_bytes", v[0:4]),
                         ("allocation", v[4:8]), ("requested_bytes", v[0:4]),
                         ("reserved_bytes", reserved)):
        for kind, value in zip(_KINDS, values):
            out[f"{name}.all.{kind}"] = value
    out["num_alloc_retries"] = v[14]
    out["num_device_alloc"] = v[12] if v[17] else v[6]
    out["num_device_free"] = v[13] if v[17] else v[7]
    out["num_ooms"] = v[15]
    return dict(sorted(out.items()))


def memory_allocated(device=None) -> int:
    """Bytes PyTorch's tensors hold on ``device`` now (``allocated_bytes.all.current``)."""
    return memory_stats(device)["allocated_bytes.all.current"]


def max_memory_allocated(device=None) -> int:
    """The most bytes PyTorch's tensors held at once since the start or the last
    ``reset_peak_memory_stats()``."""
    return memory_stats(device)["allocated_bytes.all.peak"]


def memory_reserved(device=None) -> int:
    """Bytes gpumem holds from ``device`` now (``reserved_bytes.all.current``)."""
    return memory_stats(device)["reserved_bytes.all.current"]


def max_memory_reserved(device=None) -> int:
    """The most bytes gpumem held from ``device`` at once since the start or the last
    ``reset_peak_memory_stats()``."""
    return memory_stats(device)["reserved_bytes.all.peak"]


def reset_peak_memory_stats(device=None) -> None:
    """Starts every peak (``*.peak``) anew at the current value."""
    _library().gpumem_torch_reset_peak(_device_index(device))


def reset_accumulated_memory_stats(device=None) -> None:
    """Zeroes the running totals (``*.allocated``, ``*.freed``, ``num_*``)."""
    _library().gpumem_torch_reset_accumulated(_device_index(device))


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024
    return str(n)  # unreachable


def memory_summary(device=None, abbreviated: bool = False) -> str:
    """A table of ``memory_stats(device)`` for people, laid out like PyTorch's."""
    s = memory_stats(device)
    d = _device_index(device)
    spec = _installed.get(d, _installed.get(None))
    spec = spec if isinstance(spec, str) or spec is None else type(spec).__name__
    rows = [("Allocated memory", "allocated_bytes", True),
            ("Reserved memory", "reserved_bytes", True),
            ("Allocations", "allocation", False)]
    width = 75
    lines = ["=" * width,
             f" gpumem memory summary, device {d}: {spec or 'no gpumem allocator installed'}",
             "-" * width,
             f" {'':<22}{'Current':>12}{'Peak':>12}{'Tot. alloc':>14}{'Tot. freed':>14}",
             "-" * width]
    for title, key, is_bytes in rows:
        fmt = _size if is_bytes else str
        vals = [fmt(s[f"{key}.all.{k}"]) for k in _KINDS]
        lines.append(f" {title:<22}{vals[0]:>12}{vals[1]:>12}{vals[2]:>14}{vals[3]:>14}")
    if not abbreviated:
        lines.append("-" * width)
        lines.append(f" Device allocations: {s['num_device_alloc']}   device frees: "
                     f"{s['num_device_free']}   retries: {s['num_alloc_retries']}   "
                     f"out-of-memory errors: {s['num_ooms']}")
    lines.append("=" * width)
    return "\n".join(lines) + "\n"


def empty_cache() -> None:
    """Gives the memory gpumem holds but does not use back to the devices, where the resource
    can: per-thread caches flush, virtual-memory pools (``vmm_pool``) and CUDA pools
    (``cuda_async``) trim to what is in use, and so does a resource object given to ``use()``
    that can (a ``VmmPoolMemoryResource``, every region of a ``VmmRegionMemoryResource``). The
    pool and the arena keep what they hold. ``torch.cuda.empty_cache()`` does the same once
    ``use()`` has run. An allocation that runs out of memory does this once and tries again."""
    _library().gpumem_torch_empty_cache()


# -- out of memory -----------------------------------------------------------------------------

_OOM_MARK = "gpumem: CUDA out of memory"


class out_of_memory_errors(contextlib.ContextDecorator):
    """Turns gpumem's out-of-memory errors that reach Python as RuntimeError into
    ``torch.OutOfMemoryError`` (same message), so that ``except torch.OutOfMemoryError`` works
    in every build. A context manager and a decorator::

        with gpumem.torch.out_of_memory_errors():
            loss = model(batch)

    Only needed when gpumem was built without PyTorch present (``raises_torch_out_of_memory()``
    is False); otherwise PyTorch raises torch.OutOfMemoryError itself. ``python -m gpumem.torch``
    runs the whole program inside it."""

    def __enter__(self):
        return self

    def __exit__(self, kind, error, traceback):
        if error is None or not isinstance(error, (RuntimeError, MemoryError)):
            return False
        torch = sys.modules.get("torch")
        oom = getattr(torch, "OutOfMemoryError", None) if torch is not None else None
        if oom is None or isinstance(error, oom) or _OOM_MARK not in str(error):
            return False
        raise oom(str(error)) from error


# -- recording ---------------------------------------------------------------------------------

# The C type of the frames callback: int frames(char* buf, int cap).
_FRAMES_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_int)

MAX_FRAMES = 32
"""The most frames ``record(frames=True)`` keeps per allocation (the innermost ones)."""

_frame_skip: tuple = ()  # path prefixes of the frames left out (gpumem's and torch's packages)
_frame_texts: dict = {}  # (id(code), instruction) -> (code, frame text), while recording
_frames_callback = None  # the ctypes callback; kept for the life of the process (see record)


def _package_dirs(*modules) -> tuple:
    """The folders of the modules' files, as given and made absolute (a frame's filename is the
    path the module was imported by), each ending in a separator."""
    out = []
    for module in modules:
        path = getattr(module, "__file__", None)
        if path:
            for folder in (os.path.dirname(path), os.path.dirname(os.path.abspath(path))):
                if folder and folder + os.sep not in out:
                    out.append(folder + os.sep)
    return tuple(out)


def _stack_text(frame, limit: int = MAX_FRAMES) -> str:
    """The Frames column of an allocation: from `frame` outwards, the frames outside
    _frame_skip, each ``name (filename:line)`` as ``gpumem convert`` writes PyTorch's, innermost
    first, joined by ``|`` (a ``|`` inside a frame becomes ``/``), at most `limit` of them."""
    out = []
    texts = _frame_texts
    skip = _frame_skip
    while frame is not None and len(out) < limit:
        code = frame.f_code
        # Keyed by the code's id (hashing a code object hashes its contents) and the instruction
        # (f_lineno searches the line table); the entry keeps the code alive, so the id is its.
        key = (id(code), frame.f_lasti)
        entry = texts.get(key)
        if entry is None or entry[0] is not code:
            filename = code.co_filename
            text = "" if skip and filename.startswith(skip) else \
                f"{code.co_name} ({filename}:{frame.f_lineno})".replace("|", "/") \
                .replace("\n", " ").replace("\r", " ")
            entry = texts[key] = (code, text)
        if entry[1]:
            out.append(entry[1])
        frame = frame.f_back
    return "|".join(out)


def _write_frames(buf, cap) -> int:
    """The frames callback: called by the allocator library on the allocating thread (ctypes
    takes the GIL); writes the caller's Python stack into buf, whole frames only, at most cap
    bytes, and returns the length. Never raises (an error gives an empty stack)."""
    try:
        data = _stack_text(sys._getframe().f_back).encode("utf-8", "replace")
        if len(data) > cap:
            cut = data.rfind(b"|", 0, cap + 1)
            data = data[:max(cut, 0)]
        ctypes.memmove(buf, data, len(data))
        return len(data)
    except BaseException:  # noqa: BLE001 - an exception must not cross into C++
        return 0


@contextlib.contextmanager
def record(path, frames: bool = False, snapshot=None):
    """Writes every allocation and free PyTorch makes through gpumem, on every device, while the
    ``with`` block runs, to ``path``: a gpumem trace (CSV) that ``gpumem replay path`` replays
    against any resource.

    ``frames=True`` adds the ``Frames`` column: each allocate row carries the Python call stack
    that made the allocation, innermost first, each frame ``name (filename:line)`` as ``gpumem
    convert`` writes PyTorch's snapshot stacks, at most ``MAX_FRAMES`` (32) frames. Frames of
    gpumem's package and of torch's (``torch/nn/modules/module.py``, ``torch/nn/functional.py``,
    the optimizers, ...) are left out, so that the innermost frame is the program's own line. The
    replay report (``results.json``: ``frames``, ``stacks``) then tells which code made the blocks
    live at the peak. Allocations made on threads with no Python code running (the autograd
    engine's, in ``backward()``) have an empty stack. Each allocation then calls into Python and
    takes the GIL on the allocating thread (about 10 µs, more for deep stacks): a debugging aid,
    not for timing runs. Without frames nothing of that happens.

    ``snapshot="x.pickle"`` also writes, when the block ends, a PyTorch memory snapshot of the
    recording (``write_snapshot``): https://pytorch.org/memory_viz opens it.

    Raises RuntimeError when a recording is already running, the file cannot be opened, or it
    could not be written completely."""
    global _frames_callback, _frame_skip
    lib = _library()
    if frames:
        if _frames_callback is None:  # never freed: a thread may still be inside it after stop
            _frames_callback = _FRAMES_FN(_write_frames)
        _frame_skip = _package_dirs(sys.modules.get("gpumem"), sys.modules.get("torch"))
        _frame_texts.clear()
        started = lib.gpumem_torch_record_start2(os.fsencode(path), _frames_callback)
    else:
        started = lib.gpumem_torch_record_start(os.fsencode(path))
    if started != 0:
        raise RuntimeError(f"gpumem.torch.record({os.fspath(path)!r}): {_last_error()}")
    try:
        yield path
    finally:
        stopped = lib.gpumem_torch_record_stop()
        _frame_texts.clear()
        if stopped != 0:
            raise RuntimeError(f"gpumem.torch.record({os.fspath(path)!r}): {_last_error()}")
        if snapshot is not None:
            write_snapshot(path, snapshot, _device_index(None))


# -- PyTorch memory snapshots (memory_viz) ------------------------------------------------------

_SNAPSHOT_FRAME = re.compile(r"^(?P<name>.*) \((?P<filename>.*):(?P<line>\d+)\)$")


class TraceFormatError(ValueError):
    """A trace that ``write_snapshot`` cannot read: ``path``, ``line`` (1-based, 0 for the whole
    file) and what is wrong, in the message."""

    def __init__(self, message: str, path: str = "", line: int = 0):
        super().__init__(message)
        self.path = path
        self.line = line


def _snapshot_frames(text: str) -> list:
    """The Frames column of a trace row as PyTorch's frames, innermost first: each
    ``name (filename:line)`` becomes ``{"name", "filename", "line"}`` (text that is not of that
    form becomes the name, with no file)."""
    out = []
    for part in filter(None, text.split("|")):
        m = _SNAPSHOT_FRAME.match(part)
        if m:
            out.append({"name": m.group("name"), "filename": m.group("filename"),
                        "line": int(m.group("line"))})
        else:
            out.append({"name": part, "filename": "", "line": 0})
    return out


def snapshot_from_trace(trace, device: int = 0) -> dict:
    """Builds a PyTorch memory snapshot (the dict ``torch.cuda.memory._snapshot()`` returns, which
    PyTorch's memory_viz reads) from a gpumem trace (the CSV ``record()`` writes; a path or an
    open text file). A trace holds no device: every event goes to ``device``.

    * ``device_traces[device]``: per allocate row an ``alloc`` entry, per free row
      ``free_requested`` then ``free_completed`` (gpumem frees at once), per failed allocation an
      ``oom`` entry; each with ``addr``, ``size``, ``stream``, ``time_us`` and ``frames`` (the
      allocation's Python stack when recorded with ``frames=True``; a free carries its block's);
    * ``segments``: one per block still allocated at the end of the trace (gpumem's pools do not
      keep PyTorch's segment and block layout), each holding that block as ``active_allocated``.

    Raises TraceFormatError (a ValueError) naming the file, the line and the problem."""
    import csv
    import io

    if hasattr(trace, "read"):
        name = str(getattr(trace, "name", "<trace>"))
        text = trace.read()
    else:
        name = os.fspath(trace)
        with open(name, newline="", encoding="utf-8") as f:
            text = f.read()
    rows = csv.reader(io.StringIO(text))
    header = next(rows, None)
    expected = ["Thread", "Time", "Action", "Pointer", "Size", "Stream"]
    if header is None or header[:6] != expected or header[6:] not in ([], ["Frames"]):
        raise TraceFormatError(
            f"{name}: not a gpumem trace: the first line is {','.join(header or [])!r}, "
            f"expected {','.join(expected)!r} (optionally ',Frames')", str(name), 1)
    events: list = []
    live: dict = {}  # address -> its alloc entry
    for number, row in enumerate(rows, start=2):
        if not row:
            continue
        if len(row) < 6:
            raise TraceFormatError(f"{name}:{number}: {len(row)} fields, expected at least 6",
                                   str(name), number)
        try:
            time_us, action = int(row[1]), row[2]
            addr, size, stream = int(row[3], 16), int(row[4]), int(row[5])
        except ValueError as e:
            raise TraceFormatError(f"{name}:{number}: {e} in {','.join(row)!r}", str(name),
                                   number) from None
        if action == "allocate":
            entry = {"action": "alloc", "addr": addr, "size": size, "stream": stream,
                     "time_us": time_us, "frames": _snapshot_frames(row[6] if len(row) > 6 else ""),
                     "device": device}
            live[addr] = entry
            events.append(entry)
        elif action == "free":
            block = live.pop(addr, None)
            frames = block["frames"] if block is not None else []
            for kind in ("free_requested", "free_completed"):
                events.append({"action": kind, "addr": addr, "size": size, "stream": stream,
                               "time_us": time_us, "frames": frames, "device": device})
        elif action == "allocate failure":
            events.append({"action": "oom", "addr": 0, "size": size, "stream": stream,
                           "time_us": time_us, "frames": [], "device_free": 0,
                           "device": device})
        else:
            raise TraceFormatError(f"{name}:{number}: unknown action {action!r} (expected "
                                   "allocate, free or allocate failure)", str(name), number)
    segments = []
    for addr, e in sorted(live.items()):
        block = {"address": addr, "size": e["size"], "requested_size": e["size"],
                 "state": "active_allocated", "frames": e["frames"]}
        segments.append({"device": device, "address": addr, "total_size": e["size"],
                         "allocated_size": e["size"], "active_size": e["size"],
                         "requested_size": e["size"], "stream": e["stream"],
                         "segment_type": "large", "segment_pool_id": (0, 0),
                         "is_expandable": False, "frames": [], "blocks": [block]})
    traces: list = [[] for _ in range(device + 1)]
    traces[device] = events
    return {"segments": segments, "device_traces": traces,
            "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": "gpumem"},
            "external_annotations": []}


def write_snapshot(trace, path, device: int = 0) -> dict:
    """Writes ``snapshot_from_trace(trace, device)`` to ``path`` as a pickle, the file
    ``torch.cuda.memory._dump_snapshot`` writes: https://pytorch.org/memory_viz opens it, and so
    do ``python -m torch.cuda._memory_viz trace_plot path`` and ``gpumem convert path``. Returns
    the snapshot."""
    import pickle

    snapshot = snapshot_from_trace(trace, device)
    with open(path, "wb") as f:
        pickle.dump(snapshot, f)
    return snapshot


# -- PyTorch's own functions -------------------------------------------------------------------

_PATCHED = ("memory_stats", "memory_allocated", "max_memory_allocated", "memory_reserved",
            "max_memory_reserved", "reset_peak_memory_stats", "reset_accumulated_memory_stats",
            "memory_summary")


def _patch_torch(torch) -> None:
    """Points torch.cuda's statistics functions at this module's (PyTorch's raise under a
    pluggable allocator)."""
    here = sys.modules[__name__]
    for module in (torch.cuda, getattr(torch.cuda, "memory", None)):
        if module is None:
            continue
        for name in _PATCHED:
            if hasattr(module, name):
                _torch_originals.setdefault((module.__name__, name), getattr(module, name))
                setattr(module, name, getattr(here, name))


# -- the command line: python -m gpumem.torch ---------------------------------------------------

_USAGE = """usage: python -m gpumem.torch [--alloc SPEC] (SCRIPT | -m MODULE) [ARGS...]

Runs a Python program with gpumem as PyTorch's CUDA allocator, without changing it.
SPEC defaults to $GPUMEM_TORCH_ALLOC, else 'vmm_pool:peers=all'; per device: '0=pool;1=vmm_pool'.
"""


def _main(argv: list) -> int:
    import runpy

    import gpumem.torch as this  # the imported module, not __main__: one allocator state

    spec = None
    while argv and argv[0].startswith("--alloc"):
        if argv[0] == "--alloc" and len(argv) > 1:
            spec, argv = argv[1], argv[2:]
        elif argv[0].startswith("--alloc="):
            spec, argv = argv[0][len("--alloc="):], argv[1:]
        else:
            break
    if not argv or argv[0] in ("-h", "--help"):
        sys.stderr.write(_USAGE)
        return 0 if argv else 2
    if argv[0] == "-m" and len(argv) < 2:
        sys.stderr.write(_USAGE)
        return 2
    try:  # the spec first: a bad one is said whether PyTorch is there or not
        if spec is not None:
            this.parse_config(spec, "--alloc")
        else:
            this.config_from_env()
        import torch  # noqa: F401
        this.use(spec)
    except this.AllocatorConfigError as e:
        sys.stderr.write(f"gpumem.torch: {e}\n")
        return 2
    except ImportError as e:
        sys.stderr.write(f"gpumem.torch: cannot run {argv[-1] if argv[0] == '-m' else argv[0]}: "
                         f"PyTorch is not installed here ({e}); install it (pip install torch) "
                         "or run the program without gpumem.torch\n")
        return 1
    with this.out_of_memory_errors():
        if argv[0] == "-m":
            sys.argv = argv[1:]
            runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        else:
            sys.argv = argv
            sys.path[0] = os.path.dirname(os.path.abspath(argv[0]))
            runpy.run_path(argv[0], run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
