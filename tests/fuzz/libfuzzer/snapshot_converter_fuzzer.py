#!/usr/bin/env python3
"""libFuzzer target (through Atheris, libFuzzer for Python): the snapshot converter behind
`gpumem convert` on any bytes. A file that is not a snapshot must end in SnapshotError, never in
another exception; one that converts must give a trace the gpumem trace reader accepts (every
number from 0 to 2^64-1). Run as: python snapshot_converter_fuzzer.py [libFuzzer flags] CORPUS"""
import io
import pathlib
import re
import sys

import atheris

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[3] / "tools" / "gpumem"))
with atheris.instrument_imports():
    import snapshot_to_csv as converter

LINE = re.compile(r"0,(\d+),(allocate|free),0x([0-9a-f]+),(\d+),(\d+)")
# The Frames column: a plain field (no comma, quote or line break) or a quoted one.
FRAMES_LINE = re.compile(LINE.pattern + r'(,([^,"\r\n]*|"([^"\r\n]|"")*"))?')
HEADER = "Thread,Time,Action,Pointer,Size,Stream"


def check(text):
    lines = text.split("\n")
    assert lines[0] in (HEADER, HEADER + ",Frames") and lines[-1] == "", lines[:1]
    pattern = FRAMES_LINE if lines[0].endswith(",Frames") else LINE
    for line in lines[1:-1]:
        m = pattern.fullmatch(line)
        assert m, line[:200]
        for value in (int(m[1]), int(m[3], 16), int(m[4]), int(m[5])):
            assert value <= converter.MAX_U64, line[:200]


def test_one_input(data):
    try:
        snapshot = converter.read_snapshot(io.BytesIO(data))
    except converter.SnapshotError:
        return
    for device in (0, 1):
        try:
            rows, _ = converter.convert(snapshot, device)
        except converter.SnapshotError:
            continue
        out = io.StringIO()
        converter.write_csv(rows, out)
        check(out.getvalue())


if __name__ == "__main__":
    converter.limit_memory(4096)  # as `gpumem convert` does for a file of -max_len bytes
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()
