"""The ``gpumem`` command and ``gpumem.replay``: both run the command-line tool that ships in this
package (``gpumem/bin/gpumem``), so Python and the command line give the same results."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterable

__all__ = ["replay", "bundled_traces", "tool_path", "ReplayError"]


class ReplayError(RuntimeError):
    """The tool refused the arguments or a trace, or failed; the message is the tool's."""


def tool_path() -> Path:
    """The path of the bundled ``gpumem`` binary."""
    path = Path(__file__).absolute().parent / "bin" / "gpumem"
    if path.is_file():
        return path
    if path.is_symlink():  # a CMake build tree's package: the link is there, the tool not built
        raise FileNotFoundError(
            f"the gpumem command-line tool is not built yet ({path} links to the missing "
            f"{os.readlink(path)}); build it: cmake --build <build folder> --target gpumem_python"
        )
    raise FileNotFoundError(
        f"the gpumem command-line tool is not in this installation ({path}); install the "
        "gpumem-cuda wheel (pip install gpumem-cuda), or in a CMake build with "
        "-DGPUMEM_BUILD_PYTHON=ON build the target gpumem_python, which stages it there"
    )


def bundled_traces() -> list[str]:
    """The example traces that ship with the package (GPT-2 and ResNet-50 training runs)."""
    folder = Path(__file__).absolute().parent / "traces"
    return sorted(str(p) for p in folder.glob("*.csv"))


def main() -> None:
    """Entry point of the ``gpumem`` console script: runs the bundled tool with the arguments."""
    tool = str(tool_path())
    os.execv(tool, [tool, *sys.argv[1:]])


def _as_list(value: str | os.PathLike | Iterable[str | os.PathLike] | None) -> list[str]:
    if value is None:
        return []
    if isinstance(value, (str, os.PathLike)):
        return [os.fspath(value)]
    return [os.fspath(v) for v in value]


def replay(
    traces: str | os.PathLike | Iterable[str | os.PathLike] | None = None,
    resources: str | Iterable[str] | None = None,
    *,
    simulate: bool | int | str = False,
    threads: bool = False,
) -> dict[str, Any]:
    """Replays allocation traces over resource stacks, as ``gpumem replay ... --json`` does, and
    returns that JSON as a dict (same keys, same numbers).

    ``traces``: trace files (CSV from ``logging_resource_adaptor`` or ``gpumem convert``); none
    replays the bundled example traces. ``resources``: resource specs such as
    ``"pool:initial=1GiB>cuda"`` (default: every suballocator). ``simulate``: ``True`` or a
    capacity (bytes, or a string with a unit such as ``"16GiB"``) replays on a simulated address
    space; without a GPU the replay is always simulated. ``threads``: one host thread per trace
    thread.

    A replay that runs out of memory is a result (its entry says so), not an error. Bad arguments,
    unreadable traces and unknown resources raise ``ReplayError`` with the tool's message.
    """
    files = _as_list(traces) or bundled_traces()
    if not files:
        raise ReplayError("no bundled traces in this installation; give trace files: "
                          "gpumem.replay('trace.csv')")
    args = [str(tool_path()), "replay", *files]
    for spec in _as_list(resources):
        args += ["--resource", spec]
    if simulate is True:
        args.append("--simulate")
    elif simulate is not False and simulate is not None:
        args.append(f"--simulate={simulate}")
    if threads:
        args.append("--threads")
    args += ["--json", "--no-progress"]
    done = subprocess.run(args, capture_output=True, text=True, check=False)
    if done.returncode not in (0, 3):  # 3: a replay ran out of memory (reported in the JSON)
        message = done.stderr.strip() or f"gpumem replay exited with status {done.returncode}"
        raise ReplayError(message.removeprefix("gpumem: "))
    return json.loads(done.stdout)
