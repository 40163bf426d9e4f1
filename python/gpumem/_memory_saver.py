"""torch_memory_saver's API over gpumem's regions (see ``gpumem.torch.torch_memory_saver``).

SGLang- and verl-style code switches by changing one import::

    from gpumem.torch import torch_memory_saver      # instead of: from torch_memory_saver import ...

    with torch_memory_saver.region(tag="weights", enable_cpu_backup=True):
        model = build_model().cuda()
    with torch_memory_saver.region(tag="kv_cache"):
        kv_cache = torch.empty(..., device="cuda")
    torch_memory_saver.pause()            # every region's memory goes back to the device
    ...                                   # another phase uses the GPU
    torch_memory_saver.resume()           # same addresses; "weights" has its contents again

A tag is a gpumem region of the resource ``gpumem.torch`` installed for the current device (a
``VmmRegionMemoryResource``; ``use_regions()`` installs one, and the first ``region()`` does so
when nothing is installed yet). Tags live under the region names ``"saver:" + tag``, so they never
meet the region ``"default"``, where allocations outside any ``region()`` (and inside
``disable()``) go, and which ``pause()`` leaves alone, as torch_memory_saver does.
"""

from __future__ import annotations

import contextlib
import threading

PREFIX = "saver:"


class TorchMemorySaver:
    """The methods and properties of torch_memory_saver's ``TorchMemorySaver`` that gpumem
    provides: ``region``, ``cuda_graph``, ``disable``, ``pause``, ``resume``, ``enabled``,
    ``hook_mode``. ``enable_cpu_backup=True`` on a tag's region makes its pause keep the contents
    in pinned host memory (gpumem's ``offload``), restored by ``resume``; without it the contents
    are dropped and the memory comes back uninitialized."""

    def __init__(self):
        self._lock = threading.Lock()
        self._backup: dict = {}  # tag -> bool (enable_cpu_backup of its regions)
        self._hook_mode = "torch"

    # -- torch_memory_saver's API ------------------------------------------------------------------

    @contextlib.contextmanager
    def region(self, tag: str = "default", enable_cpu_backup: bool = False):
        """Tensors allocated on this thread inside the block belong to ``tag``."""
        res = self._resource()
        self._remember(tag, enable_cpu_backup)
        with res.region(PREFIX + tag):
            yield

    @contextlib.contextmanager
    def cuda_graph(self, cuda_graph, pool=None, stream=None, capture_error_mode: str = "global",
                   tag: str = "default", enable_cpu_backup: bool = False):
        """``torch.cuda.graph(...)`` inside ``region(tag)``: tensors allocated in the block outside
        the capture's own memory belong to ``tag``. The memory the capture itself allocates comes
        from the graph's private pool (see ``gpumem.torch.graph_pools()``), which pause does not
        release."""
        import torch

        with self.region(tag, enable_cpu_backup):
            with torch.cuda.graph(cuda_graph, pool=pool, stream=stream,
                                  capture_error_mode=capture_error_mode):
                yield

    @contextlib.contextmanager
    def disable(self):
        """Tensors allocated on this thread inside the block belong to no tag (pause leaves them
        alone), even inside a ``region()``."""
        res = self._resource()
        with res.region("default"):
            yield

    def pause(self, tag: str | None = None) -> None:
        """Releases the device memory of ``tag`` (None: every tag), keeping every address; tags
        with ``enable_cpu_backup`` keep their contents in host memory. A tag already paused is
        left as it is."""
        res = self._resource()
        for t in self._tags(tag):
            res.pause(PREFIX + t, offload=self._backup[t])

    def resume(self, tag: str | None = None) -> None:
        """Maps device memory again under ``tag`` (None: every tag) at the same addresses and
        copies back what was backed up. A tag that is not paused is left as it is."""
        res = self._resource()
        for t in self._tags(tag):
            res.resume(PREFIX + t)

    @property
    def enabled(self) -> bool:
        """True when PyTorch's allocations go through a gpumem region resource."""
        from . import torch as gt

        return gt.region_resource() is not None

    @property
    def hook_mode(self) -> str:
        """Always "torch": gpumem is PyTorch's allocator (CUDAPluggableAllocator), so no preloaded
        library is involved. Setting it accepts "torch" and "preload" (the setting of code written
        for torch_memory_saver) and changes nothing else."""
        return self._hook_mode

    @hook_mode.setter
    def hook_mode(self, value: str) -> None:
        if value not in ("torch", "preload"):
            raise ValueError(f"hook_mode: expected 'torch' or 'preload', got {value!r}")
        self._hook_mode = value

    # -- gpumem's view -----------------------------------------------------------------------------

    def tags(self) -> list:
        """The tags used so far, sorted."""
        with self._lock:
            return sorted(self._backup)

    def state(self, tag: str) -> str:
        """``"active"``, ``"paused_discarded"`` or ``"paused_offloaded"``."""
        self._tags(tag)
        return self._resource().state(PREFIX + tag)

    def _resource(self):
        from . import torch as gt

        res = gt.region_resource()
        if res is None and not gt.installed():
            res = gt.use_regions()  # nothing installed yet: regions on the current device
        return res if res is not None else gt._regions_of(None, "torch_memory_saver")

    def _remember(self, tag, enable_cpu_backup) -> None:
        if not isinstance(tag, str) or not tag:
            raise ValueError(f"a tag must be a non-empty string, got {tag!r}")
        with self._lock:
            before = self._backup.setdefault(tag, bool(enable_cpu_backup))
        if before != bool(enable_cpu_backup):
            raise ValueError(
                f"tag {tag!r} was used with enable_cpu_backup={before}; one tag is paused one way: "
                f"use another tag for enable_cpu_backup={bool(enable_cpu_backup)}")

    def _tags(self, tag) -> list:
        with self._lock:
            if tag is None:
                return sorted(self._backup)
            if tag not in self._backup:
                known = ", ".join(repr(t) for t in sorted(self._backup)) or "none yet"
                raise ValueError(f"no region was opened with tag {tag!r} (tags: {known})")
            return [tag]
