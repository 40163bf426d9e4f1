"""CUDA graph pools of gpumem.torch without a GPU: the allocator library's graph-pool hooks
(PyTorch's begin / end allocate-to-pool and release-pool) over the host stand-in, and how use()
hands them to PyTorch (a fake torch module).

A capture is stood in for by gpumem_torch_test_begin_pool, which begins allocating to a pool with
a filter that matches one stream (PyTorch's filter matches the streams of its capture)."""

import ctypes
import os
import subprocess
import sys
import textwrap

import pytest

import gpumem
import gpumem.torch as gt

lib = gt._library()
DEVICE = 1


@pytest.fixture
def host():
    return gpumem.HostRuntime(capacity_bytes=256 << 20, device_count=2)


@pytest.fixture
def configured(host):
    """Device DEVICE served by a pool over the host stand-in; released afterwards (which also
    checks that no graph pool is left)."""
    assert lib.gpumem_torch_configure(DEVICE, b"pool:initial=4MiB", host._handle, 0) == 0
    yield host
    assert gt.graph_pools(DEVICE) == [], "a graph pool outlived its release"
    assert lib.gpumem_torch_release(DEVICE) == 0, "the device still holds blocks"
    lib.gpumem_torch_configure(DEVICE, None, None, 0)


def malloc(size, stream):
    p = lib.gpumem_torch_try_malloc(size, DEVICE, stream)
    assert p, gt._last_error()
    return p


def free(p, size, stream):
    lib.gpumem_torch_free(p, size, DEVICE, stream)


def begin(pool, stream):
    assert lib.gpumem_torch_test_begin_pool(DEVICE, pool[0], pool[1], stream) == 0, gt._last_error()


def end(pool):
    lib.gpumem_torch_end_allocate_to_pool(DEVICE, *_pool_arg(pool))


def release(pool):
    lib.gpumem_torch_release_pool(DEVICE, *_pool_arg(pool))


class _PoolId(ctypes.Structure):  # c10::cuda::MempoolId_t: a pair of unsigned long long
    _fields_ = [("first", ctypes.c_ulonglong), ("second", ctypes.c_ulonglong)]


def _pool_arg(pool):
    return (_PoolId(*pool),)


lib.gpumem_torch_end_allocate_to_pool.argtypes = [ctypes.c_int, _PoolId]
lib.gpumem_torch_end_allocate_to_pool.restype = None
lib.gpumem_torch_release_pool.argtypes = [ctypes.c_int, _PoolId]
lib.gpumem_torch_release_pool.restype = None


def pools():
    return {p["id"]: p for p in gt.graph_pools(DEVICE)}


def test_a_capture_allocates_from_its_own_pool_and_keeps_it_until_released(configured):
    host = configured
    s, other = host.create_stream(), host.create_stream()
    before = malloc(1 << 20, other)  # a main block, to compare with
    begin((1, 0), s)
    a = malloc(1 << 20, s)           # the capture's: from the graph pool
    b = malloc(1 << 20, other)       # not the capture's stream: the main pool
    p = pools()[(1, 0)]
    assert p["blocks"] == 1 and p["captures"] == 1 and p["reserved_bytes"] >= 1 << 20, p
    assert gt.memory_allocated(DEVICE) == 3 << 20  # graph blocks count as PyTorch's
    free(a, 1 << 20, s)              # freed during the capture: back to the graph pool ...
    assert pools()[(1, 0)]["blocks"] == 0
    a2 = malloc(1 << 20, s)          # ... where the same capture reuses it
    assert a2 == a
    end((1, 0))
    # After the capture the graph's memory is its own: the main pool never hands it out.
    mains = [malloc(1 << 20, other) for _ in range(4)] + [malloc(1 << 20, s) for _ in range(4)]
    assert a not in mains
    assert pools()[(1, 0)]["blocks"] == 1
    for m in mains:
        free(m, 1 << 20, other)
    free(a2, 1 << 20, s)             # the graph's tensor goes; its pool stays until the release
    assert (1, 0) in pools() and pools()[(1, 0)]["blocks"] == 0
    release((1, 0))
    assert pools() == {}
    free(before, 1 << 20, other)
    free(b, 1 << 20, other)
    assert gt.memory_allocated(DEVICE) == 0


def test_a_main_block_freed_during_a_capture_is_held_until_the_release(configured):
    host = configured
    s = host.create_stream()
    m = malloc(1 << 20, s)           # allocated before the capture (a static input, say)
    elsewhere = host.create_stream()
    e = malloc(1 << 20, elsewhere)   # and one allocated on another stream
    begin((2, 0), s)
    free(m, 1 << 20, s)              # the graph may use its address at every replay
    free(e, 1 << 20, elsewhere)      # PyTorch frees on the allocation stream: held all the same
    assert pools()[(2, 0)]["held"] == 2
    again = malloc(1 << 20, s)       # the capture's allocation: from the graph pool, not m
    assert again != m
    end((2, 0))
    after = [malloc(1 << 20, s) for _ in range(3)] + [malloc(1 << 20, elsewhere)]
    assert m not in after and e not in after  # not handed to the rest of the program either
    for x in after[:3]:
        free(x, 1 << 20, s)
    free(after[3], 1 << 20, elsewhere)
    free(again, 1 << 20, s)
    release((2, 0))                  # now it goes back to the main pool
    assert pools() == {}
    assert gt.memory_allocated(DEVICE) == 0


