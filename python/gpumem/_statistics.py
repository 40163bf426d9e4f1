"""Memory statistics of the current device's resource, for code that does not build its own
stack: switch them on, read them, measure a block of code, or profile functions.

    gpumem.enable_statistics()                 # wraps the current resource once
    with gpumem.statistics() as scope:         # counters of this block only
        run()
    print(scope.result.peak_bytes)

    @gpumem.profiler                           # per-function records
    def step(): ...
    print(gpumem.default_profiler_records.report())

Scopes nest (a ``StatisticsResourceAdaptor``'s ``push_counters`` / ``pop_counters``); an inner
scope's allocations count in the outer one too. The scopes of one device's resource form one
stack for the whole process: measure from one thread at a time.
"""

from __future__ import annotations

import contextlib
import functools
import sys
import threading
from dataclasses import dataclass, field
from typing import Callable, Iterator

__all__ = [
    "Statistics", "StatisticsScope", "StatisticsNotEnabledError", "enable_statistics",
    "get_statistics", "push_statistics", "pop_statistics", "statistics", "ProfilerRecord",
    "ProfilerRecords", "default_profiler_records", "profiler",
]


class StatisticsNotEnabledError(RuntimeError):
    """The device's current resource keeps no statistics; ``gpumem.enable_statistics()`` (or a
    ``with gpumem.statistics():`` block) switches them on."""


@dataclass(frozen=True)
class Statistics:
    """Bytes and allocations through a statistics adaptor: now (``current_*``), at most
    (``peak_*``) and in total (``total_*``, counting every allocation ever made)."""

    current_bytes: int
    peak_bytes: int
    total_bytes: int
    current_count: int
    peak_count: int
    total_count: int

    @classmethod
    def _of(cls, nbytes, count) -> "Statistics":
        return cls(nbytes.value, nbytes.peak, nbytes.total, count.value, count.peak, count.total)


def _device(device: int | None) -> int:
    from . import get_current_device

    return get_current_device() if device is None else int(device)


def _adaptor(device: int | None):
    """The device's current resource when it keeps statistics, else None."""
    from . import StatisticsResourceAdaptor, get_per_device_resource

    r = get_per_device_resource(_device(device))
    return r if isinstance(r, StatisticsResourceAdaptor) else None


def _require(device: int | None):
    a = _adaptor(device)
    if a is None:
        raise StatisticsNotEnabledError(
            f"the current resource of device {_device(device)} keeps no statistics; call "
            "gpumem.enable_statistics() first, or measure inside 'with gpumem.statistics():'")
    return a


def enable_statistics(device: int | None = None):
    """Makes the device's current resource (``device`` None: the current device) keep
    statistics: wraps it in a ``StatisticsResourceAdaptor`` and sets that as the device's
    resource, unless it already is one. Returns the adaptor. Allocations made before keep going
    back to the resource they came from."""
    from . import StatisticsResourceAdaptor, get_per_device_resource, set_per_device_resource

    d = _device(device)
    a = _adaptor(d)
    if a is None:
        a = StatisticsResourceAdaptor(get_per_device_resource(d))
        set_per_device_resource(d, a)
    return a


def get_statistics(device: int | None = None) -> Statistics | None:
    """The counters of the innermost scope of the device's current resource, or None when it
    keeps no statistics."""
    a = _adaptor(device)
    if a is None:
        return None
    return Statistics._of(a.get_bytes_counter(), a.get_allocations_counter())


def push_statistics(device: int | None = None) -> Statistics:
    """Starts a scope with zeroed counters; returns the counters of the scope around it.
    Raises StatisticsNotEnabledError when the resource keeps no statistics."""
    nbytes, count = _require(device).push_counters()
    return Statistics._of(nbytes, count)


def pop_statistics(device: int | None = None) -> Statistics:
    """Ends the innermost scope (its counts are added to the one around it) and returns its
    counters. Raises StatisticsNotEnabledError when the resource keeps no statistics, IndexError
    when no scope was started."""
    nbytes, count = _require(device).pop_counters()
    return Statistics._of(nbytes, count)


class StatisticsScope:
    """What ``with gpumem.statistics() as scope:`` gives: ``scope.current()`` reads the block's
    counters while it runs; ``scope.result`` holds them once it has ended (None before)."""

    def __init__(self, adaptor):
        self._adaptor = adaptor
        self.result: Statistics | None = None

    def current(self) -> Statistics:
        """The counters of this block so far (while it runs; the enclosing scope's after)."""
        if self.result is not None:
            return self.result
        a = self._adaptor
        return Statistics._of(a.get_bytes_counter(), a.get_allocations_counter())

    def __repr__(self) -> str:
        return f"StatisticsScope(result={self.result!r})"


