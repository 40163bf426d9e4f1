#!/usr/bin/env python3
"""Convert a PyTorch CUDA memory snapshot to a gpumem trace (CSV).

The snapshot is the pickle written by ``torch.cuda.memory._dump_snapshot(path)`` (or
``pickle.dump(torch.cuda.memory._snapshot(), f)``) after ``torch.cuda.memory._record_memory_history()``.
Only the standard library is used: the pickle holds plain dicts, lists, strings and numbers, and
this reader refuses anything else (it never runs code from the file). Every value the trace needs
is checked (a whole number from 0 to 2^64-1); a file that does not hold one is refused with
SnapshotError naming the value and where it is.

Output: ``Thread,Time,Action,Pointer,Size,Stream`` (the logging_resource_adaptor's format).
Each ``alloc`` becomes ``allocate``; the first of ``free_requested``/``free_completed`` for a live
block becomes ``free``. Segment events are the caching allocator's own traffic and are skipped.
Without a recorded history the blocks live at snapshot time become allocations (with a warning).

Call stacks: when the history recorded them (``_record_memory_history(stacks="python")`` or
``"all"``), each ``allocate`` row keeps its entry's ``frames`` in a 7th column, ``Frames``, and the
header says so (``...,Stream,Frames``): the frames in the snapshot's order (innermost first), each
written ``name (filename:line)`` and joined by ``|`` (a ``|`` inside a frame becomes ``/``), the
field CSV-quoted when it holds a comma or a quote. Without frames the output has 6 columns.

Usage:  snapshot_to_csv.py SNAPSHOT.pickle [-o OUT.csv] [--device N]
"""
import argparse
import math
import os
import pickle
import resource
import sys

SAFE_GLOBALS = {("collections", "OrderedDict"), ("builtins", "set"), ("builtins", "frozenset")}
MAX_U64 = 2**64 - 1


class SnapshotError(Exception):
    """The file is not a snapshot this converter can read; the message says why."""


class PlainUnpickler(pickle.Unpickler):
    def find_class(self, module, name):
        if (module, name) in SAFE_GLOBALS:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(
            f"the snapshot contains a Python object ({module}.{name}), not plain data; save it "
            "with torch.cuda.memory._dump_snapshot(path)")


def limit_memory(snapshot_bytes):
    """Caps this process's memory at what a real snapshot of `snapshot_bytes` can need (its
    objects take a few times the file's size), so that a malformed pickle asking for gigabytes
    (a memo index in the billions) fails at once with MemoryError instead of exhausting the
    machine. Returns the cap in bytes."""
    with open("/proc/self/statm") as f:
        in_use = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    cap = in_use + max(1 << 30, 32 * snapshot_bytes)
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    if hard != resource.RLIM_INFINITY:
        cap = min(cap, hard)
    if soft == resource.RLIM_INFINITY or soft > cap:
        resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    return cap


def read_snapshot(f):
    """The snapshot dict read from the binary file `f`; SnapshotError when it is not one."""
    try:
        snap = PlainUnpickler(f).load()
    except MemoryError:
        raise SnapshotError("not a PyTorch memory snapshot pickle: reading it asks for more "
                            "memory than a snapshot of this size can need") from None
    except Exception as e:  # a malformed pickle may raise almost anything; none of it is ours
        raise SnapshotError(f"not a PyTorch memory snapshot pickle: {_show_error(e)}") from None
    if not isinstance(snap, dict) or ("segments" not in snap and "device_traces" not in snap):
        raise SnapshotError("not a PyTorch memory snapshot (no 'segments' or 'device_traces'); "
                            "produce one with torch.cuda.memory._dump_snapshot(path)")
    return snap


def _show_error(e):
    try:
        text = str(e)
    except Exception:
        text = ""
    return f"{type(e).__name__}: {text[:200]}" if text else type(e).__name__


def _show(value):
    """A short form of a value for a message (containers by type only: they may be huge)."""
    if value is None:
        return "missing"
    if isinstance(value, (bool, int, float)):
        try:
            text = repr(value)
        except ValueError:  # an int too long to print
            return "a very large number"
        return text if len(text) <= 40 else text[:40] + "..."
    if isinstance(value, (str, bytes)):
        return repr(value[:40]) + ("..." if len(value) > 40 else "")
    return f"a {type(value).__name__}"


def _whole(value, what, where):
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_U64:
        raise SnapshotError(f"{where}: {what} is {_show(value)}; expected a whole number from 0 "
                            "to 2^64-1")
    return value


def _time(value, where):
    if isinstance(value, float) and math.isfinite(value) and 0 <= value <= MAX_U64:
        return min(int(value), MAX_U64)
    return _whole(value, "time_us", where)


def _list(value, what):
    if not isinstance(value, (list, tuple)):
        raise SnapshotError(f"{what} is {_show(value)}; expected a list")
    return value


def _dict(value, what):
    if not isinstance(value, dict):
        raise SnapshotError(f"{what} is {_show(value)}; expected a dict")
    return value


def frame_text(frame, where):
    """One frame, {filename, line, name}, as the Frames column writes it."""
    frame = _dict(frame, where)
    parts = []
    for key in ("name", "filename", "line"):
        value = frame.get(key, "")
        if isinstance(value, bool) or not isinstance(value, (str, int)):
            raise SnapshotError(f"{where}: {key} is {_show(value)}; expected a string or a number")
        parts.append(str(value))
    name, filename, line = parts
    text = f"{name} ({filename}:{line})" if filename else name
    return text.replace("|", "/").replace("\n", " ").replace("\r", " ")


