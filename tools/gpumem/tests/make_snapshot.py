#!/usr/bin/env python3
"""Writes a small PyTorch-style memory snapshot pickle (plain dicts, as _dump_snapshot does)."""
import pickle
import sys

trace = [
    {"action": "segment_alloc", "addr": 0x7f0000000000, "size": 2097152, "stream": 0, "time_us": 1},
    {"action": "alloc", "addr": 0x7f0000000000, "size": 512, "stream": 0, "time_us": 2, "frames": []},
    {"action": "alloc", "addr": 0x7f0000000200, "size": 1024, "stream": 7, "time_us": 3, "frames": []},
    {"action": "free_requested", "addr": 0x7f0000000000, "size": 512, "stream": 0, "time_us": 4},
    {"action": "free_completed", "addr": 0x7f0000000000, "size": 512, "stream": 0, "time_us": 5},
    {"action": "alloc", "addr": 0x7f0000000600, "size": 4096, "stream": 0, "time_us": 6},
    {"action": "free_completed", "addr": 0x7f0000000200, "size": 1024, "stream": 7, "time_us": 7},
]
snapshot = {"segments": [], "device_traces": [trace], "allocator_settings": {}}
with open(sys.argv[1], "wb") as f:
    pickle.dump(snapshot, f)
