"""The PyTorch and CuPy hooks: what can be checked without a GPU (or without the framework)."""

import importlib.util
import subprocess
import sys

import pytest

import gpumem
import gpumem.cupy
import gpumem.torch

has_torch = importlib.util.find_spec("torch") is not None
has_cupy = importlib.util.find_spec("cupy") is not None


def test_torch_library_serves_a_gpumem_resource_through_its_c_functions(host):
    import ctypes

    lib = ctypes.CDLL(gpumem.torch.library_path())
    lib.gpumem_torch_malloc.argtypes = [ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p]
    lib.gpumem_torch_malloc.restype = ctypes.c_void_p
    lib.gpumem_torch_free.argtypes = [ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_int,
                                      ctypes.c_void_p]
    lib.gpumem_torch_set_resource.argtypes = [ctypes.c_int, ctypes.c_void_p]
    lib.gpumem_torch_get_resource.restype = ctypes.c_void_p
    stats = gpumem.StatisticsResourceAdaptor(gpumem.CudaMemoryResource(host))
    assert lib.gpumem_torch_set_resource(7, stats._handle) == 0
    try:
        assert lib.gpumem_torch_get_resource(7) == stats._handle
        p = lib.gpumem_torch_malloc(4096, 7, None)
        assert p and stats.get_bytes_counter().value == 4096
        lib.gpumem_torch_free(p, 4096, 7, None)
        assert stats.get_bytes_counter().value == 0
    finally:
        lib.gpumem_torch_set_resource(7, None)


@pytest.mark.skipif(not has_torch, reason="PyTorch is not installed")
def test_torch_use_after_cuda_init_is_refused_clearly():
    code = (
        "import torch, gpumem.torch\n"
        "torch.cuda.is_initialized = lambda: True\n"
        "try:\n"
        "    gpumem.torch.use('pool>cuda')\n"
        "except RuntimeError as e:\n"
        "    print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "must be called before PyTorch's first CUDA allocation" in out.stdout


@pytest.mark.skipif(has_torch, reason="checks the message when PyTorch is missing")
def test_torch_use_without_torch_raises_import_error():
    with pytest.raises(ImportError):
        gpumem.torch.use("pool>cuda")


@pytest.mark.skipif(has_cupy, reason="checks the message when CuPy is missing")
def test_cupy_use_without_cupy_raises_import_error():
    with pytest.raises(ImportError):
        gpumem.cupy.use("pool>cuda")
