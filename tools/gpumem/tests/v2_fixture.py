#!/usr/bin/env python3
"""Turn a results.json of the old shape into a report_version 2 fixture (see the contract in
docs and /work/notes/report_contract.md) by synthesizing the new fields from the trace CSVs.

For the page's tests before the C++ side emits v2 itself. The addresses and chunks are NOT the
resource's real layout: a two-level first-fit (chunks from a device address space, blocks inside
chunks) stands in for it (beyond 50,000 allocations: the trace's own pointers, one chunk); the
counts of live blocks match the trace, which is what the tests need.

  v2_fixture.py results.json out.json [--trace-dir DIR] [--html index.html out.html] [--downgrade]
               [--dense] [--omit]

A results.json that already has report_version >= 2 is copied unchanged. --downgrade does the
opposite: it drops the v2 fields (an old-shape report, to test that the page degrades gracefully).
--dense gives every timeline a point per event, so that the page's overview has to downsample;
--omit empties allocations, addresses and chunks as the tool does past 2,000,000 allocations. With --html, the JSON
embedded in index.html is replaced by the fixture (the page and its style stay the tool's own).
Standard library only.
"""
import argparse
import csv
import json
import os
import re
import sys

ALIGN = 256
FIRST_FIT_LIMIT = 50000  # more allocations: the trace's own pointers stand in for the layout
FRAMES = ["train.py:88 main", "train.py:61 step", "model.py:140 forward",
          "torch/nn/modules/linear.py:116 forward", "torch/nn/functional.py:2573 layer_norm",
          "torch/optim/adamw.py:199 step", "torch/autograd/graph.py:744 backward"]
STACKS = [[3, 2, 1, 0], [4, 2, 1, 0], [5, 1, 0], [6, 1, 0], [2, 1, 0]]


def read_trace(path):
    """Events of a trace: (action, pointer, size, time) per row, in order."""
    rows = []
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            rows.append((row["Action"], row["Pointer"], int(row["Size"] or 0),
                         int(row.get("Time") or 0)))
    return rows