def test_a_block_still_held_after_the_release_keeps_the_pool_until_freed(configured):
    host = configured
    s = host.create_stream()
    begin((3, 0), s)
    out = malloc(4096, s)            # e.g. a graph's static output the program still holds
    end((3, 0))
    release((3, 0))
    p = pools()[(3, 0)]
    assert p["captures"] == 0 and p["blocks"] == 1
    assert lib.gpumem_torch_release(DEVICE) == -2  # the device's resources cannot go yet
    free(out, 4096, s)               # its last block: the pool goes
    assert pools() == {}


def test_graphs_sharing_a_pool_keep_it_until_both_are_released(configured):
    host = configured
    s1, s2 = host.create_stream(), host.create_stream()
    shared = (0, 7)                  # as torch.cuda.graph_pool_handle() gives
    begin(shared, s1)
    x = malloc(8192, s1)
    end(shared)
    begin(shared, s2)
    y = malloc(8192, s2)
    end(shared)
    assert pools()[shared]["captures"] == 2 and pools()[shared]["blocks"] == 2
    free(x, 8192, s1)
    free(y, 8192, s2)
    release(shared)
    assert pools()[shared]["captures"] == 1
    release(shared)
    assert pools() == {}


def test_hooks_that_do_not_match_anything_are_harmless(configured):
    end((9, 9))
    release((9, 9))
    lib.gpumem_torch_release_pool(63, _PoolId(1, 1))
    lib.gpumem_torch_end_allocate_to_pool(63, _PoolId(1, 1))
    assert pools() == {}
    with pytest.raises(ValueError, match="out of range"):
        gt.graph_pools(64)


# -- use() hands the hooks to PyTorch ------------------------------------------------------------

FAKE_TORCH = '''
import types
calls = []

class _Allocator:
    def set_reset_fn(self, ptr):
        calls.append(("set_reset_fn", ptr))
%s

class CUDAPluggableAllocator:
    def __init__(self, path, alloc, free):
        self._allocator = _Allocator()
    def allocator(self):
        return self._allocator

memory = types.ModuleType("torch.cuda.memory")
memory.CUDAPluggableAllocator = CUDAPluggableAllocator
memory.change_current_allocator = lambda allocator: None
cuda = types.ModuleType("torch.cuda")
cuda.memory = memory
cuda.is_initialized = lambda: False
cuda.current_device = lambda: 0
__version__ = "9.9-fake"
'''

HOOKS = '''
    def set_begin_allocate_to_pool(self, ptr):
        calls.append(("set_begin_allocate_to_pool", ptr))
    def set_end_allocate_to_pool_fn(self, ptr):
        calls.append(("set_end_allocate_to_pool_fn", ptr))
    def set_release_pool(self, ptr):
        calls.append(("set_release_pool", ptr))
'''


