"""An all_reduce over tensors of a gpumem memory pool registered with NCCL, one process per GPU
(torchrun): prints one JSON line per rank with the sums seen and the pool's statistics. Run with
NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=REG to see NCCL's own account of the registration.

    torchrun --nproc-per-node 2 python/tests/gpu/torch_nccl_register.py [--spec SPEC]"""

import argparse
import json
import os

import torch
import torch.distributed as dist

import gpumem.torch as gt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spec", default=None, help="the pool's gpumem spec (default: mem_pool's)")
    ap.add_argument("--mib", type=int, default=64)
    ap.add_argument("--out", default=None, help="write each rank's line to OUT/rank<N>.json too")
    args = ap.parse_args()
    local = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    rank, world = dist.get_rank(), dist.get_world_size()
    pool = gt.mem_pool(args.spec)
    n = args.mib * (1 << 20) // 4
    with torch.cuda.use_mem_pool(pool):
        x = torch.full((n,), float(rank + 1), device="cuda")
    backend = dist.distributed_c10d._get_default_group()._get_backend(torch.device("cuda"))
    registered, why = True, ""
    try:
        backend.register_mem_pool(pool)
    except Exception as e:  # noqa: BLE001  (reported, not hidden)
        registered, why = False, f"{type(e).__name__}: {e}"
    dist.all_reduce(x)
    torch.cuda.synchronize()
    expected = float(sum(range(1, world + 1)))
    ok = bool((x == expected).all())
    if registered:
        try:
            backend.deregister_mem_pool(pool)
        except Exception as e:  # noqa: BLE001
            why = f"deregister: {type(e).__name__}: {e}"
    line = json.dumps({"rank": rank, "registered": registered, "error": why, "sums_ok": ok,
                       "spec": gt.mem_pool_spec(pool), "pool": gt.mem_pool_stats(pool),
                       "nccl": ".".join(map(str, torch.cuda.nccl.version()))})
    print(line, flush=True)
    if args.out:
        with open(os.path.join(args.out, f"rank{rank}.json"), "w") as f:
            f.write(line)
    del x
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