def allocations_of(rows):
    """[[alloc_event, free_event or -1, size, stack], ...], the live bytes after each event and
    each allocation's pointer."""
    allocs, open_by_ptr, live, lives, ptrs = [], {}, 0, [], []
    for i, (action, ptr, size, _) in enumerate(rows):
        if action == "allocate":
            if ptr in open_by_ptr:  # a stale block: freed first, as the replay does
                k = open_by_ptr.pop(ptr)
                allocs[k][1] = i
                live -= allocs[k][2]
            open_by_ptr[ptr] = len(allocs)
            allocs.append([i, -1, size, (size // ALIGN) % len(STACKS)])
            ptrs.append(int(ptr, 16))
            live += size
        elif action == "free" and ptr in open_by_ptr:
            k = open_by_ptr.pop(ptr)
            allocs[k][1] = i
            live -= allocs[k][2]
        lives.append(live)
    return allocs, lives, ptrs


def trace_layout(allocs, ptrs, stop_event):
    """The trace's own pointers as the layout (fast, for large traces): one chunk over them all."""
    made = [k for k, a in enumerate(allocs) if a[0] < stop_event]
    if not made:
        return [-1] * len(allocs), []
    low = min(ptrs[k] for k in made)
    high = max(ptrs[k] + allocs[k][2] for k in made)
    addresses = [-1] * len(allocs)
    for k in made:
        addresses[k] = ptrs[k] - low
    return addresses, [[0, high - low, 0, -1]]


def round_up(n, a):
    return (n + a - 1) // a * a


class FirstFit:
    """Free ranges [start, end) kept sorted; first fit, coalescing on release."""

    def __init__(self):
        self.free = []

    def add(self, start, end):
        self.free.append([start, end])
        self.free.sort()
        merged = []
        for s, e in self.free:
            if merged and merged[-1][1] == s:
                merged[-1][1] = e
            else:
                merged.append([s, e])
        self.free = merged

    def take(self, size):
        for r in self.free:
            if r[1] - r[0] >= size:
                start = r[0]
                r[0] += size
                if r[0] == r[1]:
                    self.free.remove(r)
                return start
        return None


def synth_layout(name, allocs, stop_event):
    """addresses (parallel to allocs) and chunks for one stack, first fit within chunks."""
    leaf_only = name.split(">")[0].split(":")[0] in ("cuda", "caching")
    device = FirstFit()
    device.add(0, 1 << 50)
    chunks, addresses, chunk_fit = [], [-1] * len(allocs), {}
    next_chunk = 256 << 20
    events = []
    for k, (a, f, size, _) in enumerate(allocs):
        if a < stop_event:
            events.append((a, 1, k))
            if f != -1 and f < stop_event:
                events.append((f, 0, k))
    events.sort()
    block_chunk = {}
    for ev, is_alloc, k in events:
        size = round_up(max(allocs[k][2], 1), ALIGN)
        if not is_alloc:
            c = block_chunk.pop(k)
            if leaf_only:
                chunks[c][3] = ev
                device.add(chunks[c][0], chunks[c][0] + chunks[c][1])
            else:
                chunk_fit[c].add(addresses[k], addresses[k] + size)
            continue
        if leaf_only:
            bytes_ = round_up(size, 2 << 20) if name.startswith("caching") else size
            off = device.take(bytes_)
            chunks.append([off, bytes_, ev, -1])
            addresses[k] = off
            block_chunk[k] = len(chunks) - 1
            continue
        placed = None
        for c, fit in chunk_fit.items():
            off = fit.take(size)
            if off is not None:
                placed = (c, off)
                break
        if placed is None:
            bytes_ = max(round_up(size, 2 << 20), next_chunk)
            next_chunk = min(next_chunk * 2, 4 << 30)
            off = device.take(bytes_)
            chunks.append([off, bytes_, ev, -1])
            fit = FirstFit()
            fit.add(off, off + bytes_)
            chunk_fit[len(chunks) - 1] = fit
            placed = (len(chunks) - 1, fit.take(size))
        block_chunk[k] = placed[0]
        addresses[k] = placed[1]
    return addresses, chunks


def sample_events(trace):
    for r in trace["results"]:
        if r.get("timeline") and not r.get("failure"):
            return [p[0] for p in r["timeline"]]
    n = trace["events"]
    return list(range(min(31, n - 1), n, 32)) + ([n - 1] if n and (n - 1) % 32 != 31 else [])


def verdict_of(trace, simulated):
    ok = [r for r in trace["results"] if not r.get("error") and not r.get("failure")]
    basis = "host bookkeeping only (simulated device)" if simulated else "GPU"
    notes = []
    for r in trace["results"]:
        if r.get("failure"):
            notes.append(f"{r['resource']} ran out of memory at event {r['failure']['event']}.")
        elif r.get("error"):
            notes.append(f"{r['resource']} could not be built.")
    if not ok:
        return {"leanest": None, "leanest_ratio": None, "fastest": None,
                "fastest_ns_per_op": None, "speed_basis": basis, "suggestion": None,
                "notes": notes + ["No stack replayed the whole trace."]}
    lean = min(ok, key=lambda r: r["footprint_ratio"])
    fast = min(ok, key=lambda r: r["ns_per_op"])
    gib = -(-trace["peak_live_bytes"] // (1 << 30))
    return {"leanest": lean["resource"], "leanest_ratio": lean["footprint_ratio"],
            "fastest": fast["resource"], "fastest_ns_per_op": fast["ns_per_op"],
            "speed_basis": basis,
            "suggestion": {"spec": f"pool:initial={gib}GiB",
                           "why": "one up-front chunk just above the peak live bytes "
                                  "(synthetic fixture suggestion)"},
            "notes": notes + ["Synthetic v2 fixture: addresses come from a first-fit stand-in."]}


def reservation_of(r, trace):
    name = r["resource"].split(">")[0].split(":")[0]
    if name == "arena":
        return {"bytes": max(0, r["peak_held_bytes"] - trace["peak_live_bytes"]),
                "note": "arena reserves half of the device's free memory up front"}
    if name == "pool":
        return {"bytes": max(0, r["peak_held_bytes"] - trace["peak_live_bytes"]),
                "note": "pool grows by doubling its size"}
    return None


def upgrade_trace(trace, rows, simulated):
    allocs, lives, ptrs = allocations_of(rows)
    samples = sample_events(trace)
    t0 = rows[0][3] if rows else 0
    has_time = any(r[3] for r in rows)
    trace["time_us"] = [[e, rows[e][3] - t0] for e in samples] if has_time else []
    live_tl, prev = [], -1
    for e in samples:
        live_tl.append([e, max(lives[prev + 1:e + 1] or [lives[e]])])
        prev = e
    trace["live_timeline"] = live_tl
    trace["frames"] = FRAMES
    trace["stacks"] = STACKS
    trace["allocations"] = allocs  # replaces the count (the page takes the array's length)
    trace["allocations_omitted"] = False
    trace["verdict"] = verdict_of(trace, simulated)
    basis = trace["verdict"]["speed_basis"]
    for r in trace["results"]:
        if r.get("error"):
            continue
        known = (r["at_peak"] or r["failure"]["state"])["layout_known"]
        stop = r["failure"]["event"] if r.get("failure") else trace["events"]
        if r.get("failure") and stop <= trace["peak_live_event"]:
            r["at_peak"] = None  # no state at the peak (as wip-report emits it)
        r["held_at_start"] = 0
        r["layout_known"] = known
        if not known:
            r["addresses"], r["chunks"] = [], []
        elif len(allocs) > FIRST_FIT_LIMIT:
            r["addresses"], r["chunks"] = trace_layout(allocs, ptrs, stop)
        else:
            r["addresses"], r["chunks"] = synth_layout(r["resource"], allocs, stop)
        r["base"] = "0x7f0000000000"
        tl = r.get("timeline") or [[0, 0, 0]]
        top = max(p[2] for p in tl)
        r["peak_held_event"] = next(p[0] for p in tl if p[2] == top)
        r["reservation"] = reservation_of(r, trace)
        r["ns_per_op_basis"] = basis


V2_TRACE_FIELDS = ["time_us", "live_timeline", "frames", "stacks", "allocations_omitted", "verdict",
                   "allocation_count", "verdict_spread", "live_at_peak_by_stack",
                   "live_at_peak_other_stacks"]
V2_RESULT_FIELDS = ["layout_known", "addresses", "base", "chunks", "peak_held_event", "reservation",
                    "ns_per_op_basis", "held_at_start", "figures", "granted"]


def downgrade(data):
    """The old shape: no report_version, no v2 fields, allocations a count, at_peak never null."""
    data.pop("report_version", None)
    for t in data["traces"]:
        for k in V2_TRACE_FIELDS:
            t.pop(k, None)
        if isinstance(t.get("allocations"), list):
            t["allocations"] = len(t["allocations"])
        for r in t["results"]:
            for k in V2_RESULT_FIELDS:
                r.pop(k, None)
            if "at_peak" in r and r["at_peak"] is None:
                r["at_peak"] = dict(r["failure"]["state"], live_blocks=0)


def densify(trace, lives):
    """Timelines with a point per event (the overview then has to downsample): the live bytes of
    each event, and the held bytes of the span point that holds it."""
    n = trace["events"]
    trace["live_timeline"] = [[e, lives[e]] for e in range(n)]
    for r in trace["results"]:
        if r.get("error") or not r.get("timeline"):
            continue
        old, out, i = r["timeline"], [], 0
        stop = r["failure"]["event"] if r.get("failure") else n
        for e in range(min(n, old[-1][0] + 1, stop)):
            while old[i][0] < e:
                i += 1
            out.append([e, lives[e], old[i][2]])
        r["timeline"] = out
    if trace.get("time_us"):
        trace["time_us"] = []


def find_trace(path, trace_dir):
    if os.path.exists(path):
        return path
    alt = os.path.join(trace_dir or "", os.path.basename(path))
    if os.path.exists(alt):
        return alt
    sys.exit(f"v2_fixture.py: trace {path} not found (give --trace-dir)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("results")
    ap.add_argument("out")
    ap.add_argument("--trace-dir")
    ap.add_argument("--html", nargs=2, metavar=("INDEX", "OUT"))
    ap.add_argument("--downgrade", action="store_true")
    ap.add_argument("--dense", action="store_true", help="a timeline point per event (v2 input too)")
    ap.add_argument("--omit", action="store_true", help="as past 2,000,000 allocations: no addresses")
    args = ap.parse_args()
    with open(args.results) as f:
        data = json.load(f)
    if args.downgrade:
        downgrade(data)
    elif data.get("report_version", 1) < 2:
        data["report_version"] = 2
        for t in data["traces"]:
            upgrade_trace(t, read_trace(find_trace(t["path"], args.trace_dir)), data["simulated"])
    if args.dense:
        for t in data["traces"]:
            densify(t, allocations_of(read_trace(find_trace(t["path"], args.trace_dir)))[1])
    if args.omit:
        for t in data["traces"]:
            t["allocations_omitted"], t["allocations"] = True, []
            if "live_at_peak_by_stack" in t:  # the tool groups the allocations it kept: none
                t["live_at_peak_by_stack"] = []
                t["live_at_peak_other_stacks"] = {"stacks": 0, "bytes": 0, "blocks": 0}
            for r in t["results"]:
                if not r.get("error"):
                    r["addresses"], r["chunks"] = [], []
    text = json.dumps(data, separators=(",", ":"))
    with open(args.out, "w") as f:
        f.write(text + "\n")
    if args.html:
        with open(args.html[0]) as f:
            page = f.read()
        pat = re.compile(r'(<script id="gpumem-data" type="application/json">)(.*?)(</script>)',
                         re.S)
        safe = text.replace("</", "<\\/")
        page, n = pat.subn(lambda m: m.group(1) + safe + m.group(3), page, count=1)
        if n != 1:
            sys.exit("v2_fixture.py: no gpumem-data script in " + args.html[0])
        with open(args.html[1], "w") as f:
            f.write(page)


if __name__ == "__main__":
    main()
