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


def check_hover(line, trace):
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


def check_markers(line, trace):
    failed = sorted(r["resource"] for r in trace["results"] if r.get("failure"))
    check(sorted(line["oom"]) == failed, f"out-of-memory markers {sorted(line['oom'])} == failed stacks {failed}")
    live = live_line(trace)
    end = live[-1][0] if live else 0
    last = line["live_last_event"]
    if len(live) > 2 * line["plot_px"]:
        check(line["live_points"] <= 4 * line["plot_px"] + 8,
              f"overview: {len(live)} live points downsampled to {line['live_points']} path points "
              f"(at most 4 per pixel column, {line['plot_px']:.0f} px)")
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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dom")
    ap.add_argument("results")
    ap.add_argument("--trace", type=int, default=0)
    ap.add_argument("--expect-oom", action="store_true")
    ap.add_argument("--expect-layout", action="store_true")
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
    check(len(kinds.get("legend", [])) == 1, "the legend was clicked")
    check(kinds.get("verdict", [{}])[0].get("shown") is True, "the verdict panel is shown")
    for line in kinds.get("timing", []):
        print("# timing: " + json.dumps(line))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
