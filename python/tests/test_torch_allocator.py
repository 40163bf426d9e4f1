"""gpumem.torch without a GPU: the allocator library over the host stand-in (several devices,
lazily built resources, statistics, empty_cache, out-of-memory, recording), the configuration
(GPUMEM_TORCH_ALLOC) and use() / `python -m gpumem.torch` against a fake `torch` module.

The library keeps one state per process: tests that call the library directly release the
devices they used; tests of use() run in a subprocess."""

import csv
import ctypes
import json
import os
import subprocess
import sys
import textwrap
import threading

import pytest

import gpumem
import gpumem.torch as gt

lib = gt._library()
DEVICES = 4


@pytest.fixture
def host4():
    """A backed host runtime with four devices, shared by every device's resource."""
    return gpumem.HostRuntime(capacity_bytes=256 << 20, device_count=DEVICES)


@pytest.fixture
def configured(host4):
    """Configures `spec` for every device over host4; releases every device afterwards."""
    def configure(spec, device=-1):
        assert lib.gpumem_torch_configure(device, spec.encode(), host4._handle, 0) == 0
    yield configure
    lib.gpumem_torch_configure(-1, None, None, 0)
    for d in range(DEVICES):
        assert lib.gpumem_torch_release(d) == 0, f"device {d} still holds blocks"
        lib.gpumem_torch_configure(d, None, None, 0)


def malloc(size, device, stream=None):
    p = lib.gpumem_torch_try_malloc(size, device, stream)
    assert p, gt._last_error()
    return p


def free(p, size, device, stream=None):
    lib.gpumem_torch_free(p, size, device, stream)


def created(device):
    return bool(gt._raw_stats(device)[16])


# -- configuration ---------------------------------------------------------------------------

@pytest.mark.parametrize("text, devices", [
    ("pool", {None}),
    ("  pool:initial=1MiB>cuda  ", {None}),
    ("0=pool;1=vmm_pool", {0, 1}),
    ("vmm_pool; 0 = pool ;", {None, 0}),
    ("statistics>arena", {None}),
])
def test_config_parses_specs_for_every_device_and_per_device(text, devices):
    config = gt.parse_config(text)
    assert set(config) == devices
    for spec in config.values():
        assert spec == gpumem.canonical_spec(spec)


@pytest.mark.parametrize("text, says", [
    ("", "empty"),
    ("   ", "empty"),
    ("bogus", "unknown resource 'bogus'"),
    ("pool:nope=1", "has no parameter 'nope'"),
    ("pool:initial=lots", "initial"),
    ("0=pool;0=arena", "device 0 is given twice"),
    ("pool;arena", "every device is given twice"),
    ("pool;;arena", "empty entry"),
    ("0=", "empty spec"),
    ("pool>>cuda", ""),
])
def test_bad_config_raises_a_typed_error_naming_the_value(text, says):
    with pytest.raises(gt.AllocatorConfigError) as info:
        gt.parse_config(text)
    e = info.value
    assert isinstance(e, ValueError) and isinstance(e, gpumem.SpecError)
    assert e.value == text and e.source == gt.ENV_VAR
    assert f"GPUMEM_TORCH_ALLOC={text!r}" in str(e)
    assert says in str(e)


def test_checking_a_logging_spec_creates_no_file(tmp_path):
    log = tmp_path / "log.csv"
    assert gt.parse_config(f"logging:file={log}>pool") == {None: f"logging:file={log}>pool"}
    assert not log.exists()


def test_config_from_env(monkeypatch):
    monkeypatch.delenv(gt.ENV_VAR, raising=False)
    assert gt.config_from_env() is None
    monkeypatch.setenv(gt.ENV_VAR, "1=arena")
    assert list(gt.config_from_env()) == [1]
    monkeypatch.setenv(gt.ENV_VAR, "arena:nope=2")
    with pytest.raises(gt.AllocatorConfigError, match="arena:nope=2"):
        gt.config_from_env()


# -- the library over the host stand-in -------------------------------------------------------

def test_each_device_gets_its_own_resource_on_its_first_allocation(configured, host4):
    configured("statistics>pool:initial=1MiB")
    assert not any(created(d) for d in range(DEVICES))
    a = malloc(4096, 2)
    assert created(2) and not created(0) and not created(1) and not created(3)
    b = malloc(4096, 1)
    assert created(1) and not created(0)
    assert lib.gpumem_torch_get_resource(1) != lib.gpumem_torch_get_resource(2)
    assert host4.current_device() == 0  # the build switched devices and switched back
    ctypes.memset(a, 1, 4096)
    ctypes.memset(b, 2, 4096)
    free(a, 4096, 2)
    free(b, 4096, 1)


