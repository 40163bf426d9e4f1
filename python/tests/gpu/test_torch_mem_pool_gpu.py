"""gpumem.torch.mem_pool on a GPU, with PyTorch's own allocator for the rest of the process:
tensors made under torch.cuda.use_mem_pool land in segments gpumem gave (PyTorch's snapshot shows
them in the pool), other tensors do not, two pools with different specs live side by side, and the
segments go back to gpumem once the pool is gone; and mem_pool_bench.py, small, under each of its
configurations.

Runs in a subprocess. Skips without a GPU or without PyTorch."""

import json
import os
import subprocess
import sys
import textwrap

from torch_gpu_support import HERE, NEEDS_GPU, NEEDS_TORCH, NO_MULTICAST, run_for_json

pytestmark = [NEEDS_GPU, NEEDS_TORCH]

CODE = textwrap.dedent("""
    import gc, json, torch
    import gpumem.torch as gt

    MiB = 1 << 20
    lib = gt._library()

    def segments_of(pool_id):
        return [(s["address"], s["total_size"]) for s in torch.cuda.memory_snapshot()
                if tuple(s.get("segment_pool_id", (0, 0))) == tuple(pool_id)]

    def inside(p, segs):
        return any(a <= p < a + n for a, n in segs)

    pool = gt.mem_pool()                      # vmm_pool:peers=all
    lean = gt.mem_pool("pool:initial=64MiB")  # a second pool, another spec
    x = torch.randn(1000, device="cuda")      # PyTorch's own allocator
    with torch.cuda.use_mem_pool(pool):
        a = torch.empty(100 * MiB, dtype=torch.uint8, device="cuda")
        b = torch.ones(3000, 1000, device="cuda")
    with torch.cuda.use_mem_pool(lean):
        c = torch.full((1000,), 2.0, device="cuda")
    torch.cuda.synchronize()
    segs, lean_segs = segments_of(pool.id), segments_of(lean.id)
    stats = gt.mem_pool_stats(pool)
    result = {
        "stats": stats, "lean_stats": gt.mem_pool_stats(lean),
        "snapshot_bytes": sum(n for _, n in segs),
        "a_in": inside(a.data_ptr(), segs), "b_in": inside(b.data_ptr(), segs),
        "c_in_lean": inside(c.data_ptr(), lean_segs), "x_in": inside(x.data_ptr(), segs),
        "values_ok": bool((b == 1).all()) and bool((c == 2).all()),
        "reserved": torch.cuda.memory_stats()["reserved_bytes.all.current"],
    }
    slot = gt._pool_of[id(pool)]
    del a, b
    del pool
    gc.collect()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    out = (__import__("ctypes").c_ulonglong * 5)()
    lib.gpumem_torch_pool_stats(slot, out, 5)
    result["segments_after_pool_gone"] = out[0]
    gt._close_finished()
    result["slot_closed"] = slot not in gt._open_slots
    print("RESULT " + json.dumps(result), flush=True)
""")


def test_a_mem_pool_serves_its_region_beside_pytorchs_allocator():
    r = run_for_json(["-c", CODE])
    print(r)
    assert r["a_in"] and r["b_in"] and r["c_in_lean"] and not r["x_in"], r
    assert r["values_ok"]
    s = r["stats"]
    assert s["segments"] >= 1 and s["failures"] == 0, s
    # PyTorch's snapshot of the pool shows exactly the segments gpumem handed out
    assert r["snapshot_bytes"] == s["segment_bytes"] >= 100 * (1 << 20) + 12_000_000, r
    assert s["held_bytes"] >= s["segment_bytes"], s
    assert r["lean_stats"]["segments"] >= 1, r
    assert r["segments_after_pool_gone"] == 0 and r["slot_closed"], r


def test_the_mem_pool_bench_measures_each_configuration():
    # mem_pool_bench.py, small: a KV cache of at most 1 GiB and two training steps of a 2-layer
    # tiny GPT, each configuration in its own process. The region's live bytes are exactly the
    # schedule's, its blocks lie in the pool, and the region holds at least what is live.
    out = subprocess.run([sys.executable, "mem_pool_bench.py", "--kv-gib", "1", "--kv-steps",
                          "150", "--train-steps", "2", "--layers", "2"], capture_output=True,
                         text=True, timeout=400, cwd=HERE, env=dict(os.environ, **NO_MULTICAST))
    lines = [json.loads(x) for x in out.stdout.splitlines() if x.startswith('{"bench"')]
    print(out.stdout)
    assert out.returncode == 0 and len(lines) == 8, out.stdout + out.stderr[-3000:]
    for r in lines:
        assert "error" not in r, r
        if r["config"] == "torch_expandable" and r["used_over_live"] is None:
            assert r["status"], r  # PyTorch refused or ignored expandable segments: said so
            continue
        assert r["used_over_live"] >= 0.99 and r["pool_reserved_peak_bytes"] > 0, r
        if r["workload"] == "kv":
            assert r["peak_live_bytes"] == r["schedule_peak_bytes"], r
            assert r["blocks_outside_pool"] == 0 and not r["weights_in_pool"], r
        else:
            assert r["peak_live_bytes"] > 0 and len(r["losses"]) == 2, r
        if r["config"] == "gpumem":
            assert r["gpumem_held_peak_bytes"] >= r["pool_reserved_peak_bytes"], r
        if r["config"] == "gpumem_paged":  # pages of live blocks, not whole segments
            assert r["gpumem_held_peak_bytes"] <= r["pool_reserved_peak_bytes"], r
            assert r["gpumem_pool_stats"]["failures"] == 0, r
    train = [r["losses"] for r in lines if r["workload"] == "train" and "losses" in r]
    assert all(x == train[0] for x in train), train  # the same steps under every configuration


