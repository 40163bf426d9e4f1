"""How much device memory a PyTorch memory pool (torch.cuda.MemPool) region holds against the bytes
its tensors use at their peak, with the pool's segments from gpumem (gpumem.torch.mem_pool(), a
vmm_pool; and mem_pool(paged=True), pages backed as PyTorch's blocks live in them), from PyTorch's
own allocator, and from PyTorch's allocator with expandable segments.

    python python/tests/gpu/mem_pool_bench.py [--configs gpumem,gpumem_paged,torch,torch_expandable]
                                              [--workloads kv,train] [--seed 1234] [--slack 0.02]

Each configuration and workload runs in a process of its own (PyTorch reads
PYTORCH_CUDA_ALLOC_CONF once per process). Workloads:

  kv     an inference KV cache: requests come and go, each growing by blocks of 2 to 64 MiB
         (sizes and timing from a seeded random generator), at most --kv-gib GiB live; the oldest
         request still running is kept when the cache is full, the newest others are preempted.
  train  the tiny GPT (tiny_gpt.py, GPT-2 small by default) trained with bf16 autocast; the
         forward pass of each step runs inside the pool (its activations are the region), while
         the weights, gradients, optimizer state and backward pass stay on PyTorch's allocator.

Before the region starts, everything else the process holds is allocated (and, for training, a
few warm-up steps run outside the pool), and the device memory in use (cudaMemGetInfo) is the
baseline. After every step: device memory used above the baseline, minus what PyTorch's own
segments outside the pool grew by since then, is what the region holds on the device; the peak of
that over the peak of the region's live bytes is `used_over_live`. The pool's segments
(`pool_reserved`, from torch.cuda.memory_snapshot) and, for gpumem, what its stack maps
(`gpumem_held`) are reported beside it, and the median time of a step (`median_step_ms`: a KV
step's allocations and frees, or a training step, each ended by a device synchronize).

Prints one JSON line per configuration and workload ({"bench": "mem_pool", ...}), then a markdown
table. Exits 1 when a run failed (its line then has "error"). Under a minute on an H100."""

import argparse
import json
import os
import random
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
CONFIGS = ("gpumem", "gpumem_paged", "torch", "torch_expandable")
WORKLOADS = ("kv", "train")
MiB = 1 << 20

# No NVLink multicast objects in any process this starts (NCCL's NVLS, PyTorch's symmetric memory).
NO_MULTICAST = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
                "NVSHMEM_DISABLE_NVLS": "1"}


# -- the KV cache's schedule (plain Python: the same on every configuration) -------------------

def kv_schedule(seed: int, steps: int, cap_bytes: int, min_mib: int = 2, max_mib: int = 64) -> list:
    """`steps` lists of events, each ("alloc", block, nbytes) or ("free", block): requests arrive
    (0 to 2 a step), grow by one block of min_mib..max_mib MiB (multiples of 256 KiB) with
    probability 1/2 a step and finish with probability 1/12; a block that would take the live
    bytes over `cap_bytes` first preempts the newest other requests (their blocks freed), and is
    skipped when even that is not enough. Every block allocated is freed by the last step."""
    rng = random.Random(seed)
    requests: dict = {}  # request -> [(block, nbytes)], in order of arrival
    live, next_block, next_request, out = 0, 0, 0, []

    def finish(request, events):
        nonlocal live
        for block, nbytes in requests.pop(request):
            events.append(("free", block))
            live -= nbytes

    for _ in range(steps):
        events: list = []
        for request in [r for r in requests if rng.random() < 1 / 12]:
            finish(request, events)
        for _ in range(rng.choice((0, 0, 1, 1, 2))):
            requests[next_request] = []
            next_request += 1
        for request in list(requests):
            if request not in requests or rng.random() >= 0.5:
                continue
            nbytes = rng.randint(min_mib * 4, max_mib * 4) * (256 << 10)
            while live + nbytes > cap_bytes and len(requests) > 1:
                newest = max(r for r in requests if r != request)
                if newest < request:  # only older requests left: keep them, skip this block
                    break
                finish(newest, events)
            if live + nbytes > cap_bytes:
                continue
            requests[request].append((next_block, nbytes))
            events.append(("alloc", next_block, nbytes))
            next_block += 1
            live += nbytes
        out.append(events)
    last: list = []
    for request in list(requests):
        finish(request, last)
    out.append(last)
    return out


