"""Shared fixtures: resources over the host stand-in runtime, so every test runs without a GPU."""

import ctypes

import pytest

import gpumem


@pytest.fixture
def host():
    """A backed host runtime of 64 MiB: real host memory that tests may read and write."""
    return gpumem.HostRuntime(capacity_bytes=64 << 20)


@pytest.fixture
def leaf(host):
    return gpumem.CudaMemoryResource(host)


def fill(ptr: int, nbytes: int, value: int) -> None:
    ctypes.memset(ptr, value, nbytes)


def read(ptr: int, nbytes: int) -> bytes:
    return ctypes.string_at(ptr, nbytes)


requires_gpu = pytest.mark.skipif(
    gpumem.get_num_devices() == 0, reason="needs a CUDA GPU (none visible on this machine)"
)
