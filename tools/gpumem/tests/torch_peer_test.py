#!/usr/bin/env python3
"""Tests of torch_peer.py (PyTorch's allocator as a peer of `gpumem bench -w replay`) that need no
GPU: the trace is read as the replayer reads it (pointers as dense reused slots, streams numbered
in order of first use, peak live bytes, frees of unknown pointers dropped, bad lines named), and
without PyTorch or a GPU the script answers with a one-line reason. Run: torch_peer_test.py
TOOL_DIR (the folder of torch_peer.py)."""
import contextlib
import io
import json
import os
import sys
import tempfile

sys.path.insert(0, sys.argv[1] if len(sys.argv) > 1 else ".")
import torch_peer  # noqa: E402

failures = 0


def check(name, cond, detail=""):
    global failures
    print(("ok - " if cond else "FAIL - ") + name)
    if not cond:
        print(detail)
        failures += 1


def trace_file(body):
    f = tempfile.NamedTemporaryFile("w", suffix=".csv", delete=False)
    f.write("Thread,Time,Action,Pointer,Size,Stream\n" + body)
    f.close()
    return f.name


path = trace_file("0,1,allocate,0x10,1000,0\n0,2,allocate,0x20,3000,0x7f\n0,3,free,0x10,1000,0\n"
                  "0,4,allocate,0x30,4000,0x7f\n0,5,free,0x99,8,0\n0,6,free,0x20,3000,0x7f\n"
                  "0,7,free,0x30,4000,0x7f\n")
events, slots, streams, peak = torch_peer.read_trace(path)
check("events: allocations and frees in order, the unknown free dropped",
      [e[0] for e in events] == [True, True, False, True, False, False], events)
check("a freed pointer's slot is reused", events[3][1] == events[0][1] and slots == 2,
      (events, slots))
check("streams numbered in order of first use", streams == [0, 0x7f] and events[1][3] == 1,
      (streams, events))
check("peak live bytes", peak == 7000, peak)
os.unlink(path)

bad = trace_file("0,1,allocate,0x10,twelve,0\n")
with contextlib.redirect_stdout(io.StringIO()) as out:
    rc = torch_peer.main([bad])
answer = json.loads(out.getvalue())
check("a bad line: skipped, naming the file and line",
      rc == 0 and "skipped" in answer and bad + ":2" in answer["skipped"], answer)
os.unlink(bad)

ok = trace_file("0,1,allocate,0x10,1000,0\n0,2,free,0x10,1000,0\n")
with contextlib.redirect_stdout(io.StringIO()) as out:
    rc = torch_peer.main(["--expandable", ok])
answer = json.loads(out.getvalue())
has_torch = True
try:
    import torch  # noqa: F401
except ImportError:
    has_torch = False
if not has_torch:
    check("without PyTorch: one line that says so", rc == 0 and "PyTorch is not installed"
          in answer.get("skipped", "") and "\n" not in answer["skipped"], answer)
else:
    check("with PyTorch: figures or a reason", rc == 0 and ("skipped" in answer or
          answer.get("peer") == "torch_expandable"), answer)
check("--expandable sets PyTorch's allocator option before PyTorch starts",
      os.environ.get("PYTORCH_CUDA_ALLOC_CONF") == "expandable_segments:True")
os.unlink(ok)

print(f"{failures} failure(s)")
sys.exit(1 if failures else 0)
