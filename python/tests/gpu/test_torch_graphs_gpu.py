"""gpumem.torch on a GPU: CUDA graphs (a captured training step replays with the results of eager
execution under PyTorch's allocator, its memory stays the same across replays, its private pool
goes when the graph does) and memory snapshots (a recording of a training loop written as a
snapshot that PyTorch's own torch.cuda._memory_viz reads, with the active-memory timeline of
gpumem's trace).

Each check runs in its own process (PyTorch chooses its allocator once per process). Skips
without a GPU or without PyTorch."""

import importlib.util
import json
import os
import pickle
import subprocess
import sys
import textwrap

import pytest

import gpumem

HERE = os.path.dirname(os.path.abspath(__file__))

pytestmark = [
    pytest.mark.skipif(gpumem.get_num_devices() == 0,
                       reason="needs a CUDA GPU (none visible on this machine)"),
    pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                       reason="needs the Python package 'torch'"),
]


def run(args, timeout=300):
    env = dict(os.environ)
    env.pop("GPUMEM_TORCH_ALLOC", None)
    proc = subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env,
                          timeout=timeout, cwd=HERE)
    lines = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, f"rc {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return json.loads(lines[-1][len("RESULT "):])


@pytest.mark.parametrize("spec", ["vmm_pool:peers=all", "pool"])
def test_a_captured_training_step_replays_like_eager_execution(spec):
    eager = run(["torch_graph_step.py", "--mode", "eager"])
    graph = run(["-m", "gpumem.torch", "--alloc", spec, "torch_graph_step.py", "--mode", "graph"])
    assert len(graph["losses"]) == len(eager["losses"]) == 3 + 8
    for a, b in zip(eager["losses"], graph["losses"]):
        assert a == pytest.approx(b, rel=1e-4, abs=1e-6), (eager["losses"], graph["losses"])
    assert graph["losses"][-1] < graph["losses"][3]  # it trains
    assert eager["params"] == pytest.approx(graph["params"], rel=1e-4, abs=1e-6)
    assert eager["param_sum"] == pytest.approx(graph["param_sum"], rel=1e-5)
    # the memory in use is the same after every replay: replays reuse the graph's memory
    memory = graph["memory"]
    assert len(memory) == 4 and all(m == memory[0] for m in memory), memory
    # what was allocated between replays was never overwritten by them
    assert graph["junk_ok"]
    # one private pool while the graph lives, holding its blocks; none once it is gone
    pools = graph["pools_after_capture"]
    assert len(pools) == 1 and pools[0]["captures"] == 1 and pools[0]["blocks"] > 0, pools
    assert pools[0]["reserved_bytes"] > 0, pools
    # once the graph, its tensors and the cuBLAS workspaces made during the capture are gone
    assert graph["pools_at_end"] == [], (graph["pools_at_end"], graph["left_before_clear"])


def test_the_graph_pool_goes_sooner_than_under_pytorchs_own_allocator():
    """PyTorch's own allocator, the same capture: its private segments outlive the graph until
    the cuBLAS workspaces are cleared too, and stay cached after that until empty_cache (gpumem's
    pool goes at once: the test above)."""
    own = run(["torch_graph_step.py", "--mode", "graph"])
    print("PyTorch's own allocator, private segments: before clearing cuBLAS workspaces",
          own["left_before_clear"], "after", own["torch_private_segments_at_end"],
          "after empty_cache", own["torch_private_segments_after_empty_cache"])
    assert len(own["left_before_clear"]) > 0, own["left_before_clear"]
    assert own["torch_private_segments_after_empty_cache"] == [], own


def test_a_captured_forward_matches_eager_and_other_tensors_keep_their_values():
    r = run(["-c", textwrap.dedent("""
        import json, torch, gpumem.torch as gt
        gt.use("pool")
        torch.manual_seed(0)
        model = torch.nn.Linear(256, 256).cuda()
        static_in = torch.randn(64, 256, device="cuda")
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                model(static_in)
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            static_out = model(static_in).relu() * 2
        ok = []
        for i in range(5):
            static_in.copy_(torch.randn(64, 256, device="cuda"))
            other = torch.full((64, 256), 7.0, device="cuda")
            g.replay()
            expected = model(static_in).relu() * 2
            ok.append(bool(torch.allclose(static_out, expected)) and bool((other == 7).all()))
        print("RESULT " + json.dumps({"ok": ok, "pools": len(gt.graph_pools())}))
    """)])
    assert r["ok"] == [True] * 5 and r["pools"] == 1, r


def test_a_recorded_training_loop_opens_in_pytorchs_memory_viz(tmp_path):
    trace, snap = tmp_path / "train.csv", tmp_path / "train.pickle"
    code = textwrap.dedent(f"""
        import json, torch, gpumem.torch as gt
        gt.use("vmm_pool")
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(128, 512), torch.nn.ReLU(),
                                    torch.nn.Linear(512, 10)).cuda()
        opt = torch.optim.Adam(model.parameters())
        torch.cuda.synchronize()
        gt.reset_peak_memory_stats()
        start = gt.memory_allocated()
        with gt.record({str(trace)!r}, frames=True, snapshot={str(snap)!r}):
            for _ in range(4):
                x = torch.randn(64, 128, device="cuda")
                loss = model(x).logsumexp(1).mean()
                loss.backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
            torch.cuda.synchronize()
        print("RESULT " + json.dumps({{"start": start, "peak": gt.max_memory_allocated(),
                                       "end": gt.memory_allocated(),
                                       "device": torch.cuda.current_device()}}))
    """)
    r = run(["-c", code])
    with open(snap, "rb") as f:
        snapshot = pickle.load(f)
    from torch.cuda import _memory_viz as viz

    # PyTorch's own readers take it
    html = viz.trace_plot(snapshot)
    assert "snapshot.pickle" in html and "Active Memory Timeline" in html
    assert "Allocator State History" in viz.segment_plot(snapshot)
    text = viz.trace(snapshot)
    assert "entries" in text and "TOTAL MEM" in text
    assert "segments:" in viz.segsum(snapshot)
    lines = viz.memory(snapshot, format_flamegraph=lambda lines: lines)
    assert lines.count("\n") == len(snapshot["segments"])

    # the active-memory timeline memory_viz draws, from the device trace, is gpumem's
    events = snapshot["device_traces"][r["device"]]
    current = peak = 0
    for e in events:
        current += e["size"] if e["action"] == "alloc" else \
            -e["size"] if e["action"] == "free_completed" else 0
        peak = max(peak, current)
    # the trace starts with the blocks alive before the recording (parameters) not in it
    assert r["start"] + peak == r["peak"], (r, peak)
    assert r["start"] + current == r["end"], (r, current)
    # the blocks allocated during the recording and alive at its end are the segments
    assert sum(s["total_size"] for s in snapshot["segments"]) == current
    # python frames: the training loop's own line is the innermost frame of the forward's blocks
    alloc = [e for e in events if e["action"] == "alloc"]
    assert any(e["frames"] and e["frames"][0]["filename"] == "<string>" for e in alloc)
