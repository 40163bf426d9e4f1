"""Runs torch_ddp_bench.py (DistributedDataParallel, GPT-2 small, torchrun) under PyTorch's
allocator, PyTorch's allocator with expandable segments, `-m gpumem.torch` (vmm_pool) and
--bucket-pool (PyTorch's allocator, DDP's gradient buckets in a gpumem memory pool registered with
NCCL), in turn, --runs times; prints each run's JSON line, then a markdown table: each rank's
device memory used at its peak, the median step time and the final mean loss of every run.

    python python/tests/gpu/ddp_table.py [--gpus 2] [--runs 2] [--steps 20] [--layers 12]
        [--configs torch,gpumem] [--gpumem vmm_pool --gpumem pool]   # other gpumem specs too

About 3 minutes on two H100s with the defaults (most of it the start of each run). Exits 1 when a
run failed or the losses differ between runs."""

import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))

# No NVLink multicast objects in any process this starts (NCCL's NVLS, PyTorch's symmetric memory).
NO_MULTICAST = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
                "NVSHMEM_DISABLE_NVLS": "1"}

# name -> (what the table calls it, arguments before the script, after it,
#          PYTORCH_CUDA_ALLOC_CONF or None for PyTorch's default)
CONFIGS = {
    "torch": ("PyTorch's allocator", [], [], None),
    "torch_expandable": ("PyTorch's allocator, `expandable_segments:True`", [], [],
                         "expandable_segments:True"),
    "gpumem": ("`-m gpumem.torch` (`vmm_pool:peers=all`)", ["-m", "gpumem.torch"], [], None),
    "bucket_pool": ("PyTorch's allocator, buckets in a registered gpumem pool", [],
                    ["--bucket-pool"], None),
}


def add_gpumem_spec(spec: str) -> str:
    """A configuration `-m gpumem.torch` with GPUMEM_TORCH_ALLOC=`spec`; returns its name."""
    name = f"gpumem={spec}"
    CONFIGS[name] = (f"`-m gpumem.torch` (`{spec}`)", ["-m", "gpumem.torch"], [], None)
    return name


def run(name: str, args) -> dict:
    """One torchrun of torch_ddp_bench.py under configuration `name`: rank 0's JSON line, or a
    line with "error"."""
    _, before, after, conf = CONFIGS[name]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
           str(args.gpus), *before, "torch_ddp_bench.py", "--steps", str(args.steps), "--layers",
           str(args.layers), *after]
    env = dict(os.environ, **NO_MULTICAST)
    env.pop("GPUMEM_TORCH_ALLOC", None)  # gpumem's default spec for -m gpumem.torch
    if name.startswith("gpumem="):
        env["GPUMEM_TORCH_ALLOC"] = name[len("gpumem="):]
    env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    if conf is not None:
        env["PYTORCH_CUDA_ALLOC_CONF"] = conf
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=args.timeout,
                              cwd=HERE, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return {"config": name, "error": f"no result within {args.timeout:.0f} s"}
    lines = [x for x in proc.stdout.splitlines() if x.startswith('{"script"')]
    if proc.returncode != 0 or not lines:
        return {"config": name, "error": f"exited with status {proc.returncode}",
                "stderr_tail": proc.stderr[-2000:]}
    return {"config": name, "seconds": round(time.perf_counter() - t0, 1), **json.loads(lines[-1])}


def ranks_used(r: dict) -> str:
    return " / ".join(f"{x['device_used_mib']:,.1f}" for x in
                      sorted(r["ranks"], key=lambda x: x["rank"]))


def table(results: dict) -> str:
    """The markdown table: one row per configuration, each run's figures separated by ';'."""
    rows = ["| configuration | device used at the peak, rank 0 / rank 1 (MiB) | median step (ms) "
            "| final mean loss | buckets in the pool |", "| --- | --- | --- | --- | --- |"]
    for name, runs in results.items():
        ok = [r for r in runs if "error" not in r]
        failed = [r["error"] for r in runs if "error" in r]
        used = "; ".join(ranks_used(r) for r in ok) or "—"
        step = " / ".join(f"{r['median_step_ms']:.2f}" for r in ok) or "—"
        loss = " / ".join(sorted({f"{r['mean_losses'][-1]:.6f}" for r in ok})) or "—"
        pooled = ("—" if name != "bucket_pool" else
                  " / ".join("yes" if r.get("buckets_in_pool") else "NO" for r in ok) or "—")
        if failed:
            loss += " (failed: " + "; ".join(failed).replace("|", "/") + ")"
        rows.append(f"| {CONFIGS[name][0]} | {used} | {step} | {loss} | {pooled} |")
    return "\n".join(rows)


def main() -> int:
    ap = argparse.ArgumentParser(description="torch_ddp_bench.py under four allocator setups, "
                                 "alternating, and a markdown table of the results")
    ap.add_argument("--gpus", type=int, default=2, help="processes (one GPU each)")
    ap.add_argument("--runs", type=int, default=2, help="runs of each configuration, in turn")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--configs", default=",".join(CONFIGS),
                    help="comma-separated, from " + ", ".join(CONFIGS))
    ap.add_argument("--gpumem", action="append", default=[], metavar="SPEC",
                    help="also `-m gpumem.torch` with this GPUMEM_TORCH_ALLOC spec (repeatable), "
                         "after the --configs ones")
    ap.add_argument("--timeout", type=float, default=150, help="seconds per run")
    args = ap.parse_args()
    names = [c for c in args.configs.split(",") if c]
    names += [add_gpumem_spec(spec) for spec in args.gpumem]
    unknown = [c for c in names if c not in CONFIGS]
    if unknown:
        print(f"ddp_table: unknown configuration {unknown}; known: {', '.join(CONFIGS)}",
              file=sys.stderr)
        return 2
    results = {name: [] for name in names}
    for _ in range(args.runs):
        for name in names:
            r = run(name, args)
            print(json.dumps(r), flush=True)
            results[name].append(r)
    print()
    print(table(results))
    done = [r for runs in results.values() for r in runs if "error" not in r]
    same = len({json.dumps(r["mean_losses"]) for r in done}) <= 1
    print(f"\nlosses equal in every run: {'yes' if same else 'NO'}")
    failed = any("error" in r for runs in results.values() for r in runs)
    return 0 if same and not failed else 1


if __name__ == "__main__":
    sys.exit(main())
