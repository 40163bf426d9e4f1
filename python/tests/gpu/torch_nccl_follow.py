"""All_reduces on a gpumem pool whose NCCL registration follows its memory
(gpumem.torch.nccl_registration), one process per GPU (torchrun): registered, then grown, then
trimmed, then grown again; prints one JSON line per rank with the sums seen at each step and the
registration's counts. Run with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=REG to see NCCL's own account.
--target pool: a gpumem.VmmPoolMemoryResource whose blocks are wrapped as tensors (growth and trim
exactly where the script says); --target mem_pool: a gpumem.torch.mem_pool() (trimmed after
torch.cuda.empty_cache(), which gives back only the segments PyTorch lets go).

    torchrun --nproc-per-node 2 python/tests/gpu/torch_nccl_follow.py [--target T] [--unit U]"""

import argparse
import json
import os

# No NVLink multicast objects in this process (NCCL's NVLS, PyTorch's symmetric memory).
for key, value in {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
                   "NVSHMEM_DISABLE_NVLS": "1"}.items():
    os.environ.setdefault(key, value)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import gpumem  # noqa: E402
import gpumem.torch as gt  # noqa: E402

NCCL_SPEC = "vmm_pool:peers=all,shareable=1,rdma=1"


def step(reg, x, rank, world) -> dict:
    """Fills x with rank + 1, all_reduces it and says whether every element is the sum."""
    x.fill_(float(rank + 1))
    dist.all_reduce(x)
    torch.cuda.synchronize()
    ok = bool((x == float(sum(range(1, world + 1)))).all())
    regs = reg.registrations()  # a mem_pool's registration gives a count, VmmRegistrar the ranges
    return {"sums_ok": ok, "registrations": regs if isinstance(regs, int) else len(regs),
            "registered_bytes": reg.registered_bytes, "failures": reg.failures}


class _Block:
    """A float32 view of n elements at a device address (CUDA array interface)."""

    def __init__(self, ptr: int, n: int):
        self.__cuda_array_interface__ = {"shape": (n,), "typestr": "<f4", "data": (ptr, False),
                                         "version": 3}


def follow_resource(args, n, rank, world):
    """A VmmPoolMemoryResource, registered, grown, trimmed and grown again."""
    pool = gpumem.VmmPoolMemoryResource(device=torch.cuda.current_device(),
                                        shareable_handles=True, gpu_direct_rdma=True)
    a = pool.allocate(4 * n)
    steps = {}
    reg = gt.nccl_registration(None, pool, unit=args.unit)
    steps["registered"] = step(reg, torch.as_tensor(_Block(a, n), device="cuda"), rank, world)
    b = pool.allocate(16 * n)  # growth: the new memory is registered after it is mapped
    steps["grown"] = step(reg, torch.as_tensor(_Block(b, 4 * n), device="cuda"), rank, world)
    torch.cuda.synchronize()
    pool.deallocate(b, 16 * n)
    pool.trim_to(pool.stats()["mapped_bytes"] - 16 * n)  # given back: deregistered
    steps["trimmed"] = step(reg, torch.as_tensor(_Block(a, n), device="cuda"), rank, world)
    c = pool.allocate(8 * n)
    steps["regrown"] = step(reg, torch.as_tensor(_Block(c, 2 * n), device="cuda"), rank, world)
    torch.cuda.synchronize()
    for p, nbytes in ((a, 4 * n), (c, 8 * n)):
        pool.deallocate(p, nbytes)
    return steps, reg, {"pool": {k: v for k, v in pool.stats().items()
                                 if k in ("mapped_bytes", "handles")}}


def follow_mem_pool(args, n, rank, world):
    """A gpumem.torch.mem_pool(), registered, grown, emptied and trimmed, grown again."""
    pool = gt.mem_pool(args.spec)
    with torch.cuda.use_mem_pool(pool):
        a = torch.empty(n, device="cuda")
    steps = {}
    reg = gt.nccl_registration(None, pool, unit=args.unit)
    steps["registered"] = step(reg, a, rank, world)
    with torch.cuda.use_mem_pool(pool):
        b = torch.empty(4 * n, device="cuda")
    steps["grown"] = step(reg, b, rank, world)
    del b
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    gt.mem_pool_trim(pool)
    steps["trimmed"] = step(reg, a, rank, world)
    with torch.cuda.use_mem_pool(pool):
        c = torch.empty(2 * n, device="cuda")
    steps["regrown"] = step(reg, c, rank, world)
    return steps, reg, {"spec": args.spec, "pool": gt.mem_pool_stats(pool)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="pool", choices=["pool", "mem_pool"])
    ap.add_argument("--spec", default=NCCL_SPEC, help=f"mem_pool's gpumem spec ({NCCL_SPEC})")
    ap.add_argument("--unit", default=None, choices=["handle", "run"],
                    help="registration unit (default: from the NCCL version)")
    ap.add_argument("--mib", type=int, default=32)
    ap.add_argument("--out", default=None, help="write each rank's line to OUT/rank<N>.json too")
    args = ap.parse_args()
    local = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    rank, world = dist.get_rank(), dist.get_world_size()
    n = args.mib * (1 << 20) // 4
    run = follow_resource if args.target == "pool" else follow_mem_pool
    steps, reg, extra = run(args, n, rank, world)
    result = {"rank": rank, "target": args.target, "unit": reg.unit, "steps": steps,
              "registered": reg.registered, "deregistered": reg.deregistered,
              "last_failure": reg.last_failure, "nccl": ".".join(map(str, torch.cuda.nccl.version())),
              **extra}
    reg.close()
    line = json.dumps(result)
    print(line, flush=True)
    if args.out:
        with open(os.path.join(args.out, f"rank{rank}.json"), "w") as f:
            f.write(line)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
