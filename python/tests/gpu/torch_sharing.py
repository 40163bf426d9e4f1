"""CUDA tensors of gpumem memory sent between processes with torch.multiprocessing (a Pipe to a
spawned process), one case per run, as a JSON line "RESULT {...}":

    send-use      this process runs under gpumem.torch.use(): sending a CUDA tensor raises
                  gpumem.torch.SharingError (before PyTorch's own error)
    send-pool     a tensor in a gpumem.torch.mem_pool() raises SharingError; its clone made
                  outside the pool is sent and received intact
    receive-use   PyTorch's allocator here, gpumem.torch.use() in the receiver: the receiver's
                  recv() raises SharingError

    python python/tests/gpu/torch_sharing.py CASE"""

import json
import os
import sys

for key, value in {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
                   "NVSHMEM_DISABLE_NVLS": "1"}.items():
    os.environ.setdefault(key, value)


def receiver(conn, use_gpumem):
    """Receives one tensor and answers its sum, or the error it got."""
    import torch

    import gpumem.torch as gt

    if use_gpumem:
        gt.use()
    try:
        t = conn.recv()
        conn.send({"sum": float(t.sum().item())})
    except Exception as e:  # noqa: BLE001  (reported to the sender)
        conn.send({"error": f"{type(e).__module__}.{type(e).__name__}: {e}"})
    del torch


def send(tensor):
    """Sends tensor to a spawned receiver; returns what it answered or the error sending raised."""
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    here, there = ctx.Pipe()
    proc = ctx.Process(target=receiver, args=(there, False))
    proc.start()
    try:
        here.send(tensor)
        answer = here.recv()
    except Exception as e:  # noqa: BLE001
        answer = {"send_error": f"{type(e).__module__}.{type(e).__name__}: {e}"}
        proc.kill()
    proc.join(60)
    return answer


def main(case):
    import torch
    import torch.multiprocessing as mp

    import gpumem.torch as gt

    out = {"case": case}
    if case == "send-use":
        gt.use()
        out["send"] = send(torch.ones(1 << 20, device="cuda"))
    elif case == "send-pool":
        pool = gt.mem_pool()
        with torch.cuda.use_mem_pool(pool):
            t = torch.ones(1 << 20, device="cuda")
        out["send"] = send(t)
        out["send_clone"] = send(t.clone())  # PyTorch's allocator: shared as usual
    elif case == "receive-use":
        ctx = mp.get_context("spawn")
        here, there = ctx.Pipe()
        proc = ctx.Process(target=receiver, args=(there, True))
        proc.start()
        here.send(torch.ones(1 << 20, device="cuda"))
        out["received"] = here.recv()
        proc.join(60)
    print("RESULT " + json.dumps(out), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
