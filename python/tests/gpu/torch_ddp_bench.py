"""GPT-2-small training with DistributedDataParallel over NCCL, one process per GPU (torchrun),
under whichever allocator PyTorch has; rank 0 prints one JSON line: the mean loss of each step over
the ranks, each rank's device memory used at its peak and peak reserved, the median step time.

    torchrun --nproc-per-node 2 python/tests/gpu/torch_ddp_bench.py                  # PyTorch's
    torchrun --nproc-per-node 2 -m gpumem.torch python/tests/gpu/torch_ddp_bench.py  # gpumem's
    torchrun --nproc-per-node 2 python/tests/gpu/torch_ddp_bench.py --bucket-pool    # buckets

Without --bucket-pool the script never mentions gpumem: `-m gpumem.torch` (which runs the script
after gpumem.torch.use()) switches the allocator. With --bucket-pool, DDP's gradient buckets live
in a gpumem memory pool registered with NCCL (gpumem.torch.mem_pool, --bucket-spec): DDP is built
inside torch.cuda.use_mem_pool with gradient_as_bucket_view=True, so its Reducer allocates the
buckets there (and again when it rebuilds them after the first step, which the script does inside
the pool too, then empties the caches, so that the pool may keep little more than the buckets),
the pool is registered with NCCL (--register) and the rest of the training runs on the process's
allocator. The JSON line then says whether every bucket lies in the pool's segments.
Same seeds, same batches (each rank its own): the losses must be equal in every mode."""

import argparse
import json
import os
import statistics

# No NVLink multicast objects in this process (NCCL's NVLS, PyTorch's symmetric memory).
for key, value in {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
                   "NVSHMEM_DISABLE_NVLS": "1"}.items():
    os.environ.setdefault(key, value)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.nn.parallel import DistributedDataParallel  # noqa: E402

from tiny_gpt import (TinyGPT, allocator_counts, allocator_name, device_used_bytes,  # noqa: E402
                      setup_determinism, token_batches, train_step)

BUCKET_SPEC = "vmm_pool:peers=all,shareable=1,rdma=1"  # handles NCCL can register


def backend():
    """The default process group's NCCL backend (ProcessGroupNCCL)."""
    return dist.distributed_c10d._get_default_group()._get_backend(torch.device("cuda"))


