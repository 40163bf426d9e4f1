"""GPT-2-small training (bf16 autocast, batch x sequence varying step to step) under whichever
allocator PyTorch has; prints one JSON line: losses, peak memory, median step time.

    python python/tests/gpu/torch_train_bench.py                       # PyTorch's allocator
    GPUMEM_TORCH_ALLOC=pool python -m gpumem.torch python/tests/gpu/torch_train_bench.py
    GPUMEM_TORCH_ALLOC=vmm_pool python -m gpumem.torch python/tests/gpu/torch_train_bench.py

The script itself never mentions gpumem: `python -m gpumem.torch` switches the allocator.
Same seed, same batches: the losses must be equal under every allocator. Under a minute on an
H100 (about 40 s, most of it start-up)."""

import argparse
import json
import statistics
import time

import torch

from tiny_gpt import TinyGPT, allocator_name, device_used_bytes, setup_determinism

SHAPES = [(16, 256), (8, 512), (4, 1024), (12, 384), (6, 768), (24, 128)]  # batch x sequence


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--layers", type=int, default=12)
    args = ap.parse_args()

    setup_determinism(args.seed)
    model = TinyGPT(layers=args.layers).cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=False, foreach=True)
    gen = torch.Generator().manual_seed(args.seed)
    batches = []
    for step in range(args.steps):
        b, t = SHAPES[step % len(SHAPES)]
        batches.append(torch.randint(0, 50257, (b, t + 1), generator=gen))

    losses, times = [], []
    for tokens in batches:
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        tokens = tokens.cuda(non_blocking=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(tokens[:, :-1])
            loss = torch.nn.functional.cross_entropy(logits.float().flatten(0, 1),
                                                     tokens[:, 1:].flatten())
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.item())
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3)

    # torch.cuda's statistics work under gpumem too (gpumem.torch.use() points them at gpumem's)
    print(json.dumps({
        "script": "train",
        "allocator": allocator_name(),
        "steps": args.steps,
        "losses": [round(x, 6) for x in losses],
        "final_loss": losses[-1],
        "peak_allocated_mib": round(torch.cuda.max_memory_allocated() / 2**20, 1),
        "peak_reserved_mib": round(torch.cuda.max_memory_reserved() / 2**20, 1),
        "device_used_mib": round(device_used_bytes() / 2**20, 1),
        "median_step_ms": round(statistics.median(times[3:] or times), 3),
        "first_step_ms": round(times[0], 1),
    }), flush=True)


if __name__ == "__main__":
    main()