@contextlib.contextmanager
def statistics(device: int | None = None) -> Iterator[StatisticsScope]:
    """Measures the allocations of a block of code on the device's current resource (``device``
    None: the current device). Switches statistics on for the block when they are off, and back
    off afterwards (setting the previous resource again).

        with gpumem.statistics() as scope:
            y = model(x)
        print(scope.result.peak_bytes, scope.result.total_count)
    """
    from . import StatisticsResourceAdaptor, get_per_device_resource, set_per_device_resource

    d = _device(device)
    adaptor = _adaptor(d)
    previous = None
    if adaptor is None:
        previous = get_per_device_resource(d)
        adaptor = StatisticsResourceAdaptor(previous)
        set_per_device_resource(d, adaptor)
    scope = StatisticsScope(adaptor)
    adaptor.push_counters()
    try:
        yield scope
    finally:
        nbytes, count = adaptor.pop_counters()
        scope.result = Statistics._of(nbytes, count)
        if previous is not None:
            set_per_device_resource(d, previous)


# -- the profiler --------------------------------------------------------------------------------


@dataclass
class ProfilerRecord:
    """What the profiler saw of one function or block: how often it ran, and the memory it
    allocated (``peak_bytes``: the most any one run held at once above what was live before it;
    ``total_bytes`` / ``total_count``: summed over every run)."""

    name: str
    calls: int = 0
    peak_bytes: int = 0
    total_bytes: int = 0
    total_count: int = 0

    def add(self, s: Statistics) -> None:
        self.calls += 1
        self.peak_bytes = max(self.peak_bytes, s.peak_bytes)
        self.total_bytes += s.total_bytes
        self.total_count += s.total_count


@dataclass
class ProfilerRecords:
    """Records of profiled functions and blocks, by name. Thread-safe to add to."""

    records: dict[str, ProfilerRecord] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, name: str, stats: Statistics) -> None:
        with self._lock:
            self.records.setdefault(name, ProfilerRecord(name)).add(stats)

    def clear(self) -> None:
        with self._lock:
            self.records.clear()

    def report(self, ordered_by: str = "peak_bytes") -> str:
        """A table of the records, largest ``ordered_by`` (a ProfilerRecord field) first."""
        if ordered_by not in ProfilerRecord.__dataclass_fields__ or ordered_by == "name":
            fields = ", ".join(f for f in ProfilerRecord.__dataclass_fields__ if f != "name")
            raise ValueError(f"cannot order by {ordered_by!r}; order by one of {fields}")
        from . import size_to_string

        with self._lock:
            rows = sorted(self.records.values(), key=lambda r: getattr(r, ordered_by),
                          reverse=True)
        w = max([len(r.name) for r in rows] + [4])
        lines = ["gpumem memory profile (per function or block)",
                 f"{'name':<{w}} {'calls':>7} {'peak':>12} {'allocated':>12} {'allocations':>12}"]
        for r in rows:
            lines.append(f"{r.name:<{w}} {r.calls:>7} {size_to_string(r.peak_bytes):>12} "
                         f"{size_to_string(r.total_bytes):>12} {r.total_count:>12}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.report()


default_profiler_records = ProfilerRecords()
"""Where ``gpumem.profiler`` records unless given other ``records``."""


class _Profiler:
    def __init__(self, name: str | None, records: ProfilerRecords | None, device: int | None):
        self.name = name
        self.records = records if records is not None else default_profiler_records
        self.device = device
        self._open: list = []

    def __call__(self, func: Callable) -> Callable:
        name = self.name or f"{func.__module__}.{func.__qualname__}"

        @functools.wraps(func)
        def recorded(*args, **kwargs):
            scope = None
            try:
                with statistics(self.device) as scope:
                    return func(*args, **kwargs)
            finally:
                if scope is not None and scope.result is not None:
                    self.records.add(name, scope.result)

        return recorded

    def __enter__(self):
        if self.name is None:
            caller = sys._getframe(1)
            self.name = f"{caller.f_code.co_filename}:{caller.f_lineno}"
        cm = statistics(self.device)
        scope = cm.__enter__()
        self._open.append((cm, scope))
        return scope

    def __exit__(self, *exc):
        cm, scope = self._open.pop()
        cm.__exit__(None, None, None)
        self.records.add(self.name, scope.result)
        return False


def profiler(func: Callable | None = None, *, name: str | None = None,
             records: ProfilerRecords | None = None, device: int | None = None):
    """Records the memory each call of a function (or each run of a block) allocates, by name,
    in ``records`` (default ``gpumem.default_profiler_records``):

        @gpumem.profiler                       # named module.function
        def forward(x): ...

        @gpumem.profiler(name="loss")
        def loss(y): ...

        with gpumem.profiler(name="optimizer step"):
            opt.step()

        print(gpumem.default_profiler_records.report())

    Statistics are switched on around each run when the resource keeps none.
    """
    if func is not None:
        if not callable(func):
            raise TypeError(f"gpumem.profiler decorates a function, got {func!r}; give a name "
                            "as name='...'")
        return _Profiler(name, records, device)(func)
    return _Profiler(name, records, device)
