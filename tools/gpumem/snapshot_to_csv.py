#!/usr/bin/env python3
"""Convert a PyTorch CUDA memory snapshot to a gpumem trace (CSV).

The snapshot is the pickle written by ``torch.cuda.memory._dump_snapshot(path)`` (or
``pickle.dump(torch.cuda.memory._snapshot(), f)``) after ``torch.cuda.memory._record_memory_history()``.
Only the standard library is used: the pickle holds plain dicts, lists, strings and numbers, and
this reader refuses anything else (it never runs code from the file).

Output: ``Thread,Time,Action,Pointer,Size,Stream`` (the logging_resource_adaptor's format).
Each ``alloc`` becomes ``allocate``; the first of ``free_requested``/``free_completed`` for a live
block becomes ``free``. Segment events are the caching allocator's own traffic and are skipped.
Without a recorded history the blocks live at snapshot time become allocations (with a warning).

Usage:  snapshot_to_csv.py SNAPSHOT.pickle [-o OUT.csv] [--device N]
"""
import argparse
import pickle
import sys

SAFE_GLOBALS = {("collections", "OrderedDict"), ("builtins", "set"), ("builtins", "frozenset")}


class PlainUnpickler(pickle.Unpickler):
    def find_class(self, module, name):
        if (module, name) in SAFE_GLOBALS:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(
            f"the snapshot contains a Python object ({module}.{name}), not plain data; save it "
            "with torch.cuda.memory._dump_snapshot(path)")


def load(path):
    try:
        with open(path, "rb") as f:
            return PlainUnpickler(f).load()
    except OSError as e:
        sys.exit(f"{path}: cannot open the snapshot: {e.strerror}")
    except (pickle.UnpicklingError, EOFError, ValueError) as e:
        sys.exit(f"{path}: not a PyTorch memory snapshot pickle: {e}")


def history_rows(trace):
    live = set()
    for i, e in enumerate(trace):
        action, addr = e.get("action"), e.get("addr")
        time = e.get("time_us", i)
        stream = e.get("stream", 0) or 0
        if action == "alloc":
            live.add(addr)
            yield (time, "allocate", addr, e.get("size", 0), stream)
        elif action in ("free_requested", "free_completed") and addr in live:
            live.discard(addr)
            yield (time, "free", addr, e.get("size", 0), stream)


def live_block_rows(snapshot, device):
    for seg in snapshot.get("segments", []):
        if seg.get("device", 0) != device:
            continue
        for b in seg.get("blocks", []):
            if b.get("state") == "active_allocated":
                yield (0, "allocate", b["address"], b["size"], seg.get("stream", 0) or 0)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("snapshot")
    ap.add_argument("-o", "--output", default="-", help="CSV file to write (default: stdout)")
    ap.add_argument("--device", type=int, default=0, help="which device's trace (default 0)")
    ap.add_argument("--name", help="the output's name in messages (default: --output)")
    args = ap.parse_args()
    snap = load(args.snapshot)
    if not isinstance(snap, dict) or ("segments" not in snap and "device_traces" not in snap):
        sys.exit(f"{args.snapshot}: not a PyTorch memory snapshot (no 'segments' or "
                 "'device_traces'); produce one with torch.cuda.memory._dump_snapshot(path)")
    traces = snap.get("device_traces", [])
    trace = traces[args.device] if args.device < len(traces) else []
    rows = list(history_rows(trace))
    if not rows:
        print(f"{args.snapshot}: no allocation history for device {args.device} (call "
              "torch.cuda.memory._record_memory_history() before the run); writing the blocks "
              "live at snapshot time instead", file=sys.stderr)
        rows = list(live_block_rows(snap, args.device))
    out = sys.stdout if args.output == "-" else open(args.output, "w")
    with out:
        out.write("Thread,Time,Action,Pointer,Size,Stream\n")
        for time, action, addr, size, stream in rows:
            out.write(f"0,{int(time)},{action},0x{addr:x},{size},{stream}\n")
    if args.output != "-":
        print(f"wrote {len(rows)} events to {args.name or args.output}", file=sys.stderr)


if __name__ == "__main__":
    main()