# The longest stack text (UTF-8 bytes) a Frames column carries: gpumem's trace::max_stack_bytes.
# A longer stack is cut after its last whole frame that fits (innermost frames kept), so that
# every line written fits the reader's 1 MiB line buffer even quoted; main() says how many were.
MAX_STACK_BYTES = 256 * 1024
cut_stacks = 0


def cut_stack(text):
    """`text` within MAX_STACK_BYTES, cut at a frame boundary; counts the stacks cut."""
    global cut_stacks
    data = text.encode("utf-8", "replace")
    if len(data) <= MAX_STACK_BYTES:
        return text
    cut_stacks += 1
    last = data.rfind(b"|", 0, MAX_STACK_BYTES + 1)
    return data[:last if last >= 0 else MAX_STACK_BYTES].decode("utf-8", "ignore")


def stack_text(frames, where):
    """The Frames column of an entry: its frames joined by '|' ('' when there are none)."""
    if frames is None:
        return ""
    frames = _list(frames, f"{where}.frames")
    return cut_stack("|".join(frame_text(f, f"{where}.frames[{i}]") for i, f in enumerate(frames)))


def history_rows(trace, device):
    live = set()
    for i, e in enumerate(_list(trace, f"device_traces[{device}]")):
        where = f"device_traces[{device}][{i}]"
        action = _dict(e, where).get("action")
        if action not in ("alloc", "free_requested", "free_completed"):
            continue
        addr = _whole(e.get("addr"), "addr", where)
        if action == "alloc" or addr in live:
            row = (_time(e.get("time_us", i), where), "allocate" if action == "alloc" else "free",
                   addr, _whole(e.get("size", 0), "size", where),
                   _whole(e.get("stream", 0) or 0, "stream", where),
                   stack_text(e.get("frames"), where) if action == "alloc" else "")
            (live.add if action == "alloc" else live.discard)(addr)
            yield row


def live_block_rows(snapshot, device):
    seen = set()  # an address listed twice is an inconsistent snapshot (and bounds the work)
    for s, seg in enumerate(_list(snapshot.get("segments", []), "segments")):
        if _dict(seg, f"segments[{s}]").get("device", 0) != device:
            continue
        for b, block in enumerate(_list(seg.get("blocks", []), f"segments[{s}].blocks")):
            where = f"segments[{s}].blocks[{b}]"
            if _dict(block, where).get("state") != "active_allocated":
                continue
            addr = _whole(block.get("address"), "address", where)
            if addr in seen:
                raise SnapshotError(f"{where}: block 0x{addr:x} is listed twice")
            seen.add(addr)
            yield (0, "allocate", addr, _whole(block.get("size"), "size", where),
                   _whole(seg.get("stream", 0) or 0, "stream", f"segments[{s}]"),
                   stack_text(block.get("frames"), where))


def convert(snapshot, device):
    """(rows, from_history): the trace's rows for `device`, from the recorded history when there
    is one, else the blocks live at snapshot time. SnapshotError when a needed value is wrong."""
    traces = _list(snapshot.get("device_traces", []), "device_traces")
    rows = list(history_rows(traces[device], device)) if device < len(traces) else []
    if rows:
        return rows, True
    return list(live_block_rows(snapshot, device)), False


def csv_field(text):
    """`text` as one CSV field: quoted (a quote doubled) when it holds a comma or a quote."""
    if "," in text or '"' in text:
        return '"' + text.replace('"', '""') + '"'
    return text


def write_csv(rows, out):
    """Writes `rows`; the Frames column only when some row has frames."""
    frames = any(row[5] for row in rows)
    out.write("Thread,Time,Action,Pointer,Size,Stream" + (",Frames\n" if frames else "\n"))
    for time, action, addr, size, stream, stack in rows:
        tail = "," + csv_field(stack) if frames and stack else ""
        out.write(f"0,{time},{action},0x{addr:x},{size},{stream}{tail}\n")


def device_number(text):
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} is not a device number (0 or more)")
    return value


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("snapshot")
    ap.add_argument("-o", "--output", default="-", help="CSV file to write (default: stdout)")
    ap.add_argument("--device", type=device_number, default=0,
                    help="which device's trace (default 0)")
    ap.add_argument("--name", help="the output's name in messages (default: --output)")
    args = ap.parse_args()
    try:
        with open(args.snapshot, "rb") as f:
            limit_memory(os.fstat(f.fileno()).st_size)
            rows, from_history = convert(read_snapshot(f), args.device)
    except OSError as e:
        sys.exit(f"{args.snapshot}: cannot open the snapshot: {e.strerror}")
    except SnapshotError as e:
        sys.exit(f"{args.snapshot}: {e}")
    if not from_history:
        print(f"{args.snapshot}: no allocation history for device {args.device} (call "
              "torch.cuda.memory._record_memory_history() before the run); writing the blocks "
              "live at snapshot time instead", file=sys.stderr)
    out = sys.stdout if args.output == "-" else open(args.output, "w")
    with out:
        write_csv(rows, out)
    if cut_stacks:
        print(f"{args.snapshot}: {cut_stacks} call stack(s) longer than {MAX_STACK_BYTES // 1024} "
              "KiB of text were cut to their innermost frames", file=sys.stderr)
    if args.output != "-":
        print(f"wrote {len(rows)} events to {args.name or args.output}", file=sys.stderr)


if __name__ == "__main__":
    main()
