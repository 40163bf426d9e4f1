"""gpumem.torch on a GPU: lazy per-device resources, memory_stats, empty_cache, out-of-memory,
CUDA graph capture (and a raw capture refused), recording (with Python frames too), the
`python -m gpumem.torch` runner, and the two comparison scripts (training, generation) under
PyTorch's allocator and gpumem with the same seed.

Each check runs in its own process (PyTorch's allocator is chosen once per process). Skips
without a GPU or without PyTorch. GPUMEM_GPU_REPORT=<file> appends the comparison JSON lines."""

import csv
import importlib.util
import json
import os
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


def python(args, env=None, timeout=300):
    full_env = dict(os.environ)
    full_env.pop("GPUMEM_TORCH_ALLOC", None)
    full_env.update(env or {})
    proc = subprocess.run([sys.executable, *args], capture_output=True, text=True, env=full_env,
                          timeout=timeout, cwd=HERE)
    return proc


def check(code, env=None):
    """Runs PRELUDE then `code` (indented as in the test); returns the JSON of its last line
    starting with RESULT."""
    proc = python(["-c", PRELUDE + textwrap.dedent(code)], env)
    lines = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, f"rc {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return json.loads(lines[-1][len("RESULT "):])


PRELUDE = """
import json, torch, gpumem.torch as gt
def result(**kw):
    print("RESULT " + json.dumps(kw), flush=True)
"""


def test_each_device_gets_its_resource_on_first_use():
    r = check("""
        gt.use("pool:initial=64MiB")
        n = torch.cuda.device_count()
        before = [gt._raw_stats(d)[16] for d in range(n)]
        x = torch.ones(1 << 20, device=f"cuda:{n - 1}")
        after = [gt._raw_stats(d)[16] for d in range(n)]
        reserved = [gt.memory_reserved(d) for d in range(n)]
        result(n=n, before=before, after=after, reserved=reserved)
    """)
    n = r["n"]
    assert r["before"] == [0] * n
    assert r["after"] == [0] * (n - 1) + [1]
    assert r["reserved"][-1] >= 64 << 20 and all(v == 0 for v in r["reserved"][:-1])


@pytest.mark.parametrize("specs", [("pool:initial=64MiB", "pool:initial=32MiB"),
                                   ("vmm_pool:peers=all", "vmm_pool:peers=all"),
                                   None])
def test_two_devices_in_one_process(specs):
    """A tensor on each device, a copy between them and a data-parallel training step, with the
    statistics of each device its own (skips on a machine with one GPU). vmm_pool needs
    peers=all: without it the other device may not reach its memory. None: use() with no spec,
    whose default (vmm_pool:peers=all) must work for this too."""
    install = "gt.use()" if specs is None else 'gt.use({0: "%s", None: "%s"})' % specs
    r = check("""
        %s
        n = torch.cuda.device_count()
        if n < 2:
            result(n=n)
        else:
            torch.manual_seed(0)
            a = torch.randn(1 << 20, device="cuda:0")
            b = a.to("cuda:1")
            same = bool(torch.equal(a.cpu(), b.cpu()))
            model = torch.nn.DataParallel(torch.nn.Linear(512, 512).cuda(0), device_ids=[0, 1])
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            x = torch.randn(64, 512, device="cuda:0")
            loss = model(x).square().mean()
            loss.backward()
            opt.step()
            torch.cuda.synchronize(0)
            torch.cuda.synchronize(1)
            result(n=n, same=same, loss=float(loss),
                   allocated=[gt.memory_allocated(d) for d in (0, 1)],
                   peaks=[gt.max_memory_allocated(d) for d in (0, 1)],
                   reserved=[gt.memory_reserved(d) for d in (0, 1)],
                   allocs=[gt.memory_stats(d)["allocation.all.allocated"] for d in (0, 1)])
    """ % install)
    if r["n"] < 2:
        pytest.skip(f"needs 2 GPUs; this machine has {r['n']}")
    assert r["same"]
    assert r["loss"] == r["loss"]  # not NaN
    assert all(v >= 4 << 20 for v in r["peaks"]), r  # a 4 MiB tensor on each device at least
    assert all(v > 0 for v in r["allocs"]), r
    pool_first = specs is not None and specs[0].startswith("pool")
    assert r["reserved"][0] >= (64 << 20 if pool_first else 1) and r["reserved"][1] > 0, r


def test_memory_stats_under_pytorchs_names_and_torch_cuda_functions():
    r = check("""
        gt.use("pool:initial=64MiB")
        x = torch.empty(1 << 20, dtype=torch.uint8, device="cuda")
        y = torch.empty(3 << 20, dtype=torch.uint8, device="cuda")
        del x
        s = torch.cuda.memory_stats()
        result(stats=s, ours=gt.memory_stats(), allocated=torch.cuda.memory_allocated(),
               peak=torch.cuda.max_memory_allocated(), reserved=torch.cuda.memory_reserved(),
               summary=torch.cuda.memory_summary())
    """)
    s = r["stats"]
    assert s == r["ours"]
    assert s["allocated_bytes.all.current"] == 3 << 20 == r["allocated"]
    assert s["allocated_bytes.all.peak"] == 4 << 20 == r["peak"]
    assert s["allocation.all.current"] == 1 and s["allocation.all.freed"] == 1
    assert r["reserved"] >= 64 << 20 and s["num_ooms"] == 0
    assert "Allocated memory" in r["summary"]