def test_per_device_specs_and_unconfigured_devices(configured):
    configured("pool:initial=1MiB", 0)
    configured("arena:size=4MiB", 1)
    p = malloc(1000, 0)
    q = malloc(1000, 1)
    assert not lib.gpumem_torch_try_malloc(1000, 3, None)
    assert "no gpumem resource is configured for CUDA device 3" in gt._last_error()
    free(p, 1000, 0)
    free(q, 1000, 1)


def test_a_spec_that_cannot_be_built_raises_naming_the_device(configured):
    configured("pool:initial=1TiB")
    assert not lib.gpumem_torch_try_malloc(1000, 1, None)
    assert "cannot build the resource for CUDA device 1" in gt._last_error()
    assert not created(1)


def test_concurrent_first_allocations_build_one_resource(configured):
    configured("pool:initial=1MiB")
    barrier = threading.Barrier(8)
    ptrs, errors = [], []

    def worker():
        barrier.wait()
        for _ in range(50):
            p = lib.gpumem_torch_try_malloc(256, 3, None)
            if not p:
                errors.append(gt._last_error())
                return
            ptrs.append(p)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(set(ptrs)) == 400
    s = gt.memory_stats(3)
    assert s["num_device_alloc"] == 1  # one pool, one initial allocation
    assert s["allocation.all.current"] == 400
    for p in ptrs:
        free(p, 256, 3)


def test_memory_stats_has_pytorchs_keys_and_counts_a_sequence(configured):
    configured("pool:initial=1MiB")
    assert set(gt.memory_stats(1).values()) == {0}
    a = malloc(1000, 1)
    b = malloc(3000, 1)
    free(a, 1000, 1)
    c = malloc(500, 1)
    s = gt.memory_stats(1)
    for prefix in ("allocated_bytes", "reserved_bytes", "active_bytes", "requested_bytes",
                   "allocation", "active"):
        for kind in ("current", "peak", "allocated", "freed"):
            assert f"{prefix}.all.{kind}" in s
    for key in ("num_alloc_retries", "num_ooms", "num_device_alloc", "num_device_free"):
        assert key in s
    assert (s["allocated_bytes.all.current"], s["allocated_bytes.all.peak"],
            s["allocated_bytes.all.allocated"], s["allocated_bytes.all.freed"]) == (
                3500, 4000, 4500, 1000)
    assert (s["allocation.all.current"], s["allocation.all.peak"],
            s["allocation.all.allocated"], s["allocation.all.freed"]) == (2, 2, 3, 1)
    assert s["active_bytes.all.current"] == 3500
    assert s["reserved_bytes.all.current"] == 1 << 20  # the pool's initial size
    assert s["reserved_bytes.all.peak"] == 1 << 20
    assert s["num_device_alloc"] == 1 and s["num_device_free"] == 0
    assert s["num_ooms"] == 0 and s["num_alloc_retries"] == 0
    assert gt.memory_allocated(1) == 3500 and gt.max_memory_allocated("cuda:1") == 4000
    assert gt.memory_reserved(1) == gt.max_memory_reserved(1) == 1 << 20
    assert gt.memory_stats(0)["allocated_bytes.all.current"] == 0  # other devices apart

    gt.reset_peak_memory_stats(1)
    assert gt.max_memory_allocated(1) == 3500
    gt.reset_accumulated_memory_stats(1)
    s = gt.memory_stats(1)
    assert s["allocated_bytes.all.allocated"] == 0 and s["allocation.all.freed"] == 0
    assert s["allocated_bytes.all.current"] == 3500

    summary = gt.memory_summary(1)
    assert "Allocated memory" in summary and "3.42 KiB" in summary and "1.00 MiB" in summary
    free(b, 3000, 1)
    free(c, 500, 1)
    assert gt.memory_allocated(1) == 0


def test_reserved_follows_a_pool_that_grows_and_gives_back(configured):
    configured("vmm_pool")
    p = malloc(8 << 20, 2)
    s = gt.memory_stats(2)
    assert s["reserved_bytes.all.current"] >= 8 << 20
    free(p, 8 << 20, 2)
    assert gt.memory_reserved(2) >= 8 << 20  # kept for reuse
    gt.empty_cache()
    s = gt.memory_stats(2)
    assert s["reserved_bytes.all.current"] == 0
    assert s["reserved_bytes.all.peak"] >= 8 << 20
    assert s["num_device_free"] >= 1
    assert s["reserved_bytes.all.freed"] == s["reserved_bytes.all.allocated"]


