"""One GPU check per process (allocators are process-wide): run by test_gpu.py, or by hand:

    python3 python/tests/gpu/gpu_worker.py train torch|gpumem_pool|gpumem_async
    python3 python/tests/gpu/gpu_worker.py cupy | oom | too_late

Each prints one line ``RESULT {json}`` at the end.
"""

import json
import os
import statistics as stats_mod
import sys
import time

SEED = 1234
STEPS = 20
BATCH, SEQ = 16, 256


def result(**kw):
    print("RESULT " + json.dumps(kw), flush=True)


def train(allocator: str):
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    import torch

    stats = reserved = None
    if allocator != "torch":
        import gpumem
        import gpumem.torch

        # Built explicitly to read both layers: statistics (allocated) over the pool (reserved).
        if allocator == "gpumem_pool":
            pool = gpumem.PoolMemoryResource(gpumem.CudaMemoryResource(), 1 << 30)
            reserved = lambda: pool.pool_size  # noqa: E731
        else:
            pool = gpumem.CudaAsyncMemoryResource(initial_pool_size=1 << 30)
            reserved = lambda: pool.pool.reserved_mem_high  # noqa: E731
        stats = gpumem.torch.use(gpumem.StatisticsResourceAdaptor(pool))
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(SEED)
    torch.use_deterministic_algorithms(True, warn_only=True)
    config = GPT2Config(vocab_size=8192, n_positions=SEQ, n_embd=512, n_layer=6, n_head=8,
                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                        attn_implementation="eager")
    try:
        config._attn_implementation = "eager"  # deterministic attention backward
    except (AttributeError, ValueError):
        pass
    model = GPT2LMHeadModel(config).cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
    gen = torch.Generator().manual_seed(SEED)
    batches = [torch.randint(0, config.vocab_size, (BATCH, SEQ), generator=gen) for _ in range(STEPS)]
    losses, times = [], []
    for tokens in batches:
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        tokens = tokens.cuda()
        loss = model(input_ids=tokens, labels=tokens).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.item())
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    free, total = torch.cuda.mem_get_info()
    out = dict(allocator=allocator, losses=losses, step_ms=1e3 * stats_mod.median(times[3:]),
               first_step_ms=1e3 * times[0], device_used_bytes=total - free)
    if stats is None:
        out.update(peak_allocated=torch.cuda.max_memory_allocated(),
                   peak_reserved=torch.cuda.max_memory_reserved())
    else:
        out.update(peak_allocated=stats.get_bytes_counter().peak,
                   allocations=stats.get_allocations_counter().total,
                   peak_reserved=reserved())
    result(**out)


def cupy_check():
    import cupy
    import numpy as np

    import gpumem
    import gpumem.cupy

    def compute():
        rs = cupy.random.RandomState(SEED)
        a = rs.standard_normal((512, 512), dtype=cupy.float32)
        b = rs.standard_normal((512, 512), dtype=cupy.float32)
        c = cupy.tanh(a @ b) + cupy.cumsum(a, axis=1)
        return cupy.asnumpy(c), float(cupy.asnumpy(c.sum()))

    with cupy.cuda.Stream() as s:
        ref, ref_sum = compute()
        s.synchronize()
    seen_streams = []
    pool = gpumem.PoolMemoryResource(gpumem.CudaMemoryResource(), 64 << 20)

    def alloc(n, stream):
        seen_streams.append(stream)
        return pool.allocate(n, stream)

    recorder = gpumem.CallbackMemoryResource(alloc, lambda p, n, st: pool.deallocate(p, n, st))
    stats = gpumem.StatisticsResourceAdaptor(recorder)
    gpumem.cupy.use(stats)
    with cupy.cuda.Stream() as s:
        got, got_sum = compute()
        s.synchronize()
        stream_ptr = s.ptr
    cupy.cuda.set_allocator(cupy.cuda.MemoryPool().malloc)
    result(equal=bool(np.array_equal(ref, got)), ref_sum=ref_sum, got_sum=got_sum,
           allocations=stats.get_allocations_counter().total,
           peak_bytes=stats.get_bytes_counter().peak,
           on_current_stream=stream_ptr in seen_streams)


def oom_check():
    import torch

    import gpumem.torch

    gpumem.torch.use("limiting:limit=256MiB>pool:initial=64MiB>cuda")
    small = torch.ones(1 << 20, device="cuda")  # 4 MiB
    error_type = message = None
    try:
        with gpumem.torch.out_of_memory_errors():  # torch.OutOfMemoryError in every build
            torch.empty(512 << 20, dtype=torch.uint8, device="cuda")
    except (torch.OutOfMemoryError, MemoryError, RuntimeError) as e:
        error_type, message = type(e).__name__, str(e)
    after = torch.ones(1 << 20, device="cuda") + small  # still usable after the failure
    result(error_type=error_type, message=message[:600] if message else None,
           torch_oom=error_type == "OutOfMemoryError",
           c10=gpumem.torch.raises_torch_out_of_memory(),
           usable_after=float(after.sum().item()), current_bytes=gpumem.torch.memory_allocated(),
           num_ooms=gpumem.torch.memory_stats()["num_ooms"])


def too_late_check():
    import torch

    import gpumem.torch

    torch.zeros(1, device="cuda")
    try:
        gpumem.torch.use("pool>cuda")
        result(raised=False, message=None)
    except RuntimeError as e:
        result(raised=True, message=str(e))


if __name__ == "__main__":
    what = sys.argv[1]
    if what == "train":
        train(sys.argv[2])
    else:
        {"cupy": cupy_check, "oom": oom_check, "too_late": too_late_check}[what]()
