"""GPU checks of the PyTorch and CuPy hooks (H100 machine). Each check runs gpu_worker.py in its
own process, because allocators are process-wide. Skips cleanly without a GPU or a framework.

Set GPUMEM_GPU_REPORT=<file> to also write the PyTorch table (markdown) there.
"""

import importlib.util
import json
import os
import subprocess
import sys

import pytest

import gpumem

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "gpu_worker.py")

needs_gpu = pytest.mark.skipif(gpumem.get_num_devices() == 0,
                               reason="needs a CUDA GPU (none visible on this machine)")


def needs(module):
    return pytest.mark.skipif(importlib.util.find_spec(module) is None,
                              reason=f"needs the Python package '{module}'")


def run_worker(*args, timeout=900):
    proc = subprocess.run([sys.executable, "-X", "faulthandler", WORKER, *args], capture_output=True, text=True,
                          timeout=timeout)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, (
        f"worker {args} failed (rc {proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return json.loads(lines[-1][len("RESULT "):])


def mib(n):
    return "n/a" if n is None or n < 0 else f"{n / 2**20:.1f}"


@needs_gpu
@needs("torch")
@needs("transformers")
def test_gpt2_training_on_gpumem_matches_pytorch_allocator():
    runs = {a: run_worker("train", a) for a in ("torch", "gpumem_pool", "gpumem_async")}
    rows = ["| allocator | peak allocated MiB | peak reserved MiB | device used at end MiB | "
            "median step ms | first step ms | final loss |",
            "| --- | --- | --- | --- | --- | --- | --- |"]
    for name, r in runs.items():
        rows.append(f"| {name} | {mib(r['peak_allocated'])} | {mib(r['peak_reserved'])} | "
                    f"{mib(r['device_used_bytes'])} | {r['step_ms']:.2f} | "
                    f"{r['first_step_ms']:.1f} | {r['losses'][-1]:.6f} |")
    table = "\n".join(rows)
    print("\n" + table)
    if os.environ.get("GPUMEM_GPU_REPORT"):
        with open(os.environ["GPUMEM_GPU_REPORT"], "a") as f:
            f.write(table + "\n\n" + json.dumps(runs) + "\n")
    reference = runs["torch"]["losses"]
    assert len(reference) == 20 and reference[-1] < reference[0], "the model did not train"
    for name in ("gpumem_pool", "gpumem_async"):
        assert runs[name]["losses"] == reference, f"{name}: losses differ from PyTorch's allocator"
        assert runs[name]["allocations"] > 100, f"{name}: PyTorch did not allocate through gpumem"


@needs_gpu
@needs("cupy")
def test_cupy_on_gpumem_equals_cupy_pool():
    r = run_worker("cupy")
    assert r["equal"], r
    assert r["allocations"] > 0 and r["peak_bytes"] > 0, r
    assert r["on_current_stream"], "allocations were not made on CuPy's current stream"


@needs_gpu
@needs("torch")
def test_out_of_memory_under_a_limit_surfaces_in_pytorch_with_gpumem_message():
    r = run_worker("oom")
    assert r["message"] and "limiting_resource_adaptor" in r["message"], r
    assert r["torch_oom"], f"expected torch.OutOfMemoryError, got {r['error_type']}"
    assert r["num_ooms"] == 1, r
    assert r["usable_after"] == 2.0 * (1 << 20), "the allocator is unusable after the failure"


@needs_gpu
@needs("torch")
def test_use_after_pytorch_initialized_cuda_is_refused_clearly():
    r = run_worker("too_late")
    assert r["raised"] and "before PyTorch's first CUDA allocation" in r["message"], r