def test_out_of_memory_retries_then_counts_and_explains(configured):
    configured("limiting:limit=2MiB>pool:initial=1MiB")
    p = malloc(1 << 20, 0)
    assert not lib.gpumem_torch_try_malloc(4 << 20, 0, None)
    message = gt._last_error()
    assert "CUDA out of memory on device 0" in message
    assert f"tried to allocate {gpumem.size_to_string(4 << 20)}" in message
    assert "PyTorch tensors hold" in message and "gpumem holds" in message
    s = gt.memory_stats(0)
    assert s["num_ooms"] == 1 and s["num_alloc_retries"] == 1
    assert s["allocated_bytes.all.current"] == 1 << 20  # the failure changed nothing
    q = malloc(4096, 0)  # still usable
    free(q, 4096, 0)
    free(p, 1 << 20, 0)


def test_a_resource_object_reports_allocated_as_reserved(host4):
    stats = gpumem.StatisticsResourceAdaptor(gpumem.CudaMemoryResource(host4))
    assert lib.gpumem_torch_set_resource(3, stats._handle) == 0
    try:
        p = malloc(4096, 3)
        assert stats.get_bytes_counter().value == 4096
        s = gt.memory_stats(3)
        assert s["allocated_bytes.all.current"] == s["reserved_bytes.all.current"] == 4096
        free(p, 4096, 3)
    finally:
        lib.gpumem_torch_set_resource(3, None)
        assert lib.gpumem_torch_release(3) == 0


# -- recording ----------------------------------------------------------------------------------

def test_record_writes_a_trace_that_gpumem_replay_replays(configured, tmp_path):
    configured("pool:initial=1MiB")
    path = tmp_path / "torch.csv"
    before = malloc(100, 0)  # not recorded
    with gt.record(path):
        a = malloc(4096, 0, 7)
        b = malloc(1 << 16, 1)
        free(a, 4096, 0, 7)
        c = malloc(512, 0)
        free(b, 1 << 16, 1)
        free(c, 512, 0)
    free(before, 100, 0)
    rows = list(csv.reader(path.open()))
    assert rows[0] == ["Thread", "Time", "Action", "Pointer", "Size", "Stream"]
    assert [(r[2], r[4]) for r in rows[1:]] == [
        ("allocate", "4096"), ("allocate", "65536"), ("free", "4096"), ("allocate", "512"),
        ("free", "65536"), ("free", "512")]
    assert rows[1][5] == "7" and rows[2][5] == "0"
    assert rows[1][3] == hex(a)
    with pytest.raises(RuntimeError, match="no recording is running|cannot open"):
        with gt.record(tmp_path / "missing" / "x.csv"):
            pass
    try:
        gpumem._cli.tool_path()
    except FileNotFoundError:
        pytest.skip("the gpumem tool is not in this build; the trace was checked by hand")
    out = gpumem.replay(path, "pool:initial=1MiB", simulate=True)
    (trace,) = out["traces"]
    (result,) = trace["results"]
    assert result["peak_held_bytes"] == 1 << 20


def test_record_with_frames_writes_each_allocations_python_stack(configured, tmp_path):
    """record(frames=True): the Frames column; each allocate row's innermost frame is the line
    that called the allocator (gpumem's own frames left out), frees have none; a thread's stack
    starts at its own function; the trace replays and the report has the frames."""
    configured("pool:initial=1MiB")
    path = tmp_path / "frames.csv"
    here = sys._getframe().f_code
    got = {}

    def in_a_thread():
        got["line"] = sys._getframe().f_lineno + 1
        got["p"] = lib.gpumem_torch_try_malloc(256, 0, None)

    with gt.record(path, frames=True):
        line_a = sys._getframe().f_lineno + 1
        a = lib.gpumem_torch_try_malloc(4096, 0, None)
        t = threading.Thread(target=in_a_thread)
        t.start()
        t.join()
        free(a, 4096, 0)
        free(got["p"], 256, 0)
    assert a and got["p"]
    rows = list(csv.reader(path.open()))
    assert rows[0] == ["Thread", "Time", "Action", "Pointer", "Size", "Stream", "Frames"]
    allocs = [r for r in rows[1:] if r[2] == "allocate"]
    assert [r[4] for r in allocs] == ["4096", "256"]
    stack_a = allocs[0][6].split("|")
    assert stack_a[0] == f"{here.co_name} ({here.co_filename}:{line_a})", stack_a
    assert len(stack_a) <= gt.MAX_FRAMES
    assert not any(os.path.join("gpumem", "torch.py") in f for f in stack_a), stack_a
    stack_t = allocs[1][6].split("|")
    assert stack_t[0] == f"in_a_thread ({here.co_filename}:{got['line']})", stack_t
    assert allocs[1][0] != allocs[0][0]  # another thread
    assert [r[6] for r in rows[1:] if r[2] == "free"] == ["", ""]
    # without frames, as before: six columns
    with gt.record(path):
        free(malloc(64, 0), 64, 0)
    assert next(csv.reader(path.open())) == ["Thread", "Time", "Action", "Pointer", "Size",
                                             "Stream"]


