"""The per-device registry from Python."""

import gc

import gpumem


def test_initial_resource_is_a_cuda_resource():
    assert isinstance(gpumem.get_per_device_resource(0), gpumem.CudaMemoryResource)


def test_set_current_device_resource_keeps_it_alive_and_returns_the_previous(host):
    initial = gpumem.get_current_device_resource()
    pool = gpumem.PoolMemoryResource(gpumem.CudaMemoryResource(host), 1 << 20)
    assert gpumem.set_current_device_resource(pool) == initial
    del pool
    gc.collect()
    current = gpumem.get_current_device_resource()
    assert isinstance(current, gpumem.PoolMemoryResource)
    buf = gpumem.DeviceBuffer(1000)  # from the current device's resource
    assert buf.resource is current and host.live_allocations == 1
    del buf
    assert gpumem.set_current_device_resource(None) is current
    assert gpumem.get_current_device_resource() == initial


def test_ref_view_is_separate_from_the_pointer_view(host):
    mr = gpumem.CudaMemoryResource(host)
    initial = gpumem.get_current_device_resource_ref()
    assert gpumem.set_current_device_resource_ref(mr) == initial
    assert gpumem.get_current_device_resource_ref() is mr
    assert gpumem.get_current_device_resource() == initial  # pointer view unchanged
    assert gpumem.reset_current_device_resource_ref() is mr
    assert gpumem.get_current_device_resource_ref() == initial


def test_per_device_resources_are_independent(host):
    mr = gpumem.CudaMemoryResource(host)
    gpumem.set_per_device_resource(3, mr)
    try:
        assert gpumem.get_per_device_resource(3) is mr
        assert gpumem.get_per_device_resource(0) is not mr
    finally:
        gpumem.set_per_device_resource(3, None)
