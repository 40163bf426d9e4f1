"""PyTorch memory snapshots from gpumem.torch recordings, without a GPU or PyTorch: a recording
made through the allocator library over the host stand-in becomes the pickle that PyTorch's
memory_viz reads (checked against the keys memory_viz and torch/cuda/_memory_viz.py use), its
active-memory timeline matches the trace and the statistics, and it converts back to the same
trace with `gpumem convert`'s converter (tools/gpumem/snapshot_to_csv.py)."""

import csv
import importlib.util
import io
import os
import pickle

import pytest

import gpumem
import gpumem._cli
import gpumem.torch as gt

lib = gt._library()
DEVICE = 2
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONVERTER = os.path.join(ROOT, "tools", "gpumem", "snapshot_to_csv.py")


@pytest.fixture
def device():
    host = gpumem.HostRuntime(capacity_bytes=128 << 20, device_count=DEVICE + 1)
    assert lib.gpumem_torch_configure(DEVICE, b"pool:initial=8MiB", host._handle, 0) == 0
    yield host
    assert lib.gpumem_torch_release(DEVICE) == 0
    lib.gpumem_torch_configure(DEVICE, None, None, 0)


def malloc(size, stream=None):
    p = lib.gpumem_torch_try_malloc(size, DEVICE, stream)
    assert p, gt._last_error()
    return p


def free(p, size, stream=None):
    lib.gpumem_torch_free(p, size, DEVICE, stream)


def layer(n):  # a frame of our own in the recorded stacks
    return malloc(n)


def workload(host):
    """A few steps of a training-like pattern: weights kept, activations freed, one block left
    allocated at the end. Returns the block still held."""
    s = host.create_stream()
    weights = malloc(1 << 20)
    for _ in range(3):
        acts = [layer(256 << 10) for _ in range(4)]
        grad = malloc(512 << 10, s)
        for a in acts:
            free(a, 256 << 10)
        free(grad, 512 << 10, s)
    return weights


def read_trace(path):
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    return rows[0], rows[1:]


def active_timeline(snapshot, device):
    """(peak, final, allocations) of the active memory memory_viz draws for `device`: alloc
    adds the size, free_completed takes it off (as the page and _memory_viz.trace do)."""
    current = peak = count = 0
    for e in snapshot["device_traces"][device]:
        if e["action"] == "alloc":
            current += e["size"]
            count += 1
        elif e["action"] == "free_completed":
            current -= e["size"]
        peak = max(peak, current)
    return peak, current, count


def test_a_recording_becomes_a_snapshot_memory_viz_reads(device, tmp_path):
    trace, snap = tmp_path / "t.csv", tmp_path / "t.pickle"
    gt.reset_peak_memory_stats(DEVICE)
    with gt.record(str(trace), frames=True, snapshot=None):
        held = workload(device)
    gt.write_snapshot(str(trace), str(snap), device=DEVICE)
    with open(snap, "rb") as f:
        data = pickle.load(f)

    # the keys memory_viz and torch.cuda._memory_viz read
    assert set(data) >= {"segments", "device_traces"}
    assert len(data["device_traces"]) == DEVICE + 1 and data["device_traces"][0] == []
    events = data["device_traces"][DEVICE]
    for e in events:
        assert e["action"] in ("alloc", "free_requested", "free_completed", "oom")
        for key, kind in (("addr", int), ("size", int), ("stream", int), ("time_us", int),
                          ("frames", list)):
            assert isinstance(e[key], kind), (key, e)
        for fr in e["frames"]:
            assert set(fr) == {"filename", "line", "name"} and isinstance(fr["line"], int)
    allocs = [e for e in events if e["action"] == "alloc"]
    assert len(allocs) == 1 + 3 * 5
    # the activations carry our own frames, innermost first: malloc(), called by layer()
    acts = [e for e in allocs if e["size"] == 256 << 10]
    assert acts and all([f["name"] for f in e["frames"][:2]] == ["malloc", "layer"]
                        for e in acts), acts[0]["frames"]
    assert acts[0]["frames"][1]["filename"] == __file__
    assert [e["action"] for e in events].count("free_requested") == 3 * 5
    for seg in data["segments"]:
        assert seg["device"] == DEVICE
        for key in ("address", "total_size", "allocated_size", "active_size",
                    "requested_size", "stream", "segment_type", "blocks"):
            assert key in seg, key
        assert sum(b["size"] for b in seg["blocks"]) == seg["total_size"]
        for b in seg["blocks"]:
            assert b["state"] in ("active_allocated", "inactive")
            assert {"address", "size", "requested_size", "frames"} <= set(b)
    # the blocks live at the end are the segments' active blocks
    assert [b["address"] for s in data["segments"] for b in s["blocks"]] == [held]

    # the active-memory timeline agrees with the trace and with gpumem's statistics
    peak, final, count = active_timeline(data, DEVICE)
    assert count == len(allocs)
    assert final == 1 << 20
    assert peak == gt.max_memory_allocated(DEVICE) == (1 << 20) + 4 * (256 << 10) + (512 << 10)
    header, rows = read_trace(trace)
    current = trace_peak = 0
    for row in rows:
        current += int(row[4]) if row[2] == "allocate" else -int(row[4])
        trace_peak = max(trace_peak, current)
    assert trace_peak == peak
    free(held, 1 << 20)


