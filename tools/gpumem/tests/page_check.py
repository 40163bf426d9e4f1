#!/usr/bin/env python3
"""Compares what the report page displayed (its <pre id="selftest"> JSON lines, in a DOM dumped by
headless Chromium with #selftest in the URL) with results.json:

  page_check.py DOM.html RESULTS.json [--trace N] [--expect-oom] [--expect-layout]

* hover readout: the event, the live bytes and each stack's held bytes are exactly those of the
  JSON point whose span holds the cursor's event (points are maxima of spans of events, labeled
  with the span's last event); past a stack's failure the readout says out of memory;
* the live line comes from the trace (live_timeline, or a stack that did not fail) and reaches the
  end of the trace, past every out-of-memory event; one marker per stack that failed;
* the layout's block count per stack at the default event (the trace's peak_live_event) equals
  at_peak.live_blocks (and the count the contract's invariant gives from allocations/addresses);
* a click on the timeline and an event typed in the field show the layout at that event, with
  the live allocations of the JSON; a legend click hides a stack and a second shows it again;
* the verdict panel is shown.
Prints "ok - ..." / "FAIL - ..." lines; exits 1 on any failure. Standard library only.
"""
import argparse
import bisect
import html
import json
import math
import re
import sys

failures = 0


def check(ok, what):
    global failures
    print(("ok - " if ok else "FAIL - ") + what)
    if not ok:
        failures += 1
    return ok


def selftest_lines(dom):
    blocks = re.findall(r'<pre id="selftest">([^<]*)</pre>', dom)
    if not blocks:
        return None
    return [json.loads(line) for line in html.unescape(blocks[-1]).splitlines() if line.strip()]


def span_point(pts, x):
    """The point whose span holds event x: the first with p[0] >= x (the last past the end)."""
    if not pts:
        return None
    i = bisect.bisect_left([p[0] for p in pts], x)
    return pts[min(i, len(pts) - 1)]


def live_line(trace):
    if trace.get("live_timeline"):
        return trace["live_timeline"]
    runs = [r for r in trace["results"] if not r.get("error") and r.get("timeline")]
    whole = [r for r in runs if not r.get("failure")] or sorted(runs, key=lambda r: -len(r["timeline"]))
    return [[p[0], p[1]] for p in whole[0]["timeline"]] if whole else []


def exact_live(trace):
    """Live bytes after every event from the allocations (None without them), as the page does."""
    al = trace.get("allocations")
    if not isinstance(al, list) or not al:
        return None
    n = max(1, trace["events"])
    v = [0] * (n + 1)
    for a in al:
        v[a[0]] += a[2]
        if a[1] != -1:
            v[a[1]] -= a[2]
    for e in range(1, n):
        v[e] += v[e - 1]
    return v[:n]


def exact_held(trace, r):
    """Held bytes after every event from the stack's chunks, up to its failure (None without)."""
    if exact_live(trace) is None or not r.get("layout_known") or not r.get("chunks"):
        return None
    n = max(1, trace["events"])
    if r.get("failure"):
        n = min(n, r["failure"]["event"] + 1)
    v = [0] * (n + 1)
    for c in r["chunks"]:
        if c[2] < n:
            v[c[2]] += c[1]
        if c[3] != -1 and c[3] < n:
            v[c[3]] -= c[1]
    for e in range(1, n):
        v[e] += v[e - 1]
    return v[:n]


def check_hover(line, trace):
    live = exact_live(trace)
    if live is not None:
        return check_exact_hover(line, trace, live)
    x, tag = line["x"], "hover at event %.1f" % line["x"]
    lp = span_point(live_line(trace), x)
    check(lp is not None and line["event"] == lp[0] and line["live"] == lp[1],
          f"{tag}: event {line['event']} live {line['live']} == JSON live point {lp}")
    for r in trace["results"]:
        if r.get("error") or not r.get("timeline"):
            continue
        name, shown = r["resource"], line["held"].get(r["resource"], "missing")
        if r.get("failure") and x > r["failure"]["event"]:
            check(shown is None, f"{tag}: {name} shows out of memory (failed at {r['failure']['event']})")
            continue
        p = span_point(r["timeline"], x)
        check(shown == p[2] and line["at"].get(name) == p[0],
              f"{tag}: {name} held {shown} == JSON point {p}")


