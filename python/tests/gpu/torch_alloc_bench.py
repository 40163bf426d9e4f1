"""What one allocation and free cost through PyTorch under whichever allocator PyTorch has: a loop
that keeps a few tensors alive and replaces one each iteration (sizes 512 B to 4 MiB, the mix a
generation step allocates), timed on the host; prints one JSON line with the median over rounds of
the time per allocation + free (Python's own cost per iteration included, the same under every
allocator: compare the configurations, not the absolute figure).

    python python/tests/gpu/torch_alloc_bench.py
    GPUMEM_TORCH_ALLOC=vmm_pool python -m gpumem.torch python/tests/gpu/torch_alloc_bench.py
"""

import argparse
import json
import statistics
import time

import torch

from tiny_gpt import allocator_counts, allocator_name, device_used_bytes

SIZES = [512, 3072, 49152, 196608, 786432, 4 << 20, 1536, 98304]  # bytes; cycled


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iterations", type=int, default=20000)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--live", type=int, default=16, help="tensors kept alive")
    args = ap.parse_args()
    if args.iterations < 1 or args.rounds < 1 or args.live < 1:
        raise SystemExit("--iterations, --rounds and --live must be at least 1")

    sizes = [SIZES[i % len(SIZES)] for i in range(args.iterations)]
    live = [torch.empty(s, dtype=torch.uint8, device="cuda") for s in sizes[:args.live]]
    torch.cuda.synchronize()
    rounds = []
    for r in range(args.rounds + 1):  # the first round warms up, untimed
        t0 = time.perf_counter()
        for i, s in enumerate(sizes):
            live[i % args.live] = torch.empty(s, dtype=torch.uint8, device="cuda")
        us = (time.perf_counter() - t0) * 1e6 / len(sizes)
        if r > 0:
            rounds.append(us)
    torch.cuda.synchronize()
    print(json.dumps({
        "script": "alloc",
        "allocator": allocator_name(),
        "iterations": args.iterations,
        "rounds_us": [round(x, 3) for x in rounds],
        "median_pair_us": round(statistics.median(rounds), 3),
        "device_used_mib": round(device_used_bytes() / 2**20, 1),
        "counts": allocator_counts(),
    }), flush=True)


if __name__ == "__main__":
    main()