def median(values: list):
    return round(sorted(values)[len(values) // 2], 3) if values else None


def schedule_peak(schedule: list) -> int:
    """The most bytes live at once in `schedule`."""
    sizes, live, peak = {}, 0, 0
    for events in schedule:
        for e in events:
            if e[0] == "alloc":
                sizes[e[1]] = e[2]
                live += e[2]
                peak = max(peak, live)
            else:
                live -= sizes.pop(e[1])
    return peak


# -- the parent: one child per configuration and workload, then the table ---------------------

def child_env(config: str) -> dict:
    env = dict(os.environ, **NO_MULTICAST)
    env.pop("GPUMEM_TORCH_ALLOC", None)  # PyTorch's allocator for the rest of the process
    env.pop("PYTORCH_CUDA_ALLOC_CONF", None)  # PyTorch's defaults, but for expandable segments
    if config == "torch_expandable":
        env["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
    return env


def run_child(config: str, workload: str, args, timeout: float) -> dict:
    cmd = [sys.executable, os.path.abspath(__file__), "--child", config, "--workload", workload,
           "--seed", str(args.seed), "--kv-gib", str(args.kv_gib), "--kv-steps",
           str(args.kv_steps), "--train-steps", str(args.train_steps), "--layers",
           str(args.layers), "--slack", str(args.slack)]
    cmd += ["--one-shape"] if args.one_shape else []
    head = {"bench": "mem_pool", "config": config, "workload": workload}
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=child_env(config),
                              timeout=timeout, cwd=HERE, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as e:
        tail = (e.stderr or b"")[-1500:]
        tail = tail.decode(errors="replace") if isinstance(tail, bytes) else tail
        return {**head, "error": f"no result within {timeout:.0f} s", "stderr_tail": tail}
    lines = [x for x in proc.stdout.splitlines() if x.startswith('{"bench"')]
    if lines and (proc.returncode == 0 or '"error"' in lines[-1]):
        return json.loads(lines[-1])
    if proc.returncode != 0 or not lines:
        return {**head, "error": f"the run exited with status {proc.returncode}",
                "stderr_tail": proc.stderr[-1500:]}
    return json.loads(lines[-1])


def cell_mib(value) -> str:
    return "—" if value is None else f"{value / MiB:,.1f}"


def table(results: list) -> str:
    """The markdown table of the runs' JSON objects."""
    rows = ["| workload | pool's segments from | peak live MiB | device used by the region MiB "
            "| used / live | pool reserved MiB | gpumem mapped MiB | median step ms | note |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    names = {"gpumem": "gpumem `vmm_pool`", "gpumem_paged": "gpumem, paged",
             "torch": "PyTorch's allocator",
             "torch_expandable": "PyTorch's allocator, expandable segments"}
    for r in results:
        ratio = r.get("used_over_live")
        note = r.get("error") or r.get("status", "")
        paged = r.get("gpumem_pool_stats", {})
        if "pages_moved" in paged and not note:
            note = (f"{paged['pages_moved']} pages moved ({paged['moves_waited']} waited), "
                    f"{paged['pages_created']} made; "
                    f"{paged['backing_seconds'] + paged['freeing_seconds']:.3f} s following "
                    f"PyTorch")
        step = r.get("median_step_ms")
        rows.append("| {} | {} | {} | {} | {} | {} | {} | {} | {} |".format(
            r["workload"], names.get(r["config"], r["config"]), cell_mib(r.get("peak_live_bytes")),
            cell_mib(r.get("peak_region_used_bytes")),
            "—" if ratio is None else f"{ratio:.3f}", cell_mib(r.get("pool_reserved_peak_bytes")),
            cell_mib(r.get("gpumem_held_peak_bytes")), "—" if step is None else f"{step:.2f}",
            note.replace("|", "/")))
    return "\n".join(rows)


def parent(args) -> int:
    configs = [c for c in args.configs.split(",") if c]
    workloads = [w for w in args.workloads.split(",") if w]
    bad = [c for c in configs if c not in CONFIGS] + [w for w in workloads if w not in WORKLOADS]
    if bad:
        print(f"mem_pool_bench: unknown configuration or workload {bad}; configurations: "
              f"{', '.join(CONFIGS)}; workloads: {', '.join(WORKLOADS)}", file=sys.stderr)
        return 2
    results = []
    for workload in workloads:
        for config in configs:
            r = run_child(config, workload, args, args.timeout)
            print(json.dumps(r), flush=True)
            results.append(r)
    print()
    print(table(results), flush=True)
    return 1 if any("error" in r for r in results) else 0


# -- the child: one configuration, one workload ------------------------------------------------

class Region:
    """The measurements of one pool region: the baseline, then a sample after every step."""

    def __init__(self, torch, pool, gpumem_torch=None):
        self.torch, self.pool, self.gt = torch, pool, gpumem_torch
        torch.cuda.synchronize()
        self.base_used = self.device_used()
        self.base_other = self.segments()[1]
        self.peak_live = self.peak_region = self.peak_above_base = 0
        self.peak_other_growth = self.peak_pool_reserved = self.peak_held = 0
        self.samples = 0

    def device_used(self) -> int:
        free, total = self.torch.cuda.mem_get_info()
        return total - free

    def segments(self) -> tuple:
        """(the pool's segments, bytes of PyTorch's other segments on this device)."""
        device = self.torch.cuda.current_device()
        pool_id = tuple(self.pool.id) if self.pool is not None else None
        mine, other = [], 0
        for s in self.torch.cuda.memory_snapshot():
            if s.get("device", device) != device:
                continue
            if pool_id is not None and tuple(s.get("segment_pool_id", (0, 0))) == pool_id:
                mine.append(s)
            else:
                other += s["total_size"]
        return mine, other

    def pool_live(self) -> int:
        """Bytes of the blocks allocated in the pool's segments now."""
        return sum(b["size"] for s in self.segments()[0] for b in s.get("blocks", [])
                   if b.get("state") == "active_allocated")

    def sample(self, live: int) -> None:
        self.torch.cuda.synchronize()
        used = self.device_used() - self.base_used
        mine, other = self.segments()
        growth = max(0, other - self.base_other)
        self.peak_live = max(self.peak_live, live)
        self.peak_above_base = max(self.peak_above_base, used)
        self.peak_other_growth = max(self.peak_other_growth, growth)
        self.peak_region = max(self.peak_region, used - growth)
        self.peak_pool_reserved = max(self.peak_pool_reserved, sum(s["total_size"] for s in mine))
        if self.gt is not None:
            self.peak_held = max(self.peak_held, self.gt.mem_pool_stats(self.pool)["held_bytes"])
        self.samples += 1

    def inside(self, ptr: int) -> bool:
        return any(s["address"] <= ptr < s["address"] + s["total_size"]
                   for s in self.segments()[0])

    def result(self) -> dict:
        mine, _ = self.segments()
        out = {
            "peak_live_bytes": self.peak_live,
            "peak_region_used_bytes": self.peak_region,
            "used_over_live": (round(self.peak_region / self.peak_live, 4)
                               if self.peak_live else None),
            "peak_used_above_baseline_bytes": self.peak_above_base,
            "other_segments_growth_bytes": self.peak_other_growth,
            "pool_reserved_peak_bytes": self.peak_pool_reserved,
            "pool_reserved_over_live": (round(self.peak_pool_reserved / self.peak_live, 4)
                                        if self.peak_live else None),
            "pool_segments_at_end": len(mine),
            "baseline_used_bytes": self.base_used,
            "samples": self.samples,
        }
        if self.gt is not None:
            out["gpumem_held_peak_bytes"] = self.peak_held
            out["gpumem_pool_stats"] = self.gt.mem_pool_stats(self.pool)
        return out


def make_pool(torch, config: str, args):
    """(the MemPool, gpumem.torch or None)."""
    if config.startswith("gpumem"):
        import gpumem.torch as gt

        if config == "gpumem_paged":
            return gt.mem_pool(paged=True, slack=args.slack), gt
        return gt.mem_pool(), gt  # vmm_pool:peers=all
    return torch.cuda.MemPool(), None


def run_kv(torch, config: str, args) -> tuple:
    schedule = kv_schedule(args.seed, args.kv_steps, int(args.kv_gib * 2**30))
    weights = torch.ones(256 * MiB, dtype=torch.uint8, device="cuda")  # the rest of the process
    scratch = torch.empty(2 * MiB, dtype=torch.uint8, device="cuda").fill_(1)  # kernels loaded
    del scratch
    pool, gt = make_pool(torch, config, args)
    region = Region(torch, pool, gt)
    blocks, live, misplaced, step_ms = {}, 0, 0, []
    for events in schedule:
        start = time.perf_counter()
        step_peak = live  # a step may free (preempt) between its allocations
        with torch.cuda.use_mem_pool(pool):
            for e in events:
                if e[0] == "alloc":
                    t = torch.empty(e[2], dtype=torch.uint8, device="cuda")
                    t[:1].fill_(1)  # written, as a cache block is
                    blocks[e[1]] = t
                    live += e[2]
                    step_peak = max(step_peak, live)
                else:
                    live -= blocks.pop(e[1]).numel()
        torch.cuda.synchronize()
        step_ms.append((time.perf_counter() - start) * 1e3)
        region.sample(step_peak)  # no memory is given back: the device used peaks at a step's end
        if len(blocks) and region.samples % 50 == 1:  # now and then: blocks really in the pool
            misplaced += sum(not region.inside(t.data_ptr()) for t in blocks.values())
    out = region.result()
    out.update(kv_steps=args.kv_steps, kv_cap_bytes=int(args.kv_gib * 2**30),
               schedule_peak_bytes=schedule_peak(schedule), blocks_outside_pool=misplaced,
               weights_in_pool=region.inside(weights.data_ptr()), median_step_ms=median(step_ms))
    return out, region


def run_train(torch, config: str, args) -> tuple:
    from torch.nn import functional as F

    from tiny_gpt import TinyGPT, setup_determinism, token_batches, train_step

    setup_determinism(args.seed)
    model = TinyGPT(layers=args.layers).cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=False, foreach=True)
    batches = token_batches(args.train_steps + 6, args.seed)
    if args.one_shape:  # one shape for every batch: the same tensors step after step
        gen = torch.Generator().manual_seed(args.seed)
        batches = [torch.randint(0, 50257, (8, 513), generator=gen) for _ in batches]
    for tokens in batches[:6]:  # every batch shape once, all on PyTorch's allocator
        train_step(model, optimizer, tokens)
    pool, gt = make_pool(torch, config, args)
    region = Region(torch, pool, gt)
    losses, step_ms = [], []
    for tokens in batches[6:]:
        tokens = tokens.cuda()
        torch.cuda.synchronize()
        start = time.perf_counter()
        start_live = region.pool_live()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        with torch.cuda.use_mem_pool(pool):  # the forward pass: its activations are the region
            with torch.autocast("cuda", dtype=torch.bfloat16):
                logits = model(tokens[:, :-1])
                loss = F.cross_entropy(logits.float().flatten(0, 1), tokens[:, 1:].flatten())
            del logits
        torch.cuda.synchronize()
        # only this thread allocated since the reset, all of it in the pool
        region.sample(start_live + torch.cuda.max_memory_allocated() - before)
        loss.backward()  # on autograd's thread: PyTorch's allocator, frees into the pool
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(round(loss.item(), 6))
        step_ms.append((time.perf_counter() - start) * 1e3)  # the sample's synchronize included
        del loss, tokens
        region.sample(region.pool_live())
    out = region.result()
    out.update(train_steps=args.train_steps, layers=args.layers, losses=losses,
               median_step_ms=median(step_ms))
    return out, region


def expandable_status(torch, config: str, region) -> tuple:
    """(status text, whether the number stands) for the expandable-segments configuration."""
    if config != "torch_expandable":
        return "", True
    pool_id = tuple(region.pool.id)
    segments = torch.cuda.memory_snapshot()
    pool_exp = any(s.get("is_expandable") for s in segments
                   if tuple(s.get("segment_pool_id", (0, 0))) == pool_id)
    other_exp = any(s.get("is_expandable") for s in segments
                    if tuple(s.get("segment_pool_id", (0, 0))) != pool_id)
    if pool_exp:
        return "the pool's segments are expandable", True
    if other_exp:
        return ("expandable segments ignored for the MemPool (PyTorch's other segments are "
                "expandable, the pool's are not)"), False
    return "expandable segments not in effect in this process (no expandable segment)", False


def child(args) -> int:
    config, workload = args.child, args.workload
    head = {"bench": "mem_pool", "config": config, "workload": workload}
    try:
        import torch
    except ImportError as e:
        print(json.dumps({**head, "error": f"PyTorch is not installed for {sys.executable} ({e})"}),
              flush=True)
        return 1
    head = {**head, "torch": torch.__version__,
            "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")}
    if not torch.cuda.is_available():
        print(json.dumps({**head, "error": "PyTorch sees no CUDA device"}), flush=True)
        return 1
    torch.cuda.init()
    head["device"] = torch.cuda.get_device_name()
    t0 = time.perf_counter()
    try:
        run = run_kv if workload == "kv" else run_train
        out, region = run(torch, config, args)
    except Exception as e:  # noqa: BLE001  (reported in the JSON line)
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        text = f"{type(e).__name__}: {first}"[:400]
        if config != "torch_expandable":
            print(json.dumps({**head, "error": text}), flush=True)
            return 1
        # PyTorch refusing a MemPool under expandable segments is a result, not a failure
        print(json.dumps({**head, "status": f"PyTorch failed under expandable segments: {text}",
                          "used_over_live": None}), flush=True)
        return 0
    status, stands = expandable_status(torch, config, region)
    if not stands:
        out["used_over_live"] = None  # a number for plain segments would mislead
    out["seconds"] = round(time.perf_counter() - t0, 2)
    print(json.dumps({**head, **({"status": status} if status else {}), **out}), flush=True)
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description="Device memory of a torch.cuda.MemPool region against its peak live bytes: "
        "segments from gpumem's vmm_pool, PyTorch's allocator, and PyTorch's allocator with "
        "expandable segments (one process each).")
    ap.add_argument("--configs", default=",".join(CONFIGS), help="comma-separated, from "
                    + ", ".join(CONFIGS))
    ap.add_argument("--workloads", default=",".join(WORKLOADS), help="comma-separated, from "
                    + ", ".join(WORKLOADS))
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--kv-gib", type=float, default=3.0, help="KV cache: most GiB live at once")
    ap.add_argument("--kv-steps", type=int, default=400)
    ap.add_argument("--train-steps", type=int, default=6, help="training steps in the region")
    ap.add_argument("--layers", type=int, default=12, help="training: the tiny GPT's layers")
    ap.add_argument("--one-shape", action="store_true",
                    help="train: every batch of one shape (8 x 512) instead of cycling through six")
    ap.add_argument("--slack", type=float, default=0.0,
                    help="gpumem_paged: free pages kept, as a fraction of the peak of live pages")
    ap.add_argument("--timeout", type=float, default=120, help="seconds per run")
    ap.add_argument("--child", choices=CONFIGS, help=argparse.SUPPRESS)
    ap.add_argument("--workload", choices=WORKLOADS, default="kv", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    return child(args) if args.child else parent(args)


if __name__ == "__main__":
    sys.exit(main())
