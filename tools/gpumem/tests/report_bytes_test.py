#!/usr/bin/env python3
"""Property test of the tool's JSON: any bytes in a trace's name, its stack frames and a resource
spec give JSON that parses (results.json, replay --json, bench --json) and a page whose embedded
data cannot end or comment out its <script>.

report_bytes_test.py GPUMEM_BINARY WORK_DIR [ROUNDS]
Each round writes a trace whose file name and Frames column hold random bytes (hostile ones
mixed in: "</script", "<!--", U+2028, bytes that are not UTF-8), replays it with --report over a
stack whose logging layer's file name holds the same bytes, then checks that results.json is
valid UTF-8 JSON whose texts are the bytes with each invalid sequence as U+FFFD, that the page's
data element holds no "</script", "<!--" or "<script" and parses to the same JSON, and that
invalid bytes were said on stderr (once). The same trace and stack then go through replay --json
and bench --json, whose output must parse the same way."""
import json
import os
import random
import re
import shutil
import subprocess
import sys

HOSTILE = [b"</script>", b"<!--<script", b"</SCRIPT", b"-->", b"\xe2\x80\xa8", b"\xe2\x80\xa9",
           b"\xff", b"\xc0\xaf", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xe2\x82", b"&amp;",
           b"\\u003c", b'"', b"\\", b"\x7f", b"\x01", "é€𝄞".encode()]


def random_bytes(rng, n, forbidden):
    out = bytearray()
    while len(out) < n:
        if rng.random() < 0.3:
            out += rng.choice(HOSTILE)
        else:
            out.append(rng.randrange(256))
    return bytes(b for b in out if b not in forbidden)


def same_text(got, raw):
    """`got` (from JSON) is `raw` decoded with each invalid sequence as U+FFFD (runs of U+FFFD
    compared as one: decoders differ in how many a bad sequence gives)."""
    def squeeze(t):
        return re.sub("\ufffd+", "\ufffd", t)
    return squeeze(got) == squeeze(raw.decode("utf-8", "replace"))


def spec_safe(raw):
    """`raw` without the characters of the spec grammar, to be a logging layer's file name."""
    return bytes(b for b in raw if b not in b">:,=/\0") or b"x"


def check_stdout_json(run, what, trace, spec):
    """None when `run` printed valid UTF-8 JSON whose trace path and resource are `trace` and
    `spec`; else the problem."""
    if run.returncode != 0:
        return f"{what}: exit {run.returncode}: {run.stderr[-300:]!r}"
    try:
        data = json.loads(run.stdout.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        return f"{what} is not UTF-8 JSON: {e}"
    if what == "bench --json":
        rows = [r for w in data["workloads"] for r in w["rows"].values()]
        if not rows or not all(any(same_text(k, spec) for k in r) for r in rows):
            return f"{what}: the resource is not the spec's text"
        return None
    t = data["traces"][0]
    if not same_text(t["path"], trace) or not same_text(t["results"][0]["resource"], spec):
        return f"{what}: path or resource differ: {t['path']!r} {t['results'][0]['resource']!r}"
    return None


def csv_field(raw):
    return b'"' + raw.replace(b'"', b'""') + b'"'


def random_case(rng):
    name = random_bytes(rng, rng.randrange(1, 40), b"/\0") or b"x"
    return name, [random_bytes(rng, rng.randrange(0, 60), b"|\r\n") for _ in range(3)]


def one_round(binary, work, i, name, frames):
    folder = os.path.join(work, f"r{i}").encode()
    os.makedirs(folder)
    trace = os.path.join(folder, b"t" + name + b".csv")
    rows = [b"Thread,Time,Action,Pointer,Size,Stream,Frames",
            b"0,1,allocate,0x1000,512,0," + csv_field(b"|".join(frames)),
            b"0,2,allocate,0x2000,1024,0," + csv_field(frames[0]),
            b"0,3,free,0x1000,512,0", b"0,4,free,0x2000,1024,0"]
    with open(trace, "wb") as f:
        f.write(b"\n".join(rows) + b"\n")
    report = os.path.join(folder, b"rep")
    spec = b"logging:file=" + os.path.join(folder, b"log" + spec_safe(name) + b".csv") + b">pool"
    run = subprocess.run([binary.encode(), b"replay", trace, b"-r", spec, b"--simulate",
                          b"--no-progress", b"--report", report], capture_output=True)
    if run.returncode != 0:
        return f"exit {run.returncode}: {run.stderr[-500:]!r}"
    raw = open(os.path.join(report, b"results.json"), "rb").read()
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        return f"results.json is not UTF-8 JSON: {e}"
    page = open(os.path.join(report, b"index.html"), "rb").read().decode("utf-8")
    m = re.search(r'<script id="gpumem-data" type="application/json">(.*?)</script>', page, re.S)
    if not m:
        return "no data element in the page"
    embedded = m.group(1)
    for bad in ("</script", "<!--", "<script"):
        if bad in embedded.lower():
            return f"the page's data holds {bad!r}"
    if "\u2028" in embedded or "\u2029" in embedded:
        return "the page's data holds U+2028/U+2029 unescaped"
    if json.loads(embedded) != data:
        return "the page's data differs from results.json"
    t = data["traces"][0]
    if not same_text(t["path"], trace) or not same_text(t["results"][0]["resource"], spec + b">cuda"):
        return f"results.json: path or resource differ: {t['path']!r} {t['results'][0]['resource']!r}"
    if not all(any(same_text(f, raw) for f in t["frames"]) for raw in frames if raw):
        return f"results.json: the frames differ: {t['frames']!r}"
    valid = all(_is_utf8(b) for b in [name] + frames)
    said = b"not UTF-8" in run.stderr
    if said != (not valid) or run.stderr.count(b"not UTF-8") > 1:
        return f"stderr says 'not UTF-8' {run.stderr.count(b'not UTF-8')} time(s); valid={valid}"
    common = [b"-r", spec, b"--simulate", b"--no-progress", b"--json"]
    replay = subprocess.run([binary.encode(), b"replay", trace] + common, capture_output=True)
    problem = check_stdout_json(replay, "replay --json", trace, spec + b">cuda")
    if problem or i % 8 != 0:  # bench: every 8th round (round 0 included)
        return problem
    bench = subprocess.run([binary.encode(), b"bench", b"-w", b"pair", b"--smoke"] + common,
                           capture_output=True)
    return check_stdout_json(bench, "bench --json", trace, spec)


def _is_utf8(b):
    try:
        b.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def main():
    binary, work = sys.argv[1], sys.argv[2]
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 40
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    rng = random.Random(26)
    failures = 0
    # Round 0: valid UTF-8 that once blanked the page; then random bytes.
    cases = [(b"a<!--<script", [b"f</script>", b"<!--<script x", "\u2028é".encode()])]
    cases += [random_case(rng) for _ in range(rounds)]
    for i, (name, frames) in enumerate(cases):
        problem = one_round(binary, work, i, name, frames)
        if problem:
            failures += 1
            print(f"FAIL - round {i}: {problem}")
    print(f"{'ok' if failures == 0 else 'FAIL'} - {len(cases) - failures}/{len(cases)} rounds of random "
          "bytes in names and frames: valid JSON, a safe page")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
