"""Pause and resume of torch_memory_saver, or of gpumem's facade with the same API, timed the same way:
tensors of 64 or 256 MiB created in a tagged region and filled, then paused and resumed (discard,
or with a CPU backup) a few times; one JSON line per case: milliseconds per pause and per resume
(median of the timed rounds, after one untimed round), GiB/s, and device memory in use
(cudaMemGetInfo) before the region, with the tensors, while paused, and after the tensors were
deleted and the cache emptied (memory a region strands shows there).

    pip install --no-index torch_memory_saver-0.0.10-*.whl   # the peer (a wheel from PyPI)
    python python/tests/gpu/pause_peer_bench.py [--cases 1,8,32] [--rounds 3] [--peer gpumem]
        [--warm-up SECONDS]

--peer gpumem runs the same code through `gpumem.torch.torch_memory_saver` (its regions then come
from gpumem's vmm_pool; PYTHONPATH must find the gpumem package).

Not a test: a benchmark of a peer, run on a GPU machine beside gpumem's own."""

import argparse
import json
import statistics
import time

import torch

CASES = {1: (16, 64), 8: (32, 256), 32: (128, 256)}  # GiB: (tensors, MiB each)


def used_gib() -> float:
    free, total = torch.cuda.mem_get_info()
    return (total - free) / 2**30


def run_case(saver, peer: str, gib: int, backup: bool, rounds: int) -> dict:
    count, mib = CASES[gib]
    tag = f"case{gib}{'b' if backup else 'd'}"
    out = {"peer": peer, "gib": gib, "tensors": count, "mib_each": mib,
           "mode": "cpu_backup" if backup else "discard", "used_before_gib": used_gib()}
    try:
        with saver.region(tag=tag, enable_cpu_backup=backup):
            tensors = [torch.full((mib << 20,), i % 251, dtype=torch.uint8, device="cuda")
                       for i in range(count)]
        torch.cuda.synchronize()
        out["used_live_gib"] = used_gib()
        pauses, resumes = [], []
        for r in range(rounds + 1):
            t0 = time.perf_counter()
            saver.pause(tag)
            torch.cuda.synchronize()
            t1 = time.perf_counter()
            if r == 0:
                out["used_paused_gib"] = used_gib()
            saver.resume(tag)
            torch.cuda.synchronize()
            t2 = time.perf_counter()
            if r > 0:
                pauses.append(t1 - t0)
                resumes.append(t2 - t1)
        if backup:
            out["intact"] = all(int(t[0]) == i % 251 and int(t[-1]) == i % 251
                                for i, t in enumerate(tensors))
        out["pause_ms_rounds"] = [round(t * 1e3, 3) for t in pauses]
        out["resume_ms_rounds"] = [round(t * 1e3, 3) for t in resumes]
        out["pause_ms"] = statistics.median(pauses) * 1e3
        out["resume_ms"] = statistics.median(resumes) * 1e3
        out["pause_gib_s"] = gib / statistics.median(pauses)
        out["resume_gib_s"] = gib / statistics.median(resumes)
        del tensors
    except (RuntimeError, torch.cuda.OutOfMemoryError) as e:
        out["error"] = str(e).splitlines()[0][:200]
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    out["used_after_gib"] = used_gib()
    return out


def run_replace(saver, peer: str, count: int = 16, mib: int = 256) -> dict:
    """Load `count` weights, load slightly larger replacements, free the originals, pause, resume:
    device memory in use above the start, over live bytes, at each point."""
    base = used_gib()
    out = {"peer": peer, "case": "replace", "weights": count, "mib_each": mib, "points": {}}

    def point(name, live_mib):
        torch.cuda.synchronize()
        out["points"][name] = {"used_gib": used_gib() - base, "live_gib": live_mib / 1024}

    try:
        with saver.region(tag="replace"):
            old = [torch.ones((mib << 20,), dtype=torch.uint8, device="cuda") for _ in range(count)]
            point("weights", count * mib)
            new = [torch.ones(((mib + 1) << 20,), dtype=torch.uint8, device="cuda")
                   for _ in range(count)]
            point("replacements", count * (2 * mib + 1))
            del old
            torch.cuda.empty_cache()
            point("originals_freed", count * (mib + 1))
        saver.pause("replace")
        point("paused", 0)
        saver.resume("replace")
        point("resumed", count * (mib + 1))
        del new
    except (RuntimeError, torch.cuda.OutOfMemoryError) as e:
        out["error"] = str(e).splitlines()[0][:200]
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    out["used_after_gib"] = used_gib() - base
    return out


def keep_busy(seconds: float) -> float:
    """Matrix products on the GPU for `seconds` before anything is timed, so that every peer's
    process starts its timed rounds on a GPU that has just been working (clocks up); returns the
    seconds spent."""
    if seconds <= 0:
        return 0.0
    a = torch.randn(4096, 4096, device="cuda")
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for _ in range(8):
            a = torch.tanh(a @ a)
        torch.cuda.synchronize()
    del a
    torch.cuda.empty_cache()
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default="1,8,32", help="GiB per case, from 1, 8, 32")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--peer", default="torch_memory_saver", choices=["torch_memory_saver", "gpumem"])
    ap.add_argument("--handle-mib", type=int, default=0,
                    help="gpumem: largest physical handle in MiB (0: the pool's default)")
    ap.add_argument("--replace", action="store_true",
                    help="only the load-then-replace case: 16 weights of 256 MiB replaced by "
                         "257 MiB ones, originals freed, paused, resumed")
    ap.add_argument("--warm-up", type=float, default=0.0,
                    help="seconds of matrix products on the GPU before the first case (default 0)")
    args = ap.parse_args()
    if args.peer == "gpumem":
        import gpumem.torch
        options = {"handle_bytes": args.handle_mib << 20} if args.handle_mib else {}
        gpumem.torch.use_regions(**options)  # before CUDA starts: PyTorch allocates from it
        saver = gpumem.torch.torch_memory_saver
    else:
        from torch_memory_saver import torch_memory_saver as saver
        saver.hook_mode = "torch"
    torch.cuda.init()
    busy = keep_busy(args.warm_up)
    if busy:
        print(json.dumps({"peer": args.peer, "warm_up_s": round(busy, 2)}), flush=True)
    if args.replace:
        print(json.dumps(run_replace(saver, args.peer)), flush=True)
        return
    for gib in (int(c) for c in args.cases.split(",")):
        for backup in (False, True):
            print(json.dumps(run_case(saver, args.peer, gib, backup, args.rounds)), flush=True)


if __name__ == "__main__":
    main()
