"""GPT-2-small training with DistributedDataParallel over NCCL, one process per GPU (torchrun),
under whichever allocator PyTorch has; rank 0 prints one JSON line: the mean loss of each step over
the ranks, each rank's device memory used at its peak and peak reserved, the median step time.

    torchrun --nproc-per-node 2 python/tests/gpu/torch_ddp_bench.py                  # PyTorch's
    torchrun --nproc-per-node 2 -m gpumem.torch python/tests/gpu/torch_ddp_bench.py  # gpumem's

The script itself never mentions gpumem: `-m gpumem.torch` (which runs the script after
gpumem.torch.use()) switches the allocator. Same seeds, same batches (each rank its own): the
losses must be equal under every allocator."""

import argparse
import json
import os
import statistics

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from tiny_gpt import (TinyGPT, allocator_name, device_used_bytes, setup_determinism, token_batches,
                      train_step)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--layers", type=int, default=12)
    args = ap.parse_args()

    local = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    rank, world = dist.get_rank(), dist.get_world_size()

    setup_determinism(args.seed)  # the same initial weights on every rank
    model = DistributedDataParallel(TinyGPT(layers=args.layers).cuda(), device_ids=[local])
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=False, foreach=True)
    losses, times, peak_used = [], [], 0
    # each rank its own batches; backward all-reduces the gradients over NCCL, bucket by bucket
    for tokens in token_batches(args.steps, args.seed + 1 + rank):
        loss, ms = train_step(model, optimizer, tokens)
        losses.append(loss)
        times.append(ms)
        peak_used = max(peak_used, device_used_bytes())

    mean = torch.tensor(losses, dtype=torch.float64, device="cuda")
    dist.all_reduce(mean)
    mine = {"rank": rank, "device_used_mib": round(peak_used / 2**20, 1),
            "peak_reserved_mib": round(torch.cuda.max_memory_reserved() / 2**20, 1),
            "median_step_ms": round(statistics.median(times[3:] or times), 3)}
    ranks = [None] * world
    dist.all_gather_object(ranks, mine)
    if rank == 0:
        print(json.dumps({
            "script": "ddp", "allocator": allocator_name(), "world": world, "steps": args.steps,
            "mean_losses": [round(x / world, 6) for x in mean.tolist()],
            "ranks": ranks,
            "max_device_used_mib": max(r["device_used_mib"] for r in ranks),
            "median_step_ms": round(statistics.median(r["median_step_ms"] for r in ranks), 3),
            "nccl": ".".join(map(str, torch.cuda.nccl.version())),
        }), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
