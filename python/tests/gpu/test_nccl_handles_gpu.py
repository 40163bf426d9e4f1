"""The physical handles of a vmm_pool made for NCCL, checked through the CUDA driver itself (ctypes
to libcuda, not gpumem): the POSIX file descriptor handle type, the GPUDirect RDMA flag exactly
where the device supports it, and mapping addresses and sizes on the recommended granularity.
Skips without a GPU."""

import ctypes

import pytest

import gpumem
from torch_gpu_support import NEEDS_GPU

pytestmark = [NEEDS_GPU]
MiB = 1 << 20
POSIX_FD = 0x1  # CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
RDMA_WITH_VMM = 110  # CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED


class Location(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class AllocFlags(ctypes.Structure):
    _fields_ = [("compressionType", ctypes.c_ubyte), ("gpuDirectRDMACapable", ctypes.c_ubyte),
                ("usage", ctypes.c_ushort), ("reserved", ctypes.c_ubyte * 4)]


class AllocationProp(ctypes.Structure):  # CUmemAllocationProp
    _fields_ = [("type", ctypes.c_int), ("requestedHandleTypes", ctypes.c_int),
                ("location", Location), ("win32HandleMetaData", ctypes.c_void_p),
                ("allocFlags", AllocFlags)]


@pytest.fixture(scope="module")
def cuda():
    lib = ctypes.CDLL("libcuda.so.1")
    lib.cuMemRetainAllocationHandle.argtypes = [ctypes.POINTER(ctypes.c_ulonglong),
                                                ctypes.c_void_p]
    lib.cuMemGetAllocationPropertiesFromHandle.argtypes = [ctypes.POINTER(AllocationProp),
                                                           ctypes.c_ulonglong]
    lib.cuMemRelease.argtypes = [ctypes.c_ulonglong]
    lib.cuMemGetAddressRange_v2.argtypes = [ctypes.POINTER(ctypes.c_ulonglong),
                                            ctypes.POINTER(ctypes.c_size_t), ctypes.c_ulonglong]
    lib.cuMemGetAllocationGranularity.argtypes = [ctypes.POINTER(ctypes.c_size_t),
                                                  ctypes.POINTER(AllocationProp), ctypes.c_int]
    return lib


def driver_view(cuda, ptr):
    """(base, bytes, properties) of the physical allocation mapped at ptr, from the driver."""
    handle = ctypes.c_ulonglong()
    assert cuda.cuMemRetainAllocationHandle(ctypes.byref(handle), ptr) == 0
    prop = AllocationProp()
    try:
        assert cuda.cuMemGetAllocationPropertiesFromHandle(ctypes.byref(prop), handle) == 0
    finally:
        assert cuda.cuMemRelease(handle) == 0
    base, size = ctypes.c_ulonglong(), ctypes.c_size_t()
    assert cuda.cuMemGetAddressRange_v2(ctypes.byref(base), ctypes.byref(size), ptr) == 0
    return base.value, size.value, prop


def rdma_supported(cuda, device):
    value, dev = ctypes.c_int(), ctypes.c_int()
    assert cuda.cuDeviceGet(ctypes.byref(dev), device) == 0
    assert cuda.cuDeviceGetAttribute(ctypes.byref(value), RDMA_WITH_VMM, dev) == 0
    return bool(value.value)


def recommended_granularity(cuda, device):
    prop = AllocationProp()
    prop.type, prop.location.type, prop.location.id = 1, 1, device  # pinned, on the device
    out = ctypes.c_size_t()
    assert cuda.cuMemGetAllocationGranularity(ctypes.byref(out), ctypes.byref(prop), 1) == 0
    return out.value


@pytest.mark.parametrize("nccl", [True, False])
def test_pool_handles_have_the_properties_asked_for(cuda, nccl):
    pool = gpumem.VmmPoolMemoryResource(device=0, reserve_bytes=1 << 30, shareable_handles=nccl,
                                        gpu_direct_rdma=nccl)
    granule = recommended_granularity(cuda, 0)
    rdma = nccl and rdma_supported(cuda, 0)
    blocks = [(pool.allocate(n), n) for n in (3 * MiB, 40 * MiB, 5 * MiB)]
    single = pool.allocate_single_handle(7 * MiB)
    seen = 0
    for p, n in blocks + [(single, 7 * MiB)]:
        at = p
        while at < p + n:
            base, size, prop = driver_view(cuda, at)
            want_fd = nccl or at == single  # single handles are always shareable
            assert bool(prop.requestedHandleTypes & POSIX_FD) == want_fd, hex(at)
            assert bool(prop.allocFlags.gpuDirectRDMACapable) == rdma, hex(at)
            assert base % granule == 0 and size % granule == 0, (base, size, granule)
            mine = gpumem.cuda_runtime().vmm_allocation_at(at)
            assert (mine["base"], mine["bytes"], mine["device"]) == (base, size, 0)
            assert (mine["shareable"], mine["gpu_direct_rdma"]) == (want_fd, rdma)
            at = base + size
            seen += 1
    assert seen >= 4
    for p, n in blocks:
        pool.deallocate(p, n)
    pool.deallocate(single, 7 * MiB)
    gpumem.cuda_runtime().synchronize()
