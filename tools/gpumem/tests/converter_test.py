#!/usr/bin/env python3
"""Tests of snapshot_to_csv.py (the converter behind `gpumem convert`): call stacks kept in the
Frames column, quoted when needed; no Frames column when the snapshot has none; bad frames refused
with SnapshotError. Run: converter_test.py TOOL_DIR (the folder of snapshot_to_csv.py)."""
import io
import sys

sys.path.insert(0, sys.argv[1] if len(sys.argv) > 1 else ".")
import snapshot_to_csv as converter  # noqa: E402

failures = 0


def check(name, cond, detail=""):
    global failures
    print(("ok - " if cond else "FAIL - ") + name)
    if not cond:
        print(detail)
        failures += 1


def csv_of(trace):
    rows, from_history = converter.convert({"segments": [], "device_traces": [trace]}, 0)
    out = io.StringIO()
    converter.write_csv(rows, out)
    return out.getvalue(), from_history


F = [{"filename": "model.py", "line": 12, "name": "forward"},
     {"filename": "train.py", "line": 40, "name": "main"}]
trace = [
    {"action": "alloc", "addr": 0x1000, "size": 512, "stream": 0, "time_us": 5, "frames": F},
    {"action": "alloc", "addr": 0x2000, "size": 64, "stream": 0, "time_us": 6,
     "frames": [{"filename": "t.cpp", "line": 3, "name": 'f<int, "x">'},
                {"filename": "", "line": 0, "name": "operator|"}]},
    {"action": "free_completed", "addr": 0x1000, "size": 512, "stream": 0, "time_us": 7,
     "frames": F},
    {"action": "alloc", "addr": 0x3000, "size": 128, "stream": 0, "time_us": 8},
]
text, _ = csv_of(trace)
want = ("Thread,Time,Action,Pointer,Size,Stream,Frames\n"
        "0,5,allocate,0x1000,512,0,forward (model.py:12)|main (train.py:40)\n"
        '0,6,allocate,0x2000,64,0,"f<int, ""x""> (t.cpp:3)|operator/"\n'
        "0,7,free,0x1000,512,0\n"
        "0,8,allocate,0x3000,128,0\n")
check("frames kept on allocates, innermost first, quoted when needed", text == want,
      f"got:\n{text}\nwant:\n{want}")

text, _ = csv_of([{"action": "alloc", "addr": 0x10, "size": 8, "time_us": 1, "frames": []}])
check("no frames: the 6-column format", text == "Thread,Time,Action,Pointer,Size,Stream\n"
      "0,1,allocate,0x10,8,0\n", text)

try:
    csv_of([{"action": "alloc", "addr": 0x10, "size": 8, "frames": [{"name": ["x"]}]}])
    check("a frame with a non-text name is refused", False, "no error")
except converter.SnapshotError as e:
    check("a frame with a non-text name is refused", "frames[0]: name is a list" in str(e), str(e))

try:
    csv_of([{"action": "alloc", "addr": 0x10, "size": 8, "frames": 7}])
    check("frames that are not a list are refused", False, "no error")
except converter.SnapshotError as e:
    check("frames that are not a list are refused", "expected a list" in str(e), str(e))

print(f"{failures} failure(s)")
sys.exit(1 if failures else 0)