def test_record_writes_the_snapshot_when_asked(device, tmp_path):
    trace, snap = tmp_path / "t.csv", tmp_path / "t.pickle"
    with gt.record(str(trace), snapshot=str(snap)):
        p = malloc(4096)
        free(p, 4096)
    with open(snap, "rb") as f:
        data = pickle.load(f)
    events = [e for t in data["device_traces"] for e in t]
    assert [e["action"] for e in events] == ["alloc", "free_requested", "free_completed"]
    assert events[0]["addr"] == p and events[0]["frames"] == []
    assert data["segments"] == []


@pytest.mark.skipif(not os.path.exists(CONVERTER), reason="needs the source tree's tools/gpumem")
def test_the_snapshot_converts_back_to_the_same_trace(device, tmp_path):
    """`gpumem convert` (tools/gpumem/snapshot_to_csv.py) reads our snapshot back into the trace
    it came from: every row, with its time, pointer, size, stream and frames."""
    spec = importlib.util.spec_from_file_location("snapshot_to_csv", CONVERTER)
    converter = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(converter)
    trace, snap = tmp_path / "t.csv", tmp_path / "t.pickle"
    with gt.record(str(trace), frames=True):
        held = workload(device)
    gt.write_snapshot(str(trace), str(snap), device=DEVICE)
    with open(snap, "rb") as f:
        rows, from_history = converter.convert(converter.read_snapshot(f), DEVICE)
    assert from_history
    out = io.StringIO()
    converter.write_csv(rows, out)
    header, original = read_trace(trace)
    back = list(csv.reader(io.StringIO(out.getvalue())))
    assert back[0] == header == ["Thread", "Time", "Action", "Pointer", "Size", "Stream", "Frames"]

    def columns(row):  # all but the Thread column (the converter writes 0), Frames "" if absent
        return row[1:6] + [row[6] if len(row) > 6 else ""]

    assert [columns(r) for r in back[1:]] == [columns(r) for r in original]
    assert any(columns(r)[5] for r in original)  # frames made the round trip too
    free(held, 1 << 20)


def test_a_file_that_is_not_a_trace_is_refused_with_where_and_why(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b,c\n1,2,3\n")
    with pytest.raises(gt.TraceFormatError, match=r"bad\.csv: not a gpumem trace"):
        gt.snapshot_from_trace(str(bad))
    bad.write_text("Thread,Time,Action,Pointer,Size,Stream\n0,1,allocate,0x10,lots,0\n")
    with pytest.raises(gt.TraceFormatError, match=r"bad\.csv:2: .*lots") as info:
        gt.snapshot_from_trace(str(bad))
    assert info.value.line == 2 and isinstance(info.value, ValueError)
    bad.write_text("Thread,Time,Action,Pointer,Size,Stream\n0,1,explode,0x10,16,0\n")
    with pytest.raises(gt.TraceFormatError, match="unknown action 'explode'"):
        gt.snapshot_from_trace(str(bad))


def test_frames_that_are_not_file_and_line_keep_their_text():
    frames = gt._snapshot_frames("step (train.py:12)|<module> (/a b/(x).py:3)|odd text")
    assert frames == [{"name": "step", "filename": "train.py", "line": 12},
                      {"name": "<module>", "filename": "/a b/(x).py", "line": 3},
                      {"name": "odd text", "filename": "", "line": 0}]


def _tool():
    try:
        return str(gpumem._cli.tool_path())
    except (AttributeError, FileNotFoundError):
        return None


@pytest.mark.skipif(_tool() is None, reason="needs the bundled gpumem tool (an installed wheel)")
def test_gpumem_convert_reads_the_snapshot_back(device, tmp_path):
    """The command line: `gpumem convert snapshot.pickle --device N -o out.csv`."""
    import subprocess

    trace, snap, back = tmp_path / "t.csv", tmp_path / "t.pickle", tmp_path / "back.csv"
    with gt.record(str(trace), frames=True):
        held = workload(device)
    gt.write_snapshot(str(trace), str(snap), device=DEVICE)
    proc = subprocess.run([_tool(), "convert", str(snap), "--device", str(DEVICE), "-o",
                           str(back)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    _, original = read_trace(trace)
    _, converted = read_trace(back)

    def columns(row):
        return row[1:6] + [row[6] if len(row) > 6 else ""]

    assert [columns(r) for r in converted] == [columns(r) for r in original]
    free(held, 1 << 20)


def test_pytorchs_own_memory_viz_reads_the_snapshot(device, tmp_path):
    """Where PyTorch is installed (no GPU needed): torch.cuda._memory_viz's readers take the
    snapshot, and its text trace ends with the memory still allocated."""
    viz = pytest.importorskip("torch.cuda._memory_viz")
    trace, snap = tmp_path / "t.csv", tmp_path / "t.pickle"
    with gt.record(str(trace), frames=True):
        held = workload(device)
        p = lib.gpumem_torch_try_malloc(1 << 40, DEVICE, None)  # fails: an oom entry
        assert not p
    data = gt.write_snapshot(str(trace), str(snap), device=DEVICE)
    assert any(e["action"] == "oom" for e in data["device_traces"][DEVICE])
    html = viz.trace_plot(data)
    assert "Active Memory Timeline" in html and "snapshot.pickle" in html
    assert "Allocator State History" in viz.segment_plot(data)
    assert "total_allocated: 1.0MiB" in viz.segsum(data)
    try:
        # PyTorch 2.11 writes "raise OutOfMemoryError # 1.0TiB requested, ...", older ones "()"
        assert "raise OutOfMemoryError" in viz.trace(data)
        lines = viz.memory(data, format_flamegraph=lambda text: text).splitlines()
        assert len(lines) == 1 and lines[0].endswith(f" {1 << 20}") and "layer" not in lines[0]
    finally:
        free(held, 1 << 20)  # a failed check leaves the device releasable
