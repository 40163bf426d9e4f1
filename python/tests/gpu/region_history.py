"""Records where PyTorch places the blocks of a MemPool region (mem_pool_bench.py's workloads, on
PyTorch's own allocator in a MemPool) and writes them out for page-level analysis:

    python python/tests/gpu/region_history.py --workload train --out train.json

The JSON holds the pool's segments ([address, size]) and its events in order: ["a", addr, size]
for an allocation in the pool, ["f", addr, size] for a free completed there, ["s"] at each step's
start. From it, analyze_history() says how many 2 MiB pages the region's blocks ever touched and
how many were touched by live blocks at once, against the region's peak live bytes."""

import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import mem_pool_bench as mpb  # noqa: E402

MiB = 1 << 20
MARK = 7 * MiB  # a step marker: an allocation of MARK + 512 * step bytes outside the pool


def record(args) -> dict:
    import torch

    torch.cuda.init()
    torch.cuda.memory._record_memory_history(max_entries=2_000_000, stacks="python")
    step = [0]
    real_sample = mpb.Region.sample

    def sample_and_mark(self, live):
        real_sample(self, live)
        marker = torch.empty(MARK + 512 * step[0], dtype=torch.uint8, device="cuda")
        del marker
        step[0] += 1

    mpb.Region.sample = sample_and_mark
    run = mpb.run_kv if args.workload == "kv" else mpb.run_train
    out, region = run(torch, "torch", args)
    snap = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    pool_id = tuple(region.pool.id)
    segments = [[s["address"], s["total_size"]] for s in snap["segments"]
                if tuple(s.get("segment_pool_id", (0, 0))) == pool_id]

    def in_pool(a):
        return any(b <= a < b + n for b, n in segments)

    events = []
    for e in snap["device_traces"][torch.cuda.current_device()]:
        act, addr, size = e["action"], e.get("addr", 0), e.get("size", 0)
        if act == "alloc" and not in_pool(addr) and MARK <= size < MARK + 512 * 100000 \
                and (size - MARK) % 512 == 0:
            events.append(["s"])
        elif act == "alloc" and in_pool(addr):
            events.append(["a", addr, size])
        elif act == "free_completed" and in_pool(addr):
            events.append(["f", addr, size])
    return {"workload": args.workload, "result": out, "segments": segments, "events": events}


def analyze_history(h: dict, page: int = 2 * MiB) -> dict:
    """Pages touched ever, pages touched by live blocks at once (peak), against peak live."""
    count: dict = {}
    touched = set()
    live = peak_live = live_pages = peak_pages = 0
    for e in h["events"]:
        if e[0] == "s":
            continue
        addr, size = e[1], e[2]
        first, last = addr // page, (addr + max(size, 1) - 1) // page
        step = 1 if e[0] == "a" else -1
        live += step * size
        for p in range(first, last + 1):
            c = count.get(p, 0)
            if step > 0:
                touched.add(p)
                live_pages += c == 0
            else:
                live_pages -= c == 1
            count[p] = c + step
        peak_live = max(peak_live, live)
        peak_pages = max(peak_pages, live_pages)
    reserved = sum(n for _, n in h["segments"])
    return {"peak_live_mib": round(peak_live / MiB, 1), "reserved_over_live": round(reserved / peak_live, 4),
            "touched_over_live": round(len(touched) * page / peak_live, 4),
            "live_pages_over_live": round(peak_pages * page / peak_live, 4),
            "events": len(h["events"])}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workload", choices=("kv", "train"), default="train")
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--kv-gib", type=float, default=3.0)
    ap.add_argument("--kv-steps", type=int, default=400)
    ap.add_argument("--train-steps", type=int, default=6)
    ap.add_argument("--layers", type=int, default=12)
    args = ap.parse_args()
    h = record(args)
    with open(args.out, "w") as f:
        json.dump(h, f)
    print(json.dumps({"workload": args.workload, **analyze_history(h)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
