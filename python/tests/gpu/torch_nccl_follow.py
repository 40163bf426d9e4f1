"""All_reduces on a gpumem memory pool whose NCCL registration follows its memory
(gpumem.torch.nccl_registration), one process per GPU (torchrun): registered, then grown, then
trimmed, then grown again; prints one JSON line per rank with the sums seen at each step and the
registration's counts. Run with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=REG to see NCCL's own account.

    torchrun --nproc-per-node 2 python/tests/gpu/torch_nccl_follow.py [--spec SPEC] [--unit U]"""

import argparse
import json
import os

# No NVLink multicast objects in this process (NCCL's NVLS, PyTorch's symmetric memory).
for key, value in {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
                   "NVSHMEM_DISABLE_NVLS": "1"}.items():
    os.environ.setdefault(key, value)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import gpumem.torch as gt  # noqa: E402

NCCL_SPEC = "vmm_pool:peers=all,shareable=1,rdma=1"


def step(reg, x, rank, world) -> dict:
    """Fills x with rank + 1, all_reduces it and says whether every element is the sum."""
    x.fill_(float(rank + 1))
    dist.all_reduce(x)
    torch.cuda.synchronize()
    ok = bool((x == float(sum(range(1, world + 1)))).all())
    return {"sums_ok": ok, "registrations": reg.registrations(),
            "registered_bytes": reg.registered_bytes, "failures": reg.failures}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spec", default=NCCL_SPEC, help=f"the pool's gpumem spec ({NCCL_SPEC})")
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
    pool = gt.mem_pool(args.spec)
    with torch.cuda.use_mem_pool(pool):
        a = torch.empty(n, device="cuda")
    steps = {}
    reg = gt.nccl_registration(None, pool, unit=args.unit)
    steps["registered"] = step(reg, a, rank, world)
    with torch.cuda.use_mem_pool(pool):
        b = torch.empty(4 * n, device="cuda")  # the pool grows: the new memory is registered
    steps["grown"] = step(reg, b, rank, world)
    del b
    torch.cuda.synchronize()
    torch.cuda.empty_cache()  # PyTorch gives the pool's unused segments back
    gt.mem_pool_trim(pool)  # and the pool gives them to the device: deregistered
    steps["trimmed"] = step(reg, a, rank, world)
    with torch.cuda.use_mem_pool(pool):
        c = torch.empty(2 * n, device="cuda")
    steps["regrown"] = step(reg, c, rank, world)
    result = {"rank": rank, "spec": args.spec, "unit": reg.unit, "steps": steps,
              "registered": reg.registered, "deregistered": reg.deregistered,
              "last_failure": reg.last_failure, "pool": gt.mem_pool_stats(pool),
              "nccl": ".".join(map(str, torch.cuda.nccl.version()))}
    reg.close()
    line = json.dumps(result)
    print(line, flush=True)
    if args.out:
        with open(os.path.join(args.out, f"rank{rank}.json"), "w") as f:
            f.write(line)
    del a, c
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
