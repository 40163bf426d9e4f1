"""A training step (forward, backward, optimizer step on static tensors) run eagerly or captured
once with torch.cuda.graph and replayed: prints one JSON line with the losses, the parameters
and, for the captured run, the memory in use after each replay.

    python torch_graph_step.py --mode eager               # PyTorch's allocator, eager steps
    python -m gpumem.torch torch_graph_step.py --mode graph   # gpumem, the step as a CUDA graph

With the same seed both runs must give the same losses and parameters (test_torch_graphs_gpu.py).
Between replays the captured run allocates and fills other tensors: if the graph's memory were
handed to them, the next replay would overwrite them (checked) or the results would differ."""

import argparse
import gc
import json
import sys

import torch


def build(seed):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(),
                                torch.nn.Linear(256, 256), torch.nn.GELU(),
                                torch.nn.Linear(256, 1)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    gen = torch.Generator().manual_seed(seed + 1)
    batches = [(torch.randn(128, 64, generator=gen), torch.randn(128, 1, generator=gen))
               for _ in range(args.warmup + args.steps)]
    return model, opt, batches


def step(model, opt, x, y):
    opt.zero_grad(set_to_none=True)
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    return loss


def main():
    model, opt, batches = build(args.seed)
    static_x = torch.empty(128, 64, device="cuda")
    static_y = torch.empty(128, 1, device="cuda")
    losses, memory, junk_ok, left_before_clear = [], [], True, None
    # Warm-up steps (on a side stream, as torch.cuda.graph's documentation asks), eager in both
    # modes: they also fill the optimizer's momentum buffers before any capture.
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for x, y in batches[:args.warmup]:
            static_x.copy_(x)
            static_y.copy_(y)
            losses.append(float(step(model, opt, static_x, static_y)))
    torch.cuda.current_stream().wait_stream(side)
    pools = None
    if args.mode == "eager":
        for x, y in batches[args.warmup:]:
            static_x.copy_(x)
            static_y.copy_(y)
            losses.append(float(step(model, opt, static_x, static_y)))
    else:
        graph = torch.cuda.CUDAGraph()
        opt.zero_grad(set_to_none=True)
        with torch.cuda.graph(graph):
            static_loss = torch.nn.functional.mse_loss(model(static_x), static_y)
            static_loss.backward()
            opt.step()
        pools = _pools()
        junk = []
        half = args.steps // 2
        for i, (x, y) in enumerate(batches[args.warmup:]):
            static_x.copy_(x)
            static_y.copy_(y)
            graph.replay()
            losses.append(float(static_loss))
            torch.cuda.synchronize()
            if i < half:  # first half: the memory in use after each replay, nothing else held
                memory.append(_in_use())
                continue
            # second half: other tensors allocated between replays stay untouched by them
            for value, t in junk:
                junk_ok = junk_ok and bool((t == value).all())
            junk.append((float(i), torch.full((1000 + 4096 * i,), float(i), device="cuda")))
        del junk
        # The graph and its tensors go: the private pool must go with them.
        graph.reset()
        del graph, static_loss
        for p in model.parameters():
            p.grad = None
        gc.collect()
        torch.cuda.synchronize()
        # What is left are the cuBLAS workspaces PyTorch made on the capture stream during the
        # capture: they come from the graph's pool (under PyTorch's own allocator too) and live
        # until PyTorch clears them.
        left_before_clear = _pools() if _pools() is not None else _torch_private_segments()
        torch._C._cuda_clearCublasWorkspaces()
        gc.collect()
        torch.cuda.synchronize()
    pools_at_end, own_at_end = _pools(), _torch_private_segments()
    # PyTorch's own allocator keeps a released graph pool's segments cached until empty_cache.
    torch.cuda.empty_cache()
    params = torch.cat([p.detach().flatten() for p in model.parameters()]).cpu()
    out = {"mode": args.mode, "losses": losses, "params": params[:: max(1, len(params) // 64)]
           .tolist(), "param_sum": float(params.double().abs().sum()), "memory": memory,
           "junk_ok": junk_ok, "pools_after_capture": pools, "pools_at_end": pools_at_end, "left_before_clear": left_before_clear,
           "torch_private_segments_at_end": own_at_end,
           "torch_private_segments_after_empty_cache": _torch_private_segments()}
    print("RESULT " + json.dumps(out), flush=True)


def _in_use():
    """(allocated, reserved) bytes under gpumem; PyTorch's figures otherwise."""
    gt = sys.modules.get("gpumem.torch")
    if gt is not None and gt.installed():
        return [gt.memory_allocated(), gt.memory_reserved()]
    return [torch.cuda.memory_allocated(), torch.cuda.memory_reserved()]


def _torch_private_segments():
    """Sizes of the segments PyTorch's own allocator holds in private (graph) pools."""
    gt = sys.modules.get("gpumem.torch")
    if gt is not None and gt.installed():
        return None
    return [seg["total_size"] for seg in torch.cuda.memory_snapshot()
            if tuple(seg.get("segment_pool_id", (0, 0))) != (0, 0)]


def _pools():
    gt = sys.modules.get("gpumem.torch")
    if gt is None or not gt.installed():
        return None
    return [dict(p, id=list(p["id"])) for p in gt.graph_pools()]


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=["eager", "graph"], required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--steps", type=int, default=8)
    args = ap.parse_args()
    main()