def test_empty_cache_gives_memory_back():
    r = check("""
        gt.use("vmm_pool")
        x = torch.empty(512 << 20, dtype=torch.uint8, device="cuda")
        del x
        torch.cuda.synchronize()
        held = gt.memory_reserved()
        free_before = torch.cuda.mem_get_info()[0]
        torch.cuda.empty_cache()      # reaches gpumem through the pluggable allocator's reset hook
        result(held=held, after=gt.memory_reserved(),
               freed_on_device=torch.cuda.mem_get_info()[0] - free_before)
    """)
    assert r["held"] >= 512 << 20
    assert r["after"] < r["held"]
    assert r["freed_on_device"] >= 256 << 20


def test_out_of_memory_is_torchs_error_with_gpumems_diagnosis():
    r = check("""
        gt.use("limiting:limit=256MiB>pool:initial=64MiB")
        keep = torch.ones(1 << 20, device="cuda")
        try:
            with gt.out_of_memory_errors():
                torch.empty(512 << 20, dtype=torch.uint8, device="cuda")
            kind = message = None
        except Exception as e:
            kind, message = type(e).__name__, str(e)
        result(kind=kind, is_torch=kind == "OutOfMemoryError", message=message,
               ooms=gt.memory_stats()["num_ooms"], retries=gt.memory_stats()["num_alloc_retries"],
               usable=float((torch.ones(16, device="cuda") + 1).sum().item()))
    """)
    assert r["is_torch"], r
    assert "CUDA out of memory on device 0" in r["message"] and "512" in r["message"], r
    assert r["ooms"] == 1 and r["retries"] == 1 and r["usable"] == 32.0


def test_cuda_graph_capture_works_and_a_raw_capture_is_refused_clearly():
    """torch.cuda.graph captures under gpumem (test_torch_graphs_gpu.py checks training steps);
    a capture PyTorch does not announce to the allocator (cudaStreamBeginCapture on a PyTorch
    stream, through ctypes) is refused with a message that says so, never corrupted."""
    r = check("""
        import contextlib, ctypes
        gt.use("pool")
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
            static_out = model(static_in)
        g.replay()
        same = bool(torch.allclose(static_out, model(static_in)))
        # a raw capture through the CUDA runtime PyTorch loaded (relaxed mode: 2)
        rt = None
        for name in ("libcudart.so.13", "libcudart.so.12", "libcudart.so"):
            try:
                rt = ctypes.CDLL(name)
                break
            except OSError:
                pass
        raw = torch.cuda.Stream()
        chain = [] if rt is not None else None
        with torch.cuda.stream(raw) if rt is not None else contextlib.nullcontext():
            if rt is not None:
                assert rt.cudaStreamBeginCapture(ctypes.c_void_p(raw.cuda_stream), 2) == 0
                try:
                    torch.empty(1 << 20, device="cuda")
                except Exception as e:
                    while e is not None:
                        chain.append(str(e))
                        e = e.__cause__ or e.__context__
                graph = ctypes.c_void_p()
                rt.cudaStreamEndCapture(ctypes.c_void_p(raw.cuda_stream), ctypes.byref(graph))
        result(same=same, chain=chain)
    """)
    assert r["same"], r
    if r["chain"] is None:
        pytest.skip("the capture works; the raw capture needs PyTorch's CUDA runtime library "
                    "(libcudart.so) loadable by name, which this PyTorch does not have")
    assert any("did not announce" in m for m in r["chain"]), r


def test_record_writes_a_trace_gpumem_replay_replays(tmp_path):
    trace = tmp_path / "torch.csv"
    r = check(f"""
        gt.use("pool")
        with gt.record({str(trace)!r}):
            a = torch.randn(1024, 1024, device="cuda")
            b = (a @ a).relu()
            del a
            c = b.sum()
        result(lines=sum(1 for _ in open({str(trace)!r})))
    """)
    assert r["lines"] > 3
    out = gpumem.replay(trace, "pool:initial=64MiB")
    (result,) = out["traces"][0]["results"]
    assert result["peak_held_bytes"] >= 4 << 20


