"""NCCL buffer registration of gpumem pools on communicators a program makes itself, with the NCCL
library it chooses (no PyTorch in the process): one process drives every GPU (ncclCommInitAll);
on each GPU a gpumem VmmPoolMemoryResource block spanning several physical handles is registered
through gpumem.VmmRegistrar, the pool then grows (the new memory is registered as it is mapped),
and both blocks are all_reduced. Prints one JSON line: NCCL's version, the registration unit, each
GPU's registrations and failures, and whether every sum is right. NCCL_DEBUG=INFO
NCCL_DEBUG_SUBSYS=REG shows NCCL's own account of each registration.

    python python/tests/gpu/nccl_own_comm.py [--nccl /path/to/libnccl.so.2] [--unit run|handle]

--nccl: the NCCL library to load (default: the nvidia-nccl package's, else libnccl.so.2 from the
library path). --unit: what one registration covers (default: "run", several handles mapped
together, for NCCL 2.29.2 and later; "handle", one physical handle, for older NCCL). Exits 0 when
every sum is right and no registration failed, 1 otherwise, 2 when it cannot run (fewer than two
GPUs, no NCCL)."""

import argparse
import ctypes
import json
import os
import sys

# No NVLink multicast objects in this process.
for _key, _value in {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
                     "NVSHMEM_DISABLE_NVLS": "1"}.items():
    os.environ.setdefault(_key, _value)

import gpumem  # noqa: E402
from gpumem._torch_nccl import nccl_library, nccl_version, unit_for  # noqa: E402

MiB = 1 << 20
NCCL_FLOAT32, NCCL_SUM = 7, 0  # ncclDataType_t ncclFloat32, ncclRedOp_t ncclSum
H2D, D2H = 1, 2  # cudaMemcpyKind
ROW = 1 << 16  # floats copied per cudaMemcpy


def cuda_runtime() -> ctypes.CDLL:
    for name in ("libcudart.so", "libcudart.so.13", "libcudart.so.12",
                 "/usr/local/cuda/lib64/libcudart.so"):
        try:
            rt = ctypes.CDLL(name)
        except OSError:
            continue
        rt.cudaMemcpy.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        rt.cudaSetDevice.argtypes = [ctypes.c_int]
        rt.cudaStreamSynchronize.argtypes = [ctypes.c_void_p]
        return rt
    sys.exit("nccl_own_comm: no CUDA runtime library (libcudart.so) could be loaded")


def declare(nccl) -> None:
    """The argument types of the NCCL functions called here (pointers stay 64-bit)."""
    vp = ctypes.c_void_p
    nccl.ncclCommInitAll.argtypes = [ctypes.POINTER(vp), ctypes.c_int, ctypes.POINTER(ctypes.c_int)]
    nccl.ncclAllReduce.argtypes = [vp, vp, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, vp, vp]
    nccl.ncclCommDestroy.argtypes = [vp]


def check(code: int, what: str) -> None:
    if code != 0:
        raise RuntimeError(f"{what} failed with code {code}")


def fill(rt, ptr: int, count: int, value: float) -> None:
    row = (ctypes.c_float * ROW)(*([value] * ROW))
    for off in range(0, count, ROW):
        check(rt.cudaMemcpy(ptr + 4 * off, row, 4 * min(ROW, count - off), H2D), "cudaMemcpy")


def all_equal(rt, ptr: int, count: int, value: float) -> bool:
    row = (ctypes.c_float * ROW)()
    want = bytes((ctypes.c_float * ROW)(*([value] * ROW)))
    for off in range(0, count, ROW):
        n = min(ROW, count - off)
        check(rt.cudaMemcpy(row, ptr + 4 * off, 4 * n, D2H), "cudaMemcpy")
        if bytes(row)[:4 * n] != want[:4 * n]:
            return False
    return True


