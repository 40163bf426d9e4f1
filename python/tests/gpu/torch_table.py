"""Runs the PyTorch benchmarks (torch_train_bench.py with each --model, torch_generate_bench.py)
under PyTorch's allocator, PyTorch's allocator with expandable segments and gpumem
(`python -m gpumem.torch`, with any specs given), each run in its own process, the configurations
in turn (each round starts one configuration later, so none always runs first), --runs times;
prints each run's JSON line, then a markdown table: device memory in use at the end of each run
(what the allocator holds then: its peak for these workloads), each run's median step or token
time and the median of those, and whether every configuration computed the same losses or tokens.

    python python/tests/gpu/torch_table.py [--runs 2] [--workloads train,checkpoint,moe,generate,alloc]
        [--gpumem vmm_pool:peers=all --gpumem vmm_pool:peers=all,busy_growth=0]

PYTHONPATH must find the gpumem package. Exits 1 when a run failed or results differ."""

import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
WORKLOADS = {  # name -> script and arguments
    "train": ["torch_train_bench.py", "--steps", "20"],
    "checkpoint": ["torch_train_bench.py", "--steps", "20", "--model", "checkpoint"],
    "moe": ["torch_train_bench.py", "--steps", "20", "--model", "moe"],
    "generate": ["torch_generate_bench.py", "--tokens", "192"],
    "alloc": ["torch_alloc_bench.py"],
}
METRICS = ("median_step_ms", "median_token_ms", "median_pair_us")  # the first one a run reports


def configurations(gpumem_specs: list) -> list:
    """(name, python arguments before the script, extra environment)."""
    out = [("PyTorch's allocator", [], {}),
           ("PyTorch's allocator, expandable segments", [],
            {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"})]
    for spec in gpumem_specs:
        out.append((f"gpumem `{spec}`", ["-m", "gpumem.torch"], {"GPUMEM_TORCH_ALLOC": spec}))
    return out


def run(workload: str, config: tuple, timeout: float) -> dict:
    name, before, extra = config
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTORCH_CUDA_ALLOC_CONF", "GPUMEM_TORCH_ALLOC")}
    env.update(extra)
    script, *args = WORKLOADS[workload]
    cmd = [sys.executable, *before, os.path.join(HERE, script), *args]
    try:
        r = subprocess.run(cmd, env=env, cwd=HERE, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"workload": workload, "config": name, "error": f"timed out after {timeout} s"}
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
    if r.returncode != 0 or not lines:
        return {"workload": workload, "config": name,
                "error": f"exit {r.returncode}: {r.stderr.strip()[-400:]}"}
    out = json.loads(lines[-1])
    out.update({"workload": workload, "config": name})
    return out


def result_key(r: dict):
    return r.get("losses") or r.get("tokens_sha256")


def metric(r: dict):
    return next((r[m] for m in METRICS if m in r), None)


def table(results: list, configs: list, workloads: list) -> str:
    rows = ["| workload | allocator | device used (MiB) | median step / token (ms), allocation (us) "
            "| median of runs |",
            "| --- | --- | --- | --- | --- |"]
    for w in workloads:
        for name, _, _ in configs:
            rs = [r for r in results if r["workload"] == w and r["config"] == name]
            used = ", ".join(f"{r['device_used_mib']:,.1f}" if "error" not in r else "failed"
                             for r in rs)
            ms = ", ".join(str(metric(r)) if "error" not in r else "failed" for r in rs)
            ok = [metric(r) for r in rs if "error" not in r]
            mid = f"{statistics.median(ok):.2f}" if ok else "failed"
            rows.append(f"| {w} | {name} | {used} | {ms} | {mid} |")
    return "\n".join(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--gpumem", action="append", help="a gpumem spec (repeatable; default: "
                    "vmm_pool:peers=all)")
    ap.add_argument("--timeout", type=float, default=120)
    args = ap.parse_args()
    workloads = [w for w in args.workloads.split(",") if w]
    for w in workloads:
        if w not in WORKLOADS:
            sys.exit(f"unknown workload {w!r}; choose from {', '.join(WORKLOADS)}")
    configs = configurations(args.gpumem or ["vmm_pool:peers=all"])
    results = []
    for i in range(args.runs):
        for w in workloads:
            for c in configs[i % len(configs):] + configs[:i % len(configs)]:
                r = run(w, c, args.timeout)
                print(json.dumps(r), flush=True)
                results.append(r)
    print()
    print(table(results, configs, workloads))
    failed = [r for r in results if "error" in r]
    same = all(len({json.dumps(result_key(r)) for r in results
                    if r["workload"] == w and "error" not in r}) <= 1 for w in workloads)
    print(f"\nruns failed: {len(failed)}; same losses / tokens under every allocator: "
          f"{'yes' if same else 'no'}")
    sys.exit(1 if failed or not same else 0)


if __name__ == "__main__":
    main()