def test_record_with_frames_keeps_each_allocations_python_stack(tmp_path):
    """A training step of a tiny model recorded with frames=True: the allocate rows made on the
    main thread carry the program's own line innermost (torch's and gpumem's frames left out);
    the trace replays with the gpumem tool, whose report has the frames and stacks."""
    trace = tmp_path / "frames.csv"
    r = check(f"""
        import sys
        gt.use("pool")
        model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(),
                                    torch.nn.Linear(256, 8)).cuda()
        opt = torch.optim.Adam(model.parameters())
        with gt.record({str(trace)!r}, frames=True):
            x = torch.randn(32, 64, device="cuda"); line_x = sys._getframe().f_lineno
            loss = model(x).square().mean(); line_loss = sys._getframe().f_lineno
            loss.backward()
            opt.step()
            torch.cuda.synchronize()
        result(line_x=line_x, line_loss=line_loss)
    """)
    rows = list(csv.reader(open(trace)))
    assert rows[0][-1] == "Frames", rows[0]
    stacks = [row[6].split("|") if len(row) > 6 and row[6] else [] for row in rows[1:]
              if row[2] == "allocate"]
    assert stacks and any(stacks), rows[:5]
    innermost = {s[0] for s in stacks if s}
    assert f"<module> (<string>:{r['line_x']})" in innermost, innermost
    assert f"<module> (<string>:{r['line_loss']})" in innermost, innermost
    assert not any("/torch/" in f or "/gpumem/" in f for s in stacks for f in s), innermost
    try:
        tool = gpumem._cli.tool_path()
    except FileNotFoundError:
        pytest.skip("the gpumem tool is not in this installation; the trace was checked")
    report = tmp_path / "report"
    proc = subprocess.run([str(tool), "replay", str(trace), "-r", "pool", "--report",
                           str(report)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    (t,) = json.load(open(report / "results.json"))["traces"]
    assert f"<module> (<string>:{r['line_x']})" in t["frames"], t["frames"]
    assert t["stacks"] and any(a[3] >= 0 for a in t["allocations"])


def test_the_runner_switches_an_unchanged_script():
    proc = python(["-m", "gpumem.torch", "torch_train_bench.py", "--steps", "4", "--layers", "2"],
                  {"GPUMEM_TORCH_ALLOC": "pool"})
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["allocator"] == "gpumem all=pool" and out["peak_allocated_mib"] > 0
    bad = python(["-m", "gpumem.torch", "torch_train_bench.py"], {"GPUMEM_TORCH_ALLOC": "poool"})
    assert bad.returncode == 2 and "GPUMEM_TORCH_ALLOC='poool'" in bad.stderr


def test_two_processes_share_one_gpu_each_under_gpumem():
    """Two training processes at once on one GPU, each with its own gpumem pool: both finish with
    the losses of a single run."""
    env = dict(os.environ, GPUMEM_TORCH_ALLOC="vmm_pool")
    cmd = [sys.executable, "-m", "gpumem.torch", "torch_train_bench.py", "--steps", "6",
           "--layers", "4"]
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=env, cwd=HERE) for _ in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err[-3000:]
    single = python(cmd[1:], {"GPUMEM_TORCH_ALLOC": "vmm_pool"})
    assert single.returncode == 0, single.stderr[-3000:]
    expected = json.loads(single.stdout.strip().splitlines()[-1])["losses"]
    for out, _ in outs:
        assert json.loads(out.strip().splitlines()[-1])["losses"] == expected


def compare(script, specs):
    """Runs `script` under PyTorch's allocator, PyTorch's allocator with expandable segments,
    `python -m gpumem.torch` with no spec (gpumem.torch.DEFAULT_SPEC) and each of `specs`."""
    runs = {"torch": python([script], timeout=600),
            "torch expandable_segments": python(
                [script], {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}, timeout=600),
            "default": python(["-m", "gpumem.torch", script], timeout=600)}
    for spec in specs:
        runs[spec] = python(["-m", "gpumem.torch", script], {"GPUMEM_TORCH_ALLOC": spec},
                            timeout=600)
    results = {}
    for name, proc in runs.items():
        assert proc.returncode == 0, f"{script} under {name}:\n{proc.stderr[-3000:]}"
        results[name] = json.loads(proc.stdout.strip().splitlines()[-1])
    report = os.environ.get("GPUMEM_GPU_REPORT")
    if report:
        with open(report, "a") as f:
            for r in results.values():
                f.write(json.dumps(r) + "\n")
    for r in results.values():
        print(json.dumps(r))
    return results


def test_training_gives_the_same_losses_under_gpumem():
    r = compare("torch_train_bench.py", ["pool", "vmm_pool"])
    assert r["default"]["allocator"] == "gpumem all=vmm_pool:peers=all"
    for name in ("torch expandable_segments", "default", "pool", "vmm_pool"):
        assert r[name]["losses"] == r["torch"]["losses"], name


def test_generation_gives_the_same_tokens_under_gpumem():
    r = compare("torch_generate_bench.py", ["pool", "vmm_pool"])
    for name in ("torch expandable_segments", "default", "pool", "vmm_pool"):
        assert r[name]["tokens_sha256"] == r["torch"]["tokens_sha256"], name