NO_SPLIT = textwrap.dedent("""
    import json, torch
    import gpumem.torch as gt

    def segment_of(pool_id, p):
        for s in torch.cuda.memory_snapshot():
            if tuple(s.get("segment_pool_id", (0, 0))) == tuple(pool_id) and \\
                    s["address"] <= p < s["address"] + s["total_size"]:
                return s["address"]
        return None

    out = {}
    for no_split in (False, True):
        pool = gt.mem_pool(no_split=no_split)
        with torch.cuda.use_mem_pool(pool):
            a = torch.ones(1000, device="cuda")
            b = torch.ones(1000, device="cuda")
        out[str(no_split)] = {"same_segment": segment_of(pool.id, a.data_ptr()) ==
                              segment_of(pool.id, b.data_ptr()),
                              "segments": gt.mem_pool_stats(pool)["segments"],
                              "sum": float((a + b).sum())}
        del a, b
    print("RESULT " + json.dumps(out), flush=True)
""")


def test_a_no_split_mem_pool_gives_each_tensor_a_segment_of_its_own():
    # PyTorch's own switch, passed on by mem_pool(no_split=True): two small tensors share a
    # segment in a plain pool and get one each in a no-split pool
    r = run_for_json(["-c", NO_SPLIT])
    print(r)
    assert r["False"]["same_segment"] and r["False"]["segments"] == 1, r
    assert not r["True"]["same_segment"] and r["True"]["segments"] == 2, r
    assert r["False"]["sum"] == r["True"]["sum"] == 2000.0


PAGED = textwrap.dedent("""
    import json, random, torch
    import gpumem.torch as gt

    MiB = 1 << 20
    pool = gt.mem_pool(paged=True, slack=0.0)   # every free page moves when a new one is needed
    rng = random.Random(5)
    live, peak_live, peak_held, most, checks, bad = {}, 0, 0, 0, 0, 0
    stream = torch.cuda.Stream()
    for step in range(400):
        with torch.cuda.use_mem_pool(pool):
            if len(live) < 6 or rng.random() < 0.55:
                n = rng.choice((3 * MiB + 4096, 5 * MiB, 9 * MiB, 17 * MiB, 600 * 1024, 40 * MiB))
                value = step % 251
                if rng.random() < 0.3:          # some tensors written on another stream
                    with torch.cuda.stream(stream):
                        t = torch.full((n,), value, dtype=torch.uint8, device="cuda")
                    torch.cuda.current_stream().wait_stream(stream)
                    t.record_stream(stream)
                else:
                    t = torch.full((n,), value, dtype=torch.uint8, device="cuda")
                live[step] = (t, value)
            else:
                del live[rng.choice(sorted(live))]
        if step % 20 == 0:                      # every live tensor still holds its values
            for t, value in live.values():
                checks += 1
                bad += int(not bool((t == value).all()))
        s = gt.mem_pool_stats(pool)
        peak_held = max(peak_held, s["held_bytes"])
        peak_live = max(peak_live, sum(t.numel() for t, _ in live.values()))
        most = max(most, len(live))
    torch.cuda.synchronize()
    for t, value in live.values():
        checks += 1
        bad += int(not bool((t == value).all()))
    s = gt.mem_pool_stats(pool)
    reserved = sum(x["total_size"] for x in torch.cuda.memory_snapshot()
                   if tuple(x.get("segment_pool_id", (0, 0))) == tuple(pool.id))
    del t
    live.clear()
    torch.cuda.synchronize()
    with torch.cuda.use_mem_pool(pool):   # PyTorch completes the frees of record_stream'd tensors
        torch.empty(1, device="cuda")     # at its next allocation
    gt.mem_pool_trim(pool)
    after_trim = gt.mem_pool_stats(pool)["held_bytes"]
    print("RESULT " + json.dumps({"stats": s, "peak_live": peak_live, "peak_held": peak_held,
                                  "reserved": reserved, "checks": checks, "bad": bad, "most": most,
                                  "after_trim": after_trim}), flush=True)
""")


def test_a_paged_mem_pool_keeps_every_tensor_whole_while_its_pages_move():
    # mem_pool(paged=True, slack=0): tensors of changing sizes come and go (some written on a
    # second stream); every free page moves where a new block needs one. Every live tensor keeps
    # its values; the device holds at most the peak of live pages (plus one page per tensor's
    # edges), far less than the segments PyTorch holds; a trim leaves nothing backed.
    r = run_for_json(["-c", PAGED], timeout=600)
    print(r)
    s = r["stats"]
    assert r["checks"] > 100 and r["bad"] == 0, r
    assert s["pages_moved"] > 0 and s["failures"] == 0, s
    page = s["page_bytes"]
    assert r["peak_held"] <= s["peak_live_pages"] * page, r
    assert r["peak_held"] <= r["peak_live"] + 2 * page * r["most"], r  # two edge pages a tensor
    assert r["reserved"] > r["peak_held"], r
    assert r["after_trim"] == 0, r
