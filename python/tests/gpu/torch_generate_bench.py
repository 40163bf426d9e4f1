"""Greedy generation with a KV cache that grows token by token (GPT-2 small shape, bf16, random
weights) under whichever allocator PyTorch has; prints one JSON line: the tokens' checksum, peak
memory, median time per token.

    python python/tests/gpu/torch_generate_bench.py                    # PyTorch's allocator
    GPUMEM_TORCH_ALLOC=pool python -m gpumem.torch python/tests/gpu/torch_generate_bench.py

Same seed: the generated tokens must be equal under every allocator. Well under a minute on an
H100."""

import argparse
import hashlib
import json
import statistics
import time

import torch

from tiny_gpt import (TinyGPT, allocator_counts, allocator_name, device_used_bytes,
                      setup_determinism)


@torch.no_grad()
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--tokens", type=int, default=384)
    ap.add_argument("--seed", type=int, default=1234)
    args = ap.parse_args()

    setup_determinism(args.seed)
    model = TinyGPT().cuda().to(torch.bfloat16).eval()
    gen = torch.Generator().manual_seed(args.seed)
    prompt = torch.randint(0, 50257, (args.batch, args.prompt), generator=gen).cuda()

    caches = [{} for _ in model.blocks]
    times = []
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    logits = model(prompt, caches)
    torch.cuda.synchronize()
    prefill_ms = (time.perf_counter() - t0) * 1e3
    out = [logits[:, -1].argmax(-1, keepdim=True)]
    position = args.prompt
    for i in range(args.tokens - 1):
        if i == 8:
            counts_before = allocator_counts()  # what the allocator does over the later tokens
        t0 = time.perf_counter()
        logits = model(out[-1], caches, start=position)
        out.append(logits[:, -1].argmax(-1, keepdim=True))
        position += 1
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3)
    tokens = torch.cat(out, dim=1).cpu()

    print(json.dumps({
        "script": "generate",
        "allocator": allocator_name(),
        "tokens": int(tokens.numel()),
        "tokens_sha256": hashlib.sha256(tokens.numpy().tobytes()).hexdigest()[:16],
        "first_tokens": tokens[0, :8].tolist(),
        "peak_allocated_mib": round(torch.cuda.max_memory_allocated() / 2**20, 1),
        "peak_reserved_mib": round(torch.cuda.max_memory_reserved() / 2**20, 1),
        "device_used_mib": round(device_used_bytes() / 2**20, 1),
        "prefill_ms": round(prefill_ms, 2),
        "median_token_ms": round(statistics.median(times), 3),
        "after_token_9": {k: v - counts_before[k] for k, v in allocator_counts().items()}
        if args.tokens > 9 else {},
    }), flush=True)


if __name__ == "__main__":
    main()