def check_exact_hover(line, trace, live):
    e = min(max(0, int(math.floor(line["x"] + 0.5))), len(live) - 1)  # as Math.round
    tag = "hover at event %.1f (exact)" % line["x"]
    check(line["event"] == e and line["live"] == live[e], f"{tag}: event {line['event']} live {line['live']} == "
          f"live bytes after event {e} from the allocations ({live[e]})")
    for r in trace["results"]:
        if r.get("error") or not r.get("timeline"):
            continue
        name, shown = r["resource"], line["held"].get(r["resource"], "missing")
        if r.get("failure") and e > r["failure"]["event"]:
            check(shown is None, f"{tag}: {name} shows out of memory (failed at {r['failure']['event']})")
            continue
        held = exact_held(trace, r)
        if held is None:
            p = span_point(r["timeline"], e)
            check(shown == p[2] and line["at"].get(name) == p[0], f"{tag}: {name} held {shown} == JSON point {p}")
        else:
            check(shown == held[e] and line["at"].get(name) == e,
                  f"{tag}: {name} held {shown} == held after event {e} from its chunks ({held[e]})")


def check_peaks(line, trace, zoomed):
    """Each line's highest drawn point is at the event of its peak (within one pixel's events in the
    overview; exactly when zoomed in to every event)."""
    lo, hi, px = line["lo"], line["hi"], line["plot_px"]
    tol = 0.5 if zoomed else 0.6 * (hi - lo) / px  # half a pixel column, and the path's rounding
    where = "zoomed" if zoomed else "overview"
    peaks = [("live", trace["peak_live_event"], exact_live(trace))]
    for r in trace["results"]:
        if not r.get("error") and r.get("timeline"):
            peaks.append((r["resource"], r.get("peak_held_event"), exact_held(trace, r)))
    for name, event, series in peaks:
        drawn = line["peaks"].get(name)
        if series is None or drawn is None or event is None or not (lo <= event <= hi):
            continue
        if event >= len(series) or series[event] != max(series):
            continue  # a stack that failed: its peak held may be the failure's state
        check(abs(drawn["event"] - event) <= tol + 1e-6,
              f"{where}: {name}'s highest point is drawn at event {drawn['event']:.2f}, its peak is at {event} "
              f"(tolerance {tol:.2f} events)")


def check_markers(line, trace):
    failed = sorted(r["resource"] for r in trace["results"] if r.get("failure"))
    check(sorted(line["oom"]) == failed, f"out-of-memory markers {sorted(line['oom'])} == failed stacks {failed}")
    live = live_line(trace)
    end = live[-1][0] if live else 0
    last = line["live_last_event"]
    n = trace["events"] if line.get("exact") else len(live)
    if n > 2 * line["plot_px"]:
        check(line["live_points"] <= 4 * line["plot_px"] + 8,
              f"overview: {n} live points downsampled to {line['live_points']} path points "
              f"(at most 4 per pixel column, {line['plot_px']:.0f} px)")
    if line.get("exact"):
        check_peaks(line, trace, False)
    check(last is not None and last >= end - 1, f"live line drawn to event {last} (its last point: {end})")
    whole = [r for r in trace["results"] if not r.get("error") and not r.get("failure")]
    if not trace.get("live_timeline") and not whole:
        check(True, "old report in which every stack failed: the live line is the longest replay's")
        return
    for r in trace["results"]:
        if r.get("failure"):
            check(last is not None and last > r["failure"]["event"],
                  f"live line continues after {r['resource']} ran out of memory at {r['failure']['event']}")