def test_record_frames_text_is_the_converters(tmp_path):
    """A frame reads `name (filename:line)`, innermost first, a '|' in it written '/', at most
    MAX_FRAMES; a stack longer than the callback's buffer keeps whole frames."""
    def deep(n):
        return deep(n - 1) if n else sys._getframe()
    frame = deep(40)
    text = gt._stack_text(frame)
    frames = text.split("|")
    assert len(frames) == gt.MAX_FRAMES
    assert frames[0] == f"deep ({frame.f_code.co_filename}:{frame.f_lineno})"
    buf = ctypes.create_string_buffer(100)

    def via_callback():
        return gt._write_frames(ctypes.addressof(buf), 100)
    n = via_callback()
    assert 0 < n <= 100 and buf.raw[:n].decode().startswith("via_callback (")
    assert not buf.raw[:n].decode().endswith("|")
    assert gt._stack_text(None) == ""


def test_record_with_frames_replays_with_the_frames_in_the_report(configured, tmp_path):
    configured("pool:initial=1MiB")
    path = tmp_path / "frames.csv"
    with gt.record(path, frames=True):
        blocks = [malloc(1024, 0) for _ in range(3)]
        for p in blocks:
            free(p, 1024, 0)
    try:
        tool = gpumem._cli.tool_path()
    except FileNotFoundError:
        pytest.skip("the gpumem tool is not in this build")
    report = tmp_path / "report"
    proc = subprocess.run([str(tool), "replay", str(path), "-r", "pool", "--simulate",
                           "--report", str(report)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    (trace,) = json.load((report / "results.json").open())["traces"]
    assert trace["frames"][0].startswith("malloc (") and "test_torch_allocator.py:" in \
        trace["frames"][0], trace["frames"]
    assert any(f.startswith("<listcomp> (") or f.startswith(
        "test_record_with_frames_replays_with_the_frames_in_the_report (")
        for f in trace["frames"]), trace["frames"]
    assert [a[3] for a in trace["allocations"]] == [0, 0, 0], trace["allocations"]
    assert trace["stacks"][0][0] == 0


# -- use() and the command line, against a fake torch -------------------------------------------

FAKE_TORCH = '''
"""A stand-in for the parts of torch that gpumem.torch touches (tests without PyTorch)."""
import types

calls = []
_initialized = False


class _Allocator:
    def set_reset_fn(self, ptr):
        calls.append(("set_reset_fn", ptr))


class CUDAPluggableAllocator:
    def __init__(self, path, alloc, free):
        calls.append(("CUDAPluggableAllocator", path, alloc, free))
        self._allocator = _Allocator()

    def allocator(self):
        return self._allocator


def change_current_allocator(allocator):
    calls.append(("change_current_allocator",))


def _raises(*args, **kwargs):
    raise RuntimeError("CUDAPluggableAllocator does not yet support getDeviceStats")


memory = types.ModuleType("torch.cuda.memory")
memory.CUDAPluggableAllocator = CUDAPluggableAllocator
memory.change_current_allocator = change_current_allocator
memory.memory_stats = _raises
memory.max_memory_allocated = _raises
cuda = types.ModuleType("torch.cuda")
cuda.memory = memory
cuda.is_initialized = lambda: _initialized
cuda.current_device = lambda: 0
cuda.memory_stats = _raises
cuda.max_memory_allocated = _raises
cuda.reset_peak_memory_stats = _raises


class OutOfMemoryError(RuntimeError):
    pass
'''


@pytest.fixture
def fake_torch(tmp_path):
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text(FAKE_TORCH)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(tmp_path), os.path.dirname(os.path.dirname(gpumem.__file__)),
         env.get("PYTHONPATH", "")])
    env.pop(gt.ENV_VAR, None)
    return env


