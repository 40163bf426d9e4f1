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

import torch

from tiny_gpt import (MODELS, allocator_name, device_used_bytes, setup_determinism, token_batches,
                      train_step)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--layers", type=int, default=None, help="default: the model's own")
    ap.add_argument("--model", choices=sorted(MODELS), default="gpt",
                    help="gpt: GPT-2 small; checkpoint: the same with activation checkpointing per "
                         "block; moe: a mixture-of-experts decoder (8 experts, top 2)")
    args = ap.parse_args()

    setup_determinism(args.seed)
    kwargs = {} if args.layers is None else {"layers": args.layers}
    model = MODELS[args.model](**kwargs).cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=False, foreach=True)
    losses, times = [], []
    for tokens in token_batches(args.steps, args.seed):
        loss, ms = train_step(model, optimizer, tokens)
        losses.append(loss)
        times.append(ms)

    # torch.cuda's statistics work under gpumem too (gpumem.torch.use() points them at gpumem's)
    print(json.dumps({
        "script": "train",
        "model": args.model,
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