class BucketPool:
    """A gpumem memory pool for DDP's gradient buckets, registered with NCCL."""

    def __init__(self, spec: str, register: str):
        import gpumem.torch as gt

        self.gt, self.register, self.registration = gt, register, None
        self.pool = gt.mem_pool(spec)
        self.spec = gt.mem_pool_spec(self.pool)
        self.register_error, self.buckets, self.grad_bytes = "", {}, 0

    def build(self, module, device_ids):
        """DDP over `module`, its buckets allocated in the pool."""
        with torch.cuda.use_mem_pool(self.pool):
            model = DistributedDataParallel(module, device_ids=device_ids,
                                            gradient_as_bucket_view=True)
        self.trim()  # the pool also cached the buffers of DDP's first broadcast of the weights
        return model

    def trim(self) -> None:
        """Gives the pool's unused segments back to the device (and so to NCCL's registration)."""
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        self.gt.mem_pool_trim(self.pool)

    def rebuild(self, model) -> bool:
        """Rebuilds the Reducer's buckets inside the pool now (in the order the first backward
        produced the gradients), where DDP would rebuild them at the next forward, outside it."""
        with torch.cuda.use_mem_pool(self.pool):
            rebuilt = bool(model.reducer._rebuild_buckets())
        if rebuilt:
            model._has_rebuilt_buckets = True
            self.trim()  # the first buckets, now unused
        return rebuilt

    def register_with_nccl(self) -> None:
        """`follow`: gpumem.torch.nccl_registration (keeps up with the pool's memory); `torch`:
        ProcessGroupNCCL.register_mem_pool (the segments the pool holds now); `none`."""
        try:
            if self.register == "follow":
                self.registration = self.gt.nccl_registration(dist.group.WORLD, self.pool)
            elif self.register == "torch":
                backend().register_mem_pool(self.pool)
        except Exception as e:  # noqa: BLE001  (reported in the JSON line)
            self.register_error = f"{type(e).__name__}: {e}"

    def record_buckets(self, model) -> None:
        """Each bucket's (address, bytes): with gradient_as_bucket_view every gradient is a view
        of its bucket, so the gradients' storages are the buckets."""
        self.buckets = {}
        self.grad_bytes = sum(p.grad.nbytes for p in model.parameters() if p.grad is not None)
        for p in model.parameters():
            if p.grad is not None:
                storage = p.grad.untyped_storage()
                self.buckets[storage.data_ptr()] = storage.nbytes()

    def segments(self) -> list:
        pool_id = tuple(self.pool.id)
        return [(s["address"], s["total_size"]) for s in torch.cuda.memory_snapshot()
                if tuple(s.get("segment_pool_id", (0, 0))) == pool_id]

    def report(self) -> dict:
        segments = self.segments()
        inside = {p: any(a <= p and p + n <= a + size for a, size in segments)
                  for p, n in self.buckets.items()}
        out = {"spec": self.spec, "register": self.register,
               "buckets": len(self.buckets), "bucket_bytes": sum(self.buckets.values()),
               "grad_bytes": self.grad_bytes,
               "buckets_in_pool": bool(self.buckets) and all(inside.values()),
               "bucket_bytes_in_pool": sum(n for p, n in self.buckets.items() if inside[p]),
               "pool_segments": len(segments), "pool_segment_bytes": sum(n for _, n in segments),
               "pool": self.gt.mem_pool_stats(self.pool)}
        if self.register_error:
            out["register_error"] = self.register_error
        if self.registration is not None:
            r = self.registration
            out["registration"] = {"unit": r.unit, "registrations": r.registrations(),
                                   "registered_bytes": r.registered_bytes,
                                   "registered": r.registered, "deregistered": r.deregistered,
                                   "failures": r.failures, "last_failure": r.last_failure}
        return out

    def close(self) -> None:
        """Before the process group goes."""
        if self.registration is not None:
            self.registration.close()
        elif self.register == "torch" and not self.register_error:
            try:
                backend().deregister_mem_pool(self.pool)
            except Exception:  # noqa: BLE001  (nothing to do about it at the end)
                pass


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--bucket-pool", action="store_true",
                    help="DDP's gradient buckets in a gpumem memory pool registered with NCCL")
    ap.add_argument("--bucket-spec", default=BUCKET_SPEC,
                    help=f"the bucket pool's gpumem spec (default {BUCKET_SPEC})")
    ap.add_argument("--register", choices=["follow", "torch", "none"], default="follow",
                    help="how the bucket pool is registered with NCCL: follow = "
                         "gpumem.torch.nccl_registration (default), torch = "
                         "ProcessGroupNCCL.register_mem_pool after the buckets are rebuilt, "
                         "none = not registered")
    args = ap.parse_args()

    local = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    rank, world = dist.get_rank(), dist.get_world_size()

    setup_determinism(args.seed)  # the same initial weights on every rank
    module = TinyGPT(layers=args.layers).cuda()
    buckets = BucketPool(args.bucket_spec, args.register) if args.bucket_pool else None
    if buckets is None:
        model = DistributedDataParallel(module, device_ids=[local])
    else:
        model = buckets.build(module, [local])
        if args.register == "follow":  # follows the rebuild below too
            buckets.register_with_nccl()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=False, foreach=True)
    losses, times, peak_used, rebuilt = [], [], 0, None
    batches = token_batches(args.steps, args.seed + 1 + rank)
    # each rank its own batches; backward all-reduces the gradients over NCCL, bucket by bucket
    for i, tokens in enumerate(batches):
        last = buckets is not None and i == len(batches) - 1
        loss, ms = train_step(model, optimizer, tokens,
                              (lambda: buckets.record_buckets(model)) if last else None)
        losses.append(loss)
        times.append(ms)
        peak_used = max(peak_used, device_used_bytes())
        if i == 2:  # the steps timed for the median start after this one
            counts_before = allocator_counts()
        if buckets is not None and i == 0:
            rebuilt = buckets.rebuild(model)
            if args.register == "torch":  # the segments the pool holds now, buckets included
                buckets.register_with_nccl()

    mean = torch.tensor(losses, dtype=torch.float64, device="cuda")
    dist.all_reduce(mean)
    mine = {"rank": rank, "device_used_mib": round(peak_used / 2**20, 1),
            "peak_reserved_mib": round(torch.cuda.max_memory_reserved() / 2**20, 1),
            "median_step_ms": round(statistics.median(times[3:] or times), 3),
            "step_ms": [round(t, 2) for t in times]}
    if len(times) > 3:  # what the allocator did during the timed steps
        after = allocator_counts()
        mine["timed_steps"] = {k: after[k] - counts_before[k] for k in after}
    if buckets is not None:
        mine["bucket_pool"] = {**buckets.report(), "rebuilt_in_pool": rebuilt}
        buckets.close()
    ranks = [None] * world
    dist.all_gather_object(ranks, mine)
    if rank == 0:
        line = {
            "script": "ddp", "allocator": allocator_name(), "world": world, "steps": args.steps,
            "layers": args.layers,
            "mean_losses": [round(x / world, 6) for x in mean.tolist()],
            "ranks": ranks,
            "max_device_used_mib": max(r["device_used_mib"] for r in ranks),
            "median_step_ms": round(statistics.median(r["median_step_ms"] for r in ranks), 3),
            "nccl": ".".join(map(str, torch.cuda.nccl.version())),
        }
        if buckets is not None:
            pools = [r["bucket_pool"] for r in ranks]
            line["bucket_pool"] = args.bucket_spec
            line["buckets_in_pool"] = all(p["buckets_in_pool"] for p in pools)
            line["bucket_bytes_in_pool"] = [p["bucket_bytes_in_pool"] for p in pools]
        print(json.dumps(line), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
