"""gpumem.replay and the `gpumem` console script run the bundled tool: same results as its JSON."""

import json
import shutil
import subprocess
import sysconfig
from pathlib import Path

import pytest

import gpumem

GOLDEN = Path(__file__).resolve().parents[2] / "tools" / "gpumem" / "tests" / "golden.csv"


def console_script():
    """The `gpumem` script pip installed beside this interpreter (or on PATH); None without."""
    beside = Path(sysconfig.get_path("scripts")) / "gpumem"
    return str(beside) if beside.is_file() else shutil.which("gpumem")


def test_replay_returns_the_golden_numbers():
    out = gpumem.replay(GOLDEN, "pool:initial=1MiB", simulate=True)
    (trace,) = out["traces"]
    (result,) = trace["results"]
    assert result["peak_held_bytes"] == 1048576
    assert result["at_peak"]["largest_free_bytes"] == 1038336
    assert result["at_peak"]["internal_bytes"] == 192


def test_replay_equals_the_command_lines_json():
    script = console_script()
    if script is None:
        pytest.skip("no gpumem console script (the package was not installed with pip)")
    specs = ["pool:initial=1MiB", "arena"]
    args = [script, "replay", str(GOLDEN), "--simulate", "--json", "--no-progress"]
    for spec in specs:
        args += ["-r", spec]
    cli = json.loads(subprocess.run(args, capture_output=True, text=True, check=True).stdout)
    py = gpumem.replay([GOLDEN], specs, simulate=True)

    timings = {"seconds", "ns_per_op"}  # host time differs from run to run; nothing else may

    def untimed(r):
        r = {k: v for k, v in r.items() if k not in timings}
        if "figures" in r:  # its ns/op over the repeats is host time too
            r["figures"] = {k: v for k, v in r["figures"].items() if k != "ns_per_op"}
        return r

    def numbers(report):
        return [untimed(r) for t in report["traces"] for r in t["results"]]

    assert numbers(py) == numbers(cli)


def test_console_script_prints_the_version():
    script = console_script()
    if script is None:
        pytest.skip("no gpumem console script (the package was not installed with pip)")
    out = subprocess.run([script, "--version"], capture_output=True, text=True, check=True)
    assert out.stdout.startswith(f"gpumem {gpumem.__version__} (CCCL ")


def test_replay_without_traces_uses_the_bundled_ones():
    bundled = gpumem._cli.bundled_traces()
    if not bundled:
        pytest.skip("this installation has no bundled traces (not a wheel install)")
    out = gpumem.replay(resources="pool", simulate=True)
    assert [t["path"] for t in out["traces"]] == bundled
    assert all(r["peak_held_bytes"] > 0 for t in out["traces"] for r in t["results"])


def test_replay_errors_carry_the_tools_message(tmp_path):
    with pytest.raises(gpumem.ReplayError, match="unknown resource"):
        gpumem.replay(GOLDEN, "no_such_resource", simulate=True)
    with pytest.raises(gpumem.ReplayError):
        gpumem.replay(tmp_path / "missing.csv", simulate=True)