def run(code, env, *args):
    return subprocess.run([sys.executable, *args] if not code else
                          [sys.executable, "-c", textwrap.dedent(code), *args],
                          capture_output=True, text=True, env=env, timeout=120)


def test_use_reads_the_environment_and_installs_every_device(fake_torch):
    fake_torch[gt.ENV_VAR] = "statistics>pool:initial=1MiB;1=arena:size=4MiB"
    out = run("""
        import ctypes, torch, gpumem, gpumem.torch as gt
        host = gpumem.HostRuntime(capacity_bytes=64 << 20, device_count=3)
        print(sorted(gt.use(runtime=host).items(), key=str))
        names = [c[0] for c in torch.calls]
        assert names == ["CUDAPluggableAllocator", "set_reset_fn", "change_current_allocator"]
        assert torch.calls[0][1:] == (gt.library_path(), "gpumem_torch_malloc",
                                      "gpumem_torch_free")
        lib = gt._library()
        assert torch.calls[1][1] == ctypes.cast(lib.gpumem_torch_empty_cache, ctypes.c_void_p).value
        p = lib.gpumem_torch_try_malloc(4096, 2, None)
        q = lib.gpumem_torch_try_malloc(4096, 1, None)
        assert p and q, gt._last_error()
        # PyTorch's own statistics functions now answer with gpumem's
        assert torch.cuda.memory_stats(2)["allocated_bytes.all.current"] == 4096
        assert torch.cuda.memory.max_memory_allocated(1) == 4096
        torch.cuda.reset_peak_memory_stats(2)
        print("created", [bool(gt._raw_stats(d)[16]) for d in range(3)])
        try:
            gt.use("pool")
        except RuntimeError as e:
            print("again:", e)
    """, fake_torch)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "[(1, 'arena:size=4MiB'), (None, 'statistics>pool:initial=1MiB')]"
    assert lines[1] == "created [False, True, True]"
    assert lines[2].startswith("again: gpumem.torch.use() was already called")


def test_record_with_frames_leaves_torchs_own_frames_out(fake_torch, tmp_path):
    """Frames in torch's package (here the fake torch's) are left out: the innermost frame is
    the program's line that called into torch."""
    fake = fake_torch["PYTHONPATH"].split(os.pathsep)[0]
    with open(os.path.join(fake, "torch", "ops.py"), "w") as f:
        f.write(textwrap.dedent("""
            import gpumem.torch as gt
            def _empty(n):
                return gt._library().gpumem_torch_try_malloc(n, 0, None)
            def empty(n):
                return _empty(n)
        """))
    trace = tmp_path / "t.csv"
    out = run(f"""
        import sys, torch, torch.ops, gpumem, gpumem.torch as gt
        host = gpumem.HostRuntime(capacity_bytes=64 << 20)
        gt.use("pool:initial=1MiB", runtime=host)
        def step():
            return torch.ops.empty(4096)
        with gt.record({str(trace)!r}, frames=True):
            p = step(); line = sys._getframe().f_lineno
            assert p, gt._last_error()
        print(line)
    """, fake_torch)
    assert out.returncode == 0, out.stderr
    line = int(out.stdout.split()[-1])
    rows = list(csv.reader(trace.open()))
    (alloc,) = [r for r in rows[1:] if r[2] == "allocate"]
    frames = alloc[6].split("|")
    assert frames[0].startswith("step (<string>:"), frames
    assert frames[1] == f"<module> (<string>:{line})", frames
    assert len(frames) == 2, frames


def test_use_with_a_bad_environment_value_says_which(fake_torch):
    fake_torch[gt.ENV_VAR] = "pool:initial=lots"
    out = run("""
        import gpumem.torch as gt
        try:
            gt.use()
        except gt.AllocatorConfigError as e:
            print(type(e).__name__, e.value, e.source)
            print(e)
    """, fake_torch)
    assert out.returncode == 0, out.stderr
    first, second = out.stdout.splitlines()[:2]
    assert first == "AllocatorConfigError pool:initial=lots GPUMEM_TORCH_ALLOC"
    assert second.startswith("GPUMEM_TORCH_ALLOC='pool:initial=lots': ")


