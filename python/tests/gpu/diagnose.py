"""Bisects a crash of the gpumem extension on a machine: runs each step in its own process and
prints which ones die (signal) or fail. Used after the H100 run saw segfaults in
TrackingResourceAdaptor.get_outstanding_allocations_str() and in the OOM check (from_spec).

    python3 python/tests/gpu/diagnose.py
"""

import subprocess
import sys

STEPS = {
    "import": "import gpumem",
    "size_to_string": "import gpumem; print(gpumem.size_to_string(3 << 29))",
    "canonical_spec": "import gpumem; print(gpumem.canonical_spec('pool:initial=1GiB>cuda'))",
    "leaf_oom_message": (
        "import gpumem\nh = gpumem.HostRuntime(capacity_bytes=1 << 20)\n"
        "try:\n    gpumem.CudaMemoryResource(h).allocate(2 << 20)\n"
        "except MemoryError as e:\n    print(e)"),
    "tracking_str": (
        "import gpumem\nt = gpumem.TrackingResourceAdaptor("
        "gpumem.CudaMemoryResource(gpumem.HostRuntime()))\np = t.allocate(10)\n"
        "print(t.get_outstanding_allocations_str())"),
    "from_spec_host": (
        "import gpumem\nprint(gpumem.from_spec('statistics>pool:initial=1MiB', "
        "gpumem.HostRuntime()))"),
    "from_spec_cuda": "import gpumem\nprint(gpumem.from_spec('statistics>pool:initial=64MiB>cuda'))",
    "limit_oom_cuda": (
        "import gpumem\nt = gpumem.from_spec('limiting:limit=1MiB>pool:initial=4MiB>cuda')\n"
        "try:\n    t.allocate(2 << 20)\nexcept MemoryError as e:\n    print(e)"),
    "torch_then_tracking": (
        "import torch, gpumem\nt = gpumem.TrackingResourceAdaptor("
        "gpumem.CudaMemoryResource(gpumem.HostRuntime()))\np = t.allocate(10)\n"
        "print(t.get_outstanding_allocations_str())"),
}

if __name__ == "__main__":
    for name, code in STEPS.items():
        p = subprocess.run([sys.executable, "-X", "faulthandler", "-c", code],
                           capture_output=True, text=True, timeout=120)
        status = "ok" if p.returncode == 0 else f"rc {p.returncode}"
        print(f"{name:22s} {status:8s} {(p.stdout + p.stderr).strip()[:300]!r}", flush=True)
