#!/usr/bin/env python3
"""Captures a real PyTorch memory snapshot (needs torch and a GPU), for checking `gpumem convert`
on the genuine format: python3 torch_snapshot.py OUT.pickle"""
import sys

import torch

torch.cuda.memory._record_memory_history(max_entries=100000)
model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 1024)).cuda()
opt = torch.optim.Adam(model.parameters())
for step in range(3):
    x = torch.randn(64 * (step + 1), 1024, device="cuda")
    loss = model(x).square().mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
torch.cuda.synchronize()
torch.cuda.memory._dump_snapshot(sys.argv[1])
print("snapshot written:", sys.argv[1])