@pytest.mark.parametrize("with_hooks", [True, False])
def test_use_gives_pytorch_the_graph_pool_hooks_when_it_has_them(tmp_path, with_hooks):
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text(FAKE_TORCH % (HOOKS if with_hooks else ""))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(tmp_path), os.path.dirname(os.path.dirname(gpumem.__file__)),
         env.get("PYTHONPATH", "")])
    env.pop(gt.ENV_VAR, None)
    code = textwrap.dedent("""
        import ctypes, torch, gpumem, gpumem.torch as gt
        gt.use("pool:initial=1MiB", runtime=gpumem.HostRuntime(capacity_bytes=8 << 20),
               patch_torch=False)
        lib = gt._library()
        for name, ptr in torch.calls[1:]:
            symbol = dict(gt._GRAPH_HOOKS)[name]
            assert ptr == ctypes.cast(getattr(lib, symbol), ctypes.c_void_p).value, name
        print([c[0] for c in torch.calls[1:]])
        print(gt._set_graph_hooks(torch.cuda.memory.CUDAPluggableAllocator("", "", ""), lib,
                                  torch.__version__))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    given, missing = out.stdout.splitlines()
    if with_hooks:
        assert given == str([n for n, _ in gt._GRAPH_HOOKS])
        assert missing == "[]"
    else:
        assert given == "[]"
        assert missing == str([n for n, _ in gt._GRAPH_HOOKS])


# -- the hooks called as PyTorch calls them ------------------------------------------------------

# What PyTorch's CUDAPluggableAllocator does with the addresses use() gives it: wraps each in a
# std::function of the hook's type and calls it with a pool id (a std::pair) and, for begin, a
# std::function filter built in PyTorch's own code. Compiled apart from the allocator library
# (which links its own C++ runtime), as PyTorch is.
FAKE_PYTORCH_CPP = r"""
#include <functional>
#include <utility>
struct CUstream_st;
typedef CUstream_st* cudaStream_t;
using pool_id = std::pair<unsigned long long, unsigned long long>;
using begin_fn = void(int, pool_id, std::function<bool(cudaStream_t)>);
using pool_fn = void(int, pool_id);

extern "C" int fake_begin(unsigned long long fn, int device, unsigned long long a,
                          unsigned long long b, void* stream) {
  std::function<begin_fn> hook = reinterpret_cast<begin_fn*>(fn);
  auto* match = static_cast<cudaStream_t>(stream);
  try {
    hook(device, pool_id{a, b}, [match](cudaStream_t s) { return s == match; });
    return 0;
  } catch (...) {
    return -1;
  }
}

extern "C" void fake_call(unsigned long long fn, int device, unsigned long long a,
                          unsigned long long b) {
  std::function<pool_fn> hook = reinterpret_cast<pool_fn*>(fn);
  hook(device, pool_id{a, b});
}
"""


@pytest.fixture(scope="module")
def fake_pytorch(tmp_path_factory):
    import shutil

    compiler = shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")
    if compiler is None:
        pytest.skip("needs a C++ compiler to build the stand-in for PyTorch's hook calls")
    folder = tmp_path_factory.mktemp("fake_pytorch")
    (folder / "fake.cpp").write_text(FAKE_PYTORCH_CPP)
    out = folder / "fake.so"
    proc = subprocess.run([compiler, "-std=c++17", "-shared", "-fPIC", "-O1", "-o", str(out),
                           str(folder / "fake.cpp")], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    fake = ctypes.CDLL(str(out))
    fake.fake_begin.argtypes = [ctypes.c_ulonglong, ctypes.c_int, ctypes.c_ulonglong,
                                ctypes.c_ulonglong, ctypes.c_void_p]
    fake.fake_begin.restype = ctypes.c_int
    fake.fake_call.argtypes = [ctypes.c_ulonglong, ctypes.c_int, ctypes.c_ulonglong,
                               ctypes.c_ulonglong]
    fake.fake_call.restype = None
    return fake


def test_the_hooks_work_when_called_the_way_pytorch_calls_them(configured, fake_pytorch):
    host = configured
    address = {symbol: ctypes.cast(getattr(lib, symbol), ctypes.c_void_p).value
               for _, symbol in gt._GRAPH_HOOKS}
    s, other = host.create_stream(), host.create_stream()
    assert fake_pytorch.fake_begin(address["gpumem_torch_begin_allocate_to_pool"], DEVICE, 5, 0,
                                   s) == 0
    a = malloc(1 << 16, s)
    b = malloc(1 << 16, other)
    assert pools()[(5, 0)]["blocks"] == 1  # the filter PyTorch's code built picked stream s only
    fake_pytorch.fake_call(address["gpumem_torch_end_allocate_to_pool"], DEVICE, 5, 0)
    c = malloc(1 << 16, s)                 # after the end: the main pool
    assert pools()[(5, 0)]["blocks"] == 1
    for p, stream in ((a, s), (b, other), (c, s)):
        free(p, 1 << 16, stream)
    fake_pytorch.fake_call(address["gpumem_torch_release_pool"], DEVICE, 5, 0)
    assert pools() == {}


def test_a_graph_pool_reuses_blocks_on_their_own_stream_only_and_merges_them(configured):
    """No synchronization is possible during a capture: a block freed on one stream is reused by
    later allocations on that stream (ordered after the free), never by another stream's;
    neighbouring free blocks merge, so freed activations serve a larger block later."""
    host = configured
    s1, s2 = host.create_stream(), host.create_stream()
    pool = (0, 11)
    begin(pool, s1)
    begin(pool, s2)                 # two captures into one pool (as graphs sharing a pool do)
    parts = [malloc(256 << 10, s1) for _ in range(4)]
    assert parts == sorted(parts) and parts[1] - parts[0] == 256 << 10  # carved from one chunk
    for p in parts:
        free(p, 256 << 10, s1)
    other = malloc(256 << 10, s2)   # s2 may not use s1's free blocks
    assert other not in parts
    whole = malloc(1 << 20, s1)     # the four merged blocks, on s1
    assert whole == parts[0]
    reserved = pools()[pool]["reserved_bytes"]
    assert reserved == 4 << 20, reserved  # two 2 MiB chunks: one per stream
    free(other, 256 << 10, s2)
    free(whole, 1 << 20, s1)
    for _ in range(2):
        end(pool)
        release(pool)
    assert pools() == {}
