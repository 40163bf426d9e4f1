"""NCCL registration of gpumem pools on communicators the program makes itself (nccl_own_comm.py, no
PyTorch): blocks spanning several physical handles registered per handle and, with an NCCL that
takes multi-handle buffers (2.29.2 and later), per run of handles; all_reduce sums right; NCCL's
log names the registered buffers. GPUMEM_TEST_NCCL names the NCCL library to load (default: the
nvidia-nccl package's, else the system's). Skips without two GPUs or without NCCL."""

import json
import os
import subprocess
import sys

import pytest

from gpumem._torch_nccl import MULTI_HANDLE_NCCL
from torch_gpu_support import HERE, NEEDS_TWO_GPUS, NO_MULTICAST

pytestmark = [NEEDS_TWO_GPUS]


def run(unit):
    args = [sys.executable, "nccl_own_comm.py", "--unit", unit]
    if os.environ.get("GPUMEM_TEST_NCCL"):
        args += ["--nccl", os.environ["GPUMEM_TEST_NCCL"]]
    env = dict(os.environ, **NO_MULTICAST, NCCL_DEBUG="INFO", NCCL_DEBUG_SUBSYS="REG")
    proc = subprocess.run(args, capture_output=True, text=True, env=env, timeout=300, cwd=HERE)
    lines = [x for x in proc.stdout.splitlines() if x.startswith("{")]
    assert lines, f"rc {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    out = json.loads(lines[-1])
    if proc.returncode == 2:
        pytest.skip(out.get("skipped", "nccl_own_comm.py cannot run here"))
    print(json.dumps(out))
    return proc, out


def registered_in_log(proc) -> int:
    return sum("NCCL INFO register comm" in x for x in (proc.stdout + proc.stderr).splitlines())


def test_each_handle_registered_and_all_reduced():
    proc, out = run("handle")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert out["sums_ok"]
    for rank in out["ranks"]:
        assert rank["failures"] == 0, rank["last_failure"]
        # one registration per physical handle, and together exactly the mapped memory
        assert len(rank["registrations"]) == rank["handles"] > 2
        assert sum(b for _, b in rank["registrations"]) == sum(b for _, b in rank["mapped_runs"])
    assert registered_in_log(proc) >= sum(r["handles"] for r in out["ranks"])


def test_runs_of_handles_registered_with_an_nccl_that_takes_them():
    proc, out = run("run")
    version = tuple(int(x) for x in out.get("nccl", "0.0.0").split("."))
    if version < MULTI_HANDLE_NCCL:
        pytest.skip(f"NCCL {out['nccl']} registers one handle per buffer (multi-handle buffers "
                    "from 2.29.2; set GPUMEM_TEST_NCCL to a newer libnccl.so.2)")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert out["sums_ok"]
    for rank in out["ranks"]:
        assert rank["failures"] == 0, rank["last_failure"]
        # one registration per growth's run of handles (several handles each), and together
        # exactly the mapped memory
        assert 1 <= len(rank["registrations"]) < rank["handles"]
        assert sum(b for _, b in rank["registrations"]) == sum(b for _, b in rank["mapped_runs"])
    assert registered_in_log(proc) >= sum(len(r["registrations"]) for r in out["ranks"])