def check_zoomed_live(line, trace):
    if line.get("exact"):
        a = max(0, int(line["lo"] // 1))
        b = min(trace["events"] - 1, -int(-line["hi"] // 1))
        check(line["zoom"] is not None and line["live_points"] == 1 + 2 * (b - a),
              f"zoomed to {line['zoom']}: the live line steps through every event {a}-{b} "
              f"(path has {line['live_points']} points, {b - a + 1} events)")
        check_peaks(line, trace, True)
        return
    live = live_line(trace)
    inside = sum(1 for p in live if line["lo"] <= p[0] <= line["hi"])
    check(line["zoom"] is not None and inside <= line["live_points"] <= inside + 4,
          f"zoomed to {line['zoom']}: the live line is drawn through its {inside} JSON points in view "
          f"(path has {line['live_points']})")


def check_layout_hover(line, trace):
    a = trace["allocations"][line["allocation"]]
    text = line["text"]
    check(f"allocated at event {a[0]:,}" in text and f"({a[2]:,} B)" in text,
          f"layout hover on {line['stack']}: size {a[2]} and allocating event {a[0]} shown")
    frames = [trace["frames"][i] for i in trace["stacks"][a[3]]] if a[3] >= 0 and trace.get("stacks") else []
    check(all(f in text for f in frames), f"layout hover: its {len(frames)} stack frame(s) shown")


def invariant_count(trace, r, p):
    al, ad = trace["allocations"], r["addresses"]
    return sum(1 for k, a in enumerate(al) if a[0] <= p and (a[1] == -1 or p < a[1]) and ad[k] != -1)


def check_layout(line, trace):
    p = trace["peak_live_event"]
    check(line["event"] == p, f"layout shows event {line['event']} by default (peak_live_event {p})")
    for r in trace["results"]:
        name = r["resource"]
        if r.get("error") or not r.get("layout_known", False):
            continue
        if r.get("failure") and r["failure"]["event"] <= p:
            check(name not in line["blocks"], f"layout: {name} failed before the peak: no blocks drawn")
            continue
        want, inv = r["at_peak"]["live_blocks"], invariant_count(trace, r, p)
        got = line["blocks"].get(name)
        check(got == want == inv, f"layout: {name} shows {got} blocks == at_peak.live_blocks {want} "
                                  f"(contract invariant: {inv})")


def check_layout_at(line, trace, what):
    e = line["event"]
    for r in trace["results"]:
        name = r["resource"]
        if r.get("error") or not r.get("layout_known", False):
            continue
        if r.get("failure") and r["failure"]["event"] < e:
            check(name not in line["blocks"], f"{what}: {name} failed at {r['failure']['event']}: no blocks drawn")
            continue
        want = invariant_count(trace, r, e)
        check(line["blocks"].get(name) == want, f"{what}: {name} shows {line['blocks'].get(name)} blocks at "
                                                f"event {e} == live allocations with addresses {want}")


def check_interactions(kinds, trace):
    for line in kinds.get("pick", []):
        check(abs(line["event"] - line["x"]) <= 1 + trace["events"] / 200,
              f"click on the timeline at event {line['x']:.1f} shows the layout at {line['event']}")
        check_layout_at(line, trace, "clicked layout")
    for line in kinds.get("typed", []):
        check(line["event"] == line["typed"], f"event typed in the field ({line['typed']}) is shown ({line['event']})")
        check_layout_at(line, trace, "typed layout")
    for line in kinds.get("legend", []):
        check(line["hidden"] == line["before"] - 1 and line["after"] == line["before"] and
              "hide=" in line["hash_while_hidden"],
              f"legend click hides {line['stack']} ({line['before']} -> {line['hidden']} lines, hash "
              f"{line['hash_while_hidden']}) and a second click shows it again ({line['after']})")


def human(n):
    """Sizes as the tool's table writes them (report_text.cpp's human_bytes)."""
    v, u = float(n), 0
    while v >= 1024.0 and u < 4:
        v /= 1024.0
        u += 1
    return f"{n} B" if u == 0 else "%.2f %s" % (v, ["B", "KiB", "MiB", "GiB", "TiB"][u])


def pct(f):
    return "%.1f%%" % (100.0 * f)


def speed(t):
    if len(t["repeats"]) < 2:
        return "%.1f" % t["median"]
    return "%.1f (%.1f-%.1f)" % (t["median"], t["min"], t["max"])


def text_rows(path, trace):
    """The text output's table rows of `trace`: {spec: line}."""
    name = trace["path"].replace("\\", "/").split("/")[-1]
    rows, inside = {}, False
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.startswith("trace "):
                inside = line.startswith(f"trace {name}:")
            elif inside and line.startswith("  ") and not line.startswith("    "):
                rows[line[2:].split(" ")[0]] = line
    return rows


def check_figures(line, trace, text):
    """One definition of every figure: the table, the layout row at the peak and the text output
    show the same numbers, and they are results.json's figures."""
    peak = trace["peak_live_event"]
    rows = text_rows(text, trace) if text else None
    compared = 0
    for r in trace["results"]:
        name, f = r["resource"], r.get("figures")
        if r.get("error") or f is None:
            continue
        shown = line["table"].get(name, {})
        want = {"peak_held": human(f["peak_held_bytes"]), "ratio": "%.3f" % f["footprint_ratio"],
                "ns": speed(f["ns_per_op"])}
        if "external_fragmentation" in f and f.get("layout_known"):
            want["external"] = pct(f["external_fragmentation"]) + " of " + human(f["free_bytes"])
            want["largest"] = human(f["largest_free_bytes"])
        for k, v in want.items():
            check(shown.get(k) == v, f"table: {name} {k} {shown.get(k)!r} == results.json figures {v!r}")
        lay = line["layout"].get(name)
        if line["layout_event"] == peak and "external" in want and lay is not None:
            compared += 1
            check(lay["external"] == shown.get("external"),
                  f"layout row at the peak: {name} external {lay['external']!r} == table {shown.get('external')!r}")
            check((lay["free"], lay["largest"], lay["internal"]) ==
                  (f["free_bytes"], f["largest_free_bytes"], f["internal_bytes"]),
                  f"layout row at the peak: {name} free/largest/slack {lay['free']}/{lay['largest']}/"
                  f"{lay['internal']} == results.json {f['free_bytes']}/{f['largest_free_bytes']}/{f['internal_bytes']}")
        if rows is not None:
            row = rows.get(name, "")
            missing = [v for v in [shown.get(k) for k in ("peak_held", "ratio", "external", "largest", "ns")]
                       if v is not None and v not in row]
            check(row and not missing, f"text output: {name}'s row shows the table's figures (missing: {missing})")
    if line["layout_event"] == peak and trace.get("allocations"):
        check(compared > 0, f"{compared} layout row(s) compared with the table at the peak")


def check_verdict(line, trace):
    v, s = trace.get("verdict") or {}, trace.get("verdict_spread")
    if not s or not v.get("fastest"):
        return
    check(v["leanest"] != "cuda" and v["fastest"] != "cuda", "the verdict leaves the cuda baseline aside")
    a, b = s["fastest_ns_per_op"], (s["fastest_runner_up"] or {}).get("ns_per_op")
    if b:
        overlap = a["min"] <= b["max"] and b["min"] <= a["max"]
        check(s["fastest_clear"] == (not overlap), f"fastest is clear ({s['fastest_clear']}) unless the spreads overlap")
    check(("no clear winner" in (line["fastest"] or "")) == (not s["fastest_clear"]),
          f"the page says 'no clear winner' exactly when the verdict has none: {line['fastest']!r}")
    check(v["fastest"] in (line["fastest"] or "") and speed(a) in (line["fastest"] or ""),
          f"the page's fastest names {v['fastest']} with its median and spread {speed(a)}")


def check_by_stack(line, trace):
    if "live_at_peak_by_stack" not in trace or not isinstance(trace.get("allocations", []), list):
        return
    p, groups = trace["peak_live_event"], {}
    for a in trace.get("allocations", []):
        if a[0] <= p and (a[1] == -1 or p < a[1]):
            g = groups.setdefault(a[3], [0, 0])
            g[0] += a[2]
            g[1] += 1
    want = sorted(([k, v[0], v[1]] for k, v in groups.items()), key=lambda x: (-x[1], -x[2], x[0]))[:100]
    got = [[r["stack"], r["bytes"], r["blocks"]] for r in line["rows"]]
    check(line["shown"], "the 'live at the peak, by call stack' table is shown")
    if trace.get("allocations"):
        check(got == want, f"by-stack table: {len(got)} rows == grouped from the allocations at the peak ({len(want)})")
        other = trace.get("live_at_peak_other_stacks", {}).get("bytes", 0)
        check(sum(r[1] for r in got) + other == trace["peak_live_bytes"],
              "by-stack bytes add up to the peak live bytes")
    for r in line["rows"]:
        frames = [trace["frames"][i] for i in trace["stacks"][r["stack"]]] if r["stack"] >= 0 else []
        check(not frames or frames[0] in r["text"], f"by-stack row {r['stack']} names its innermost frame")


def band_order(trace, limit):
    """The allocations drawn one by one, as the page stacks them by size: the `limit` with the most
    bytes x events (ties: the earlier allocation), then largest first (ties: earlier event, index)."""
    al, end = trace["allocations"], trace["events"]
    life = [((end if a[1] == -1 else a[1]) - a[0]) for a in al]
    keep = sorted(range(len(al)), key=lambda k: (-al[k][2] * life[k], k))[:limit]
    return sorted(keep, key=lambda k: (-al[k][2], al[k][0], k))


def chunk_positions(r):
    ranges = []
    for c in sorted(r["chunks"], key=lambda c: c[0]):
        if ranges and c[0] <= ranges[-1][0] + ranges[-1][1]:
            ranges[-1][1] = max(ranges[-1][1], c[0] + c[1] - ranges[-1][0])
        else:
            ranges.append([c[0], c[1]])
    pos, out = 0, []
    for off, size in ranges:
        out.append((off, size, pos))
        pos += size
    return out


def band_under(trace, line, order):
    """The allocation under (event, bytes) of a hover, worked out from results.json."""
    al, e, y = trace["allocations"], line["event"], line["bytes"]
    live = [k for k in order if al[k][0] <= e and (al[k][1] == -1 or e < al[k][1])]
    if line["mode"] == "size":
        base = 0
        for k in live:
            if base <= y < base + al[k][2]:
                return str(k)
            base += al[k][2]
        return "rest" if len(order) < len(al) and y < exact_live(trace)[e] else None
    r = next(r for r in trace["results"] if "address:" + r["resource"] == line["mode"])
    ranges = chunk_positions(r)
    for k in live:
        off = r["addresses"][k]
        g = [g for g in ranges if g[0] <= off < g[0] + g[1]]
        if g and g[0][2] + off - g[0][0] <= y < g[0][2] + off - g[0][0] + al[k][2]:
            return str(k)
    return None


def check_bands(kinds, trace):
    lines = kinds.get("bands", [])
    if not check(bool(lines), "the bands are drawn"):
        return
    n, limit = len(trace["allocations"]), lines[0]["limit"]
    order = band_order(trace, limit)
    check(lines[0]["mode"] == "size" and lines[0]["drawn"] == min(n, limit),
          f"bands by size: {lines[0]['drawn']} drawn one by one == min({n} allocations, {limit})")
    if n > limit:
        check(f"the other {n - limit:,} are the grey band" in lines[0]["note"], f"the page says {n - limit} are summed")
    for line in kinds.get("bands-hover", []):
        want = band_under(trace, line, order)
        check(want is not None and line["hovered"] == want,
              f"bands {line['mode']}: hover at event {line['event']}, {line['bytes']:.0f} B shows allocation "
              f"{line['hovered']} == the one there worked out from results.json ({want}; aimed at {line['target']})")
        if line["hovered"] in ("rest", None, ""):
            continue
        a = trace["allocations"][int(line["hovered"])]
        frames = [trace["frames"][i] for i in trace["stacks"][a[3]]] if a[3] >= 0 and trace.get("stacks") else []
        check(f"({a[2]:,} B)" in line["text"] and f"allocated at event {a[0]:,}" in line["text"] and
              all(f in line["text"] for f in frames), f"bands hover names the size, the events and {len(frames)} frame(s)")
    check(any(l["mode"].startswith("address:") for l in lines), "the bands were stacked by address too")
    for line in kinds.get("bands-zoom", []):
        check(line["bands"] == line["timeline"], f"the bands show the timeline's zoom {line['timeline']}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dom")
    ap.add_argument("results")
    ap.add_argument("--trace", type=int, default=0)
    ap.add_argument("--expect-oom", action="store_true")
    ap.add_argument("--expect-layout", action="store_true")
    ap.add_argument("--expect-stacks", action="store_true", help="the trace records call stacks")
    ap.add_argument("--text", help="the tool's table output of the same run, to compare its figures")
    args = ap.parse_args()
    with open(args.dom, encoding="utf-8") as f:
        lines = selftest_lines(f.read())
    with open(args.results, encoding="utf-8") as f:
        trace = json.load(f)["traces"][args.trace]
    if not check(lines is not None, "the page wrote its self-test (<pre id=\"selftest\">)"):
        return 1
    kinds = {}
    for line in lines:
        kinds.setdefault(line["kind"], []).append(line)
    check(len(kinds.get("hover", [])) >= 5, f"{len(kinds.get('hover', []))} hover readouts")
    for line in kinds.get("hover", []):
        check_hover(line, trace)
    check(any(line.get("zoom") for line in kinds.get("hover", [])), "hovered after zooming in (drag-select)")
    for line in kinds.get("markers", []):
        check_markers(line, trace)
    for line in kinds.get("zoomed-live", []):
        check_zoomed_live(line, trace)
    if args.expect_oom:
        check(any(r.get("failure") for r in trace["results"]), "the run has a stack that ran out of memory")
    if args.expect_layout:
        if check("layout" in kinds, "the layout view was drawn"):
            check_layout(kinds["layout"][0], trace)
        for line in kinds.get("layout-hover", []):
            check_layout_hover(line, trace)
    else:
        check("layout" not in kinds, "no layout view (the report has no addresses)")
    check_interactions(kinds, trace)
    for line in kinds.get("figures", []):
        check_figures(line, trace, args.text)
        check_verdict(line, trace)
    for line in kinds.get("by-stack", []):
        check_by_stack(line, trace)
    if args.expect_layout:
        check_bands(kinds, trace)
    if args.expect_stacks:
        rows = kinds.get("by-stack", [{}])[0].get("rows", [])
        check(len(rows) > 1 and all(r["stack"] >= 0 for r in rows), f"{len(rows)} call stacks at the peak")
    check(len(kinds.get("legend", [])) == 1, "the legend was clicked")
    check(kinds.get("verdict", [{}])[0].get("shown") is True, "the verdict panel is shown")
    for line in kinds.get("timing", []):
        print("# timing: " + json.dumps(line))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
