"""A GPT-2-shaped decoder in plain PyTorch (no other package), shared by the PyTorch-allocator
comparison scripts torch_train_bench.py and torch_generate_bench.py.

Attention is written out (matmul, mask, softmax) rather than through a fused kernel, so that
the numbers are deterministic and equal under any allocator with the same seed."""

import math

import torch
from torch import nn
from torch.nn import functional as F


class Block(nn.Module):
    def __init__(self, width: int, heads: int):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.ln2 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(approximate="tanh"),
                                 nn.Linear(4 * width, width))

    def attend(self, x, cache=None):
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        shape = (b, t, self.heads, c // self.heads)
        q, k, v = (y.view(shape).transpose(1, 2) for y in (q, k, v))
        if cache is not None:  # KV cache: grows by t tokens per call
            if cache.get("k") is not None:
                k = torch.cat([cache["k"], k], dim=2)
                v = torch.cat([cache["v"], v], dim=2)
            cache["k"], cache["v"] = k, v
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(k.size(-1))
        total = k.size(2)
        mask = torch.ones(t, total, dtype=torch.bool, device=x.device).tril(total - t)
        scores = scores.masked_fill(~mask, float("-inf"))
        y = F.softmax(scores.float(), dim=-1).to(v.dtype) @ v
        return self.proj(y.transpose(1, 2).reshape(b, t, c))

    def forward(self, x, cache=None):
        x = x + self.attend(self.ln1(x), cache)
        return x + self.mlp(self.ln2(x))


class TinyGPT(nn.Module):
    """GPT-2 small by default: 12 layers, 768 wide, 12 heads, 50257 tokens, 1024 positions."""

    def __init__(self, vocab=50257, positions=1024, width=768, layers=12, heads=12):
        super().__init__()
        self.tok = nn.Embedding(vocab, width)
        self.pos = nn.Embedding(positions, width)
        self.blocks = nn.ModuleList(Block(width, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab, bias=False)
        self.head.weight = self.tok.weight  # tied, as in GPT-2

    def forward(self, tokens, caches=None, start=0):
        t = tokens.size(1)
        pos = torch.arange(start, start + t, device=tokens.device)
        x = self.tok(tokens) + self.pos(pos)
        for i, block in enumerate(self.blocks):
            x = block(x, None if caches is None else caches[i])
        return self.head(self.ln(x))


class CheckpointedGPT(TinyGPT):
    """TinyGPT with activation checkpointing per block: activations are recomputed in backward."""

    def forward(self, tokens, caches=None, start=0):
        from torch.utils.checkpoint import checkpoint

        if caches is not None:
            return super().forward(tokens, caches, start)
        t = tokens.size(1)
        pos = torch.arange(start, start + t, device=tokens.device)
        x = self.tok(tokens) + self.pos(pos)
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=False)
        return self.head(self.ln(x))


class MoE(nn.Module):
    """A mixture-of-experts MLP: `experts` GELU MLPs, each token routed to its `top` best; the
    tokens per expert vary step by step (so do the sizes of the expert's activations)."""

    def __init__(self, width: int, experts: int = 8, top: int = 2):
        super().__init__()
        self.top = top
        self.router = nn.Linear(width, experts, bias=False)
        self.experts = nn.ModuleList(
            nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))
            for _ in range(experts))

    def forward(self, x):
        b, t, c = x.shape
        flat = x.reshape(-1, c)
        weights, chosen = F.softmax(self.router(flat).float(), -1).topk(self.top, -1)
        out = torch.zeros_like(flat)
        for e, expert in enumerate(self.experts):
            rows, slot = (chosen == e).nonzero(as_tuple=True)
            if rows.numel() == 0:
                continue
            y = expert(flat[rows]) * weights[rows, slot].unsqueeze(-1).to(flat.dtype)
            out.index_add_(0, rows, y)
        return out.view(b, t, c)


class MoEGPT(TinyGPT):
    """A decoder whose blocks' MLPs are MoE layers: 6 layers, 512 wide, 8 heads, 8 experts."""

    def __init__(self, width: int = 512, layers: int = 6, heads: int = 8):
        super().__init__(width=width, layers=layers, heads=heads)
        for block in self.blocks:
            block.mlp = MoE(width)


MODELS = {"gpt": TinyGPT, "checkpoint": CheckpointedGPT, "moe": MoEGPT}


def allocator_name() -> str:
    """'torch' (PyTorch's caching allocator), 'torch expandable_segments' (the same with
    PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True) or what gpumem.torch installed."""
    import os
    import sys

    gt = sys.modules.get("gpumem.torch")
    if gt is not None and gt.installed():
        return "gpumem " + "; ".join(
            f"{'all' if d is None else d}={s}" for d, s in gt.installed().items())
    if "expandable_segments:true" in os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "").lower():
        return "torch expandable_segments"
    return "torch"


def allocator_counts() -> dict:
    """Allocations and the device memory obtained / given back so far (memory_stats counters)."""
    stats = torch.cuda.memory_stats()
    return {"allocations": stats.get("allocation.all.allocated", 0),
            "device_allocs": stats.get("num_device_alloc", 0),
            "device_frees": stats.get("num_device_free", 0)}


def setup_determinism(seed: int) -> None:
    import os

    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.manual_seed(seed)
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False


def device_used_bytes() -> int:
    free, total = torch.cuda.mem_get_info()
    return total - free


SHAPES = [(16, 256), (8, 512), (4, 1024), (12, 384), (6, 768), (24, 128)]  # batch x sequence


def token_batches(steps: int, seed: int) -> list:
    """`steps` batches of random tokens on the host, batch x sequence cycling through SHAPES."""
    gen = torch.Generator().manual_seed(seed)
    out = []
    for step in range(steps):
        b, t = SHAPES[step % len(SHAPES)]
        out.append(torch.randint(0, 50257, (b, t + 1), generator=gen))
    return out


def train_step(model, optimizer, tokens, after_backward=None) -> tuple:
    """One bf16-autocast training step on `tokens` (host); returns (loss, milliseconds), timed from
    a synchronized device to a synchronized device. `after_backward()`, when given, runs between
    the backward pass and the optimizer step (the gradients are there)."""
    import time

    torch.cuda.synchronize()
    t0 = time.perf_counter()
    tokens = tokens.cuda(non_blocking=True)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        logits = model(tokens[:, :-1])
        loss = F.cross_entropy(logits.float().flatten(0, 1), tokens[:, 1:].flatten())
    loss.backward()
    if after_backward is not None:
        after_backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    value = loss.item()
    torch.cuda.synchronize()
    return value, (time.perf_counter() - t0) * 1e3