def test_use_limited_to_devices(fake_torch):
    out = run("""
        import gpumem, gpumem.torch as gt
        host = gpumem.HostRuntime(capacity_bytes=64 << 20, device_count=3)
        print(gt.use({0: "pool", None: "arena"}, devices=[0, 2], runtime=host))
        lib = gt._library()
        assert lib.gpumem_torch_try_malloc(64, 2, None)
        assert not lib.gpumem_torch_try_malloc(64, 1, None)
        print(gt._last_error())
    """, fake_torch)
    assert out.returncode == 0, out.stderr
    config, error = out.stdout.splitlines()[:2]
    assert config.startswith("{0: 'pool") and "2: 'arena" in config
    assert "no gpumem resource is configured for CUDA device 1" in error


def test_use_after_cuda_initialized_is_refused(fake_torch):
    out = run("""
        import torch, gpumem.torch as gt
        torch._initialized = True
        try:
            gt.use("pool")
        except RuntimeError as e:
            print(e)
    """, fake_torch)
    assert "must be called before PyTorch's first CUDA allocation" in out.stdout, out.stderr


def test_the_runner_switches_an_unchanged_script(fake_torch, tmp_path):
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent("""
        import sys, torch, gpumem.torch as gt
        print("argv", sys.argv[1:])
        print("installed", gt.installed())
        print("allocator", [c[0] for c in torch.calls][-1])
        print("main", __name__)
    """))
    fake_torch[gt.ENV_VAR] = "arena"
    out = run(None, fake_torch, "-m", "gpumem.torch", str(script), "--lr", "3")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        "argv ['--lr', '3']", "installed {None: 'arena'}",
        "allocator change_current_allocator", "main __main__"]
    out = run(None, fake_torch, "-m", "gpumem.torch", "--alloc", "0=pool", str(script))
    assert "installed {0: 'pool'}" in out.stdout, out.stderr
    fake_torch[gt.ENV_VAR] = "nonsense"
    out = run(None, fake_torch, "-m", "gpumem.torch", str(script))
    assert out.returncode == 2
    assert "GPUMEM_TORCH_ALLOC='nonsense': unknown resource 'nonsense'" in out.stderr


def test_main_without_torch_says_so_in_one_line_and_still_checks_the_spec(tmp_path):
    """Without PyTorch, `python -m gpumem.torch` printed a traceback and never said a spec was
    bad: now one line and a non-zero exit, and the spec is checked first."""
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text("raise ImportError(\"No module named 'torch'\")\n")
    (tmp_path / "script.py").write_text("print('ran')\n")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(tmp_path), os.path.dirname(os.path.dirname(gpumem.__file__)),
         env.get("PYTHONPATH", "")])
    env.pop(gt.ENV_VAR, None)
    out = run(None, env, "-m", "gpumem.torch", str(tmp_path / "script.py"))
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr
    assert len(out.stderr.splitlines()) == 1, out.stderr
    assert "PyTorch is not installed" in out.stderr and "ran" not in out.stdout
    env[gt.ENV_VAR] = "pool:initial=1GiB,initial=2GiB"
    out = run(None, env, "-m", "gpumem.torch", str(tmp_path / "script.py"))
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    assert "GPUMEM_TORCH_ALLOC='pool:initial=1GiB,initial=2GiB'" in out.stderr
    assert "given twice" in out.stderr
    out = run(None, env, "-m", "gpumem.torch", "--alloc", "poool", str(tmp_path / "script.py"))
    assert out.returncode == 2 and "unknown resource 'poool'" in out.stderr, out.stderr


def test_out_of_memory_becomes_torchs_error_in_every_build(fake_torch):
    out = run("""
        import torch, gpumem.torch as gt

        @gt.out_of_memory_errors()
        def step():
            raise RuntimeError("gpumem: CUDA out of memory on device 0 (tried to allocate 1GiB)")

        try:
            step()
        except torch.OutOfMemoryError as e:
            print("torch.OutOfMemoryError:", e)
        try:
            with gt.out_of_memory_errors():
                raise RuntimeError("something else")
        except torch.OutOfMemoryError:
            print("wrong")
        except RuntimeError as e:
            print("RuntimeError:", e)
    """, fake_torch)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        "torch.OutOfMemoryError: gpumem: CUDA out of memory on device 0 (tried to allocate 1GiB)",
        "RuntimeError: something else"]
