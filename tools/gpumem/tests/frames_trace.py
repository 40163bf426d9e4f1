#!/usr/bin/env python3
"""Writes a copy of a trace with a Frames column, for the report page's by-stack table and band
hovers: each allocate gets one of a few made-up call stacks, chosen by its size, so that the
grouping at the peak is known from the trace alone.

  frames_trace.py IN.csv OUT.csv
"""
import sys

STACKS = [
    "attention (model.py:88)|block_forward (model.py:120)|train_step (train.py:40)",
    "mlp (model.py:64)|block_forward (model.py:121)|train_step (train.py:40)",
    "embedding (model.py:30)|forward (model.py:150)|train_step (train.py:40)",
    "adam_step (optim.py:12)|train_step (train.py:52)",
    "all_reduce (dist.py:7)|train_step (train.py:47)",
]


def main():
    src, dst = sys.argv[1], sys.argv[2]
    with open(src, encoding="utf-8") as f, open(dst, "w", encoding="utf-8") as out:
        header = f.readline().rstrip("\n")
        out.write(header + ",Frames\n")
        for line in f:
            line = line.rstrip("\n")
            if not line:
                continue
            fields = line.split(",")
            frames = STACKS[int(fields[4]).bit_length() % len(STACKS)] if fields[2] == "allocate" else ""
            out.write(line + "," + frames + "\n")


if __name__ == "__main__":
    main()