def all_reduce(nccl, rt, comms, streams, ptrs, count: int) -> None:
    check(nccl.ncclGroupStart(), "ncclGroupStart")
    for d, ptr in enumerate(ptrs):
        check(rt.cudaSetDevice(d), "cudaSetDevice")
        check(nccl.ncclAllReduce(ptr, ptr, count, NCCL_FLOAT32, NCCL_SUM, comms[d], streams[d]),
              "ncclAllReduce")
    check(nccl.ncclGroupEnd(), "ncclGroupEnd")
    for d, s in enumerate(streams):
        check(rt.cudaSetDevice(d), "cudaSetDevice")
        check(rt.cudaStreamSynchronize(s), "cudaStreamSynchronize")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nccl", help="the NCCL library to load")
    ap.add_argument("--unit", choices=("run", "handle"), help="what one registration covers")
    ap.add_argument("--mib", type=int, default=80, help="the first block's size (MiB)")
    args = ap.parse_args()
    if args.mib < 1:
        ap.error("--mib must be at least 1")

    rt = cuda_runtime()
    n = ctypes.c_int(0)
    if rt.cudaGetDeviceCount(ctypes.byref(n)) != 0 or n.value < 2:
        print(json.dumps({"skipped": f"needs two GPUs, found {n.value}"}))
        sys.exit(2)
    try:
        nccl = nccl_library([args.nccl] if args.nccl else None)
    except RuntimeError as e:
        print(json.dumps({"skipped": str(e)}))
        sys.exit(2)
    version = nccl_version(nccl)
    declare(nccl)
    unit = args.unit or unit_for(version)
    register = ctypes.cast(nccl.ncclCommRegister, ctypes.c_void_p).value
    deregister = ctypes.cast(nccl.ncclCommDeregister, ctypes.c_void_p).value
    ndev = n.value
    comms = (ctypes.c_void_p * ndev)()
    devs = (ctypes.c_int * ndev)(*range(ndev))
    check(nccl.ncclCommInitAll(comms, ndev, devs), "ncclCommInitAll")

    count = args.mib * MiB // 4
    streams, pools, regs, first, second = [], [], [], [], []
    for d in range(ndev):
        check(rt.cudaSetDevice(d), "cudaSetDevice")
        s = ctypes.c_void_p()
        check(rt.cudaStreamCreate(ctypes.byref(s)), "cudaStreamCreate")
        streams.append(s)
        pool = gpumem.VmmPoolMemoryResource(device=d, shareable_handles=True, gpu_direct_rdma=True)
        first.append(pool.allocate(4 * count))
        regs.append(gpumem.VmmRegistrar(pool, comms[d], register, deregister, unit))
        second.append(pool.allocate(4 * count))  # a growth: registered after it is mapped
        pools.append(pool)
    sums_ok = True
    for ptrs in (first, second):
        for d, ptr in enumerate(ptrs):
            check(rt.cudaSetDevice(d), "cudaSetDevice")
            fill(rt, ptr, count, float(d + 1))
        all_reduce(nccl, rt, comms, streams, ptrs, count)
        want = float(sum(range(1, ndev + 1)))
        for d, ptr in enumerate(ptrs):  # read on the block's own device (no peer access granted)
            check(rt.cudaSetDevice(d), "cudaSetDevice")
            sums_ok &= all_equal(rt, ptr, count, want)
    out = {"nccl": ".".join(map(str, version)), "unit": unit, "gpus": ndev, "block_mib": args.mib,
           "sums_ok": sums_ok, "ranks": []}
    for d in range(ndev):
        reg, pool = regs[d], pools[d]
        out["ranks"].append({
            "registrations": [[hex(p), b] for p, b in reg.registrations()],
            "mapped_runs": [[hex(p), b] for p, b in pool.mapped_runs()],
            "handles": pool.stats().get("handles", None),
            "failures": reg.failures, "last_failure": reg.last_failure})
    for d in range(ndev):
        check(rt.cudaSetDevice(d), "cudaSetDevice")
        regs[d].close()
        pools[d].deallocate(first[d], 4 * count)
        pools[d].deallocate(second[d], 4 * count)
        nccl.ncclCommDestroy(comms[d])
    print(json.dumps(out), flush=True)
    failed = any(r["failures"] for r in out["ranks"])
    sys.exit(0 if sums_ok and not failed else 1)


if __name__ == "__main__":
    main()
