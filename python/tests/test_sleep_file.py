"""Sleep and wake to a file, and pausing after only the named streams, from Python over the host
stand-in: VmmPoolMemoryResource / VmmRegionMemoryResource ``pause(offload="file", streams=...)``,
gpumem.pause and gpumem.torch.pause (against the fake `torch` module of test_torch_allocator)."""

import os

import pytest

import gpumem
from conftest import fill, read
from test_torch_allocator import fake_torch, run  # noqa: F401  (fake_torch is a fixture)

MiB = 1 << 20


@pytest.fixture
def big_host():
    return gpumem.HostRuntime(capacity_bytes=256 * MiB)


def test_pool_offload_to_a_file_keeps_every_byte_and_leaves_no_file(big_host, tmp_path):
    pool = gpumem.VmmPoolMemoryResource(reserve_bytes=128 * MiB, runtime=big_host,
                                        offload_directory=str(tmp_path))
    p = pool.allocate(5 * MiB)
    fill(p, 5 * MiB, 0x3C)
    assert pool.pause(offload="file")
    assert pool.state == "paused_offloaded"
    stats = pool.stats()
    assert stats["mapped_bytes"] == 0
    assert stats["offload_file_bytes"] == stats["paused_bytes"] == 6 * MiB
    assert stats["staging_bytes"] <= 6 * MiB + 8192  # two slots, not a copy of the pool
    assert os.listdir(tmp_path) == []  # the file has no name
    assert pool.resume()
    assert read(p, 5 * MiB) == bytes([0x3C]) * (5 * MiB)
    assert pool.stats()["offload_file_bytes"] == 0
    pool.deallocate(p, 5 * MiB)
    pool.check_invariants()


def test_region_offload_to_a_missing_directory_raises_and_stays_active(big_host, tmp_path):
    missing = str(tmp_path / "no" / "such")
    res = gpumem.VmmRegionMemoryResource(reserve_bytes=64 * MiB, runtime=big_host,
                                         offload_directory=missing)
    with res.region("weights"):
        w = res.allocate(4 * MiB)
    fill(w, 4 * MiB, 0x77)
    with pytest.raises(gpumem.OffloadFileError, match="no/such") as info:
        res.pause("weights", offload="file")
    assert isinstance(info.value, OSError)
    assert res.state("weights") == "active"
    assert read(w, 4 * MiB) == bytes([0x77]) * (4 * MiB)
    assert res.pause("weights", offload=True) == 1  # another way still works
    assert res.resume("weights") == 1
    res.deallocate(w, 4 * MiB)
    res.check_invariants()


def test_an_unknown_offload_value_is_refused(big_host):
    pool = gpumem.VmmPoolMemoryResource(reserve_bytes=64 * MiB, runtime=big_host)
    with pytest.raises(gpumem.LogicError, match="'disk'"):
        pool.pause(offload="disk")
    assert pool.state == "active"


class _TorchLikeStream:
    """What a torch.cuda.Stream offers gpumem: its cudaStream_t as ``cuda_stream``."""

    def __init__(self, handle):
        self.cuda_stream = handle


def test_pause_waits_for_the_named_streams_only(big_host, tmp_path):
    res = gpumem.VmmRegionMemoryResource(reserve_bytes=64 * MiB, runtime=big_host,
                                         offload_directory=str(tmp_path))
    mine, other = big_host.create_stream(), big_host.create_stream()
    with res.region("weights"):
        w = res.allocate(4 * MiB, mine)
    fill(w, 4 * MiB, 0x42)
    big_host.enqueue(mine, 2)
    big_host.enqueue(other, 3)
    assert gpumem.pause("weights", offload="file", resource=res,
                        streams=[_TorchLikeStream(mine), mine]) == 1
    assert big_host.completed(mine) == 2
    assert big_host.completed(other) == 0  # not waited for
    assert res.stats("weights")["offload_file_bytes"] == 4 * MiB
    assert gpumem.resume("weights", resource=res) == 1
    assert read(w, 4 * MiB) == bytes([0x42]) * (4 * MiB)
    assert res.pause("weights") == 1  # the default waits for the whole device
    assert big_host.completed(other) == 3
    assert res.resume() == 1
    res.deallocate(w, 4 * MiB, mine)


def test_torch_pause_offloads_to_a_file_after_the_named_streams(fake_torch, tmp_path):
    out = run(f"""
import ctypes, gpumem, gpumem.torch as gt
host = gpumem.HostRuntime(capacity_bytes=256 << 20)
lib = gt._library()
MiB = 1 << 20
res = gt.use_regions(runtime=host, reserve_bytes=64 * MiB, offload_directory={str(tmp_path)!r})
class Stream:
    def __init__(self, handle):
        self.cuda_stream = handle
s, busy = host.create_stream(), host.create_stream()
with gt.region("weights"):
    w = lib.gpumem_torch_try_malloc(4 * MiB, 0, None)
ctypes.memset(w, 0x5A, 4 * MiB)
host.enqueue(busy)
print(gt.pause("weights", offload="file", streams=[Stream(s)]), res.state("weights"),
      res.stats("weights")["offload_file_bytes"] // MiB, host.completed(busy))
print(gt.resume("weights"), ctypes.string_at(w, 4 * MiB) == b"\\x5a" * (4 * MiB))
lib.gpumem_torch_free(w, 4 * MiB, 0, None)
""", fake_torch)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.split() == ["1", "paused_offloaded", "4", "0", "1", "True"]
