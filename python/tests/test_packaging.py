"""How the package is laid out and what it defaults to: the tool is found beside the package
files (also in a CMake build tree, where they are links into the source tree), and
gpumem.torch's default spec is the lean pool with access for every GPU."""

import importlib.util
import os
from pathlib import Path

import pytest

import gpumem
import gpumem.torch as gt

ROOT = Path(__file__).resolve().parents[2]


def _load_cli_from(path: Path):
    spec = importlib.util.spec_from_file_location("gpumem_cli_copy", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_tool_is_found_beside_linked_package_files(tmp_path):
    """A CMake build tree's package (<build>/python/pkg/gpumem) links its .py files to the source
    tree; the tool must be looked up beside the link, not beside the file it points at."""
    pkg = tmp_path / "pkg" / "gpumem"
    (pkg / "bin").mkdir(parents=True)
    (pkg / "traces").mkdir()
    (pkg / "_cli.py").symlink_to(ROOT / "python" / "gpumem" / "_cli.py")
    tool = pkg / "bin" / "gpumem"
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    (pkg / "traces" / "t.csv").write_text("")
    cli = _load_cli_from(pkg / "_cli.py")
    assert cli.tool_path() == tool
    assert cli.bundled_traces() == [str(pkg / "traces" / "t.csv")]


def test_a_tool_link_not_built_yet_says_what_to_build(tmp_path):
    pkg = tmp_path / "gpumem"
    (pkg / "bin").mkdir(parents=True)
    (pkg / "_cli.py").symlink_to(ROOT / "python" / "gpumem" / "_cli.py")
    (pkg / "bin" / "gpumem").symlink_to(tmp_path / "build" / "tools" / "gpumem" / "gpumem")
    cli = _load_cli_from(pkg / "_cli.py")
    with pytest.raises(FileNotFoundError, match="not built yet.*--target gpumem_python"):
        cli.tool_path()


def test_a_package_without_the_tool_says_how_to_get_it(tmp_path):
    pkg = tmp_path / "gpumem"
    pkg.mkdir()
    (pkg / "_cli.py").symlink_to(ROOT / "python" / "gpumem" / "_cli.py")
    cli = _load_cli_from(pkg / "_cli.py")
    with pytest.raises(FileNotFoundError, match="pip install gpumem-cuda.*gpumem_python"):
        cli.tool_path()


def test_installed_package_has_the_tool_and_its_traces():
    tool = gpumem._cli.tool_path()
    assert os.access(tool, os.X_OK)
    names = [os.path.basename(t) for t in gpumem._cli.bundled_traces()]
    assert names == ["gpt2_train.csv", "resnet50_train.csv"]


def test_torch_default_is_vmm_pool_with_access_for_every_gpu(monkeypatch):
    monkeypatch.delenv(gt.ENV_VAR, raising=False)
    assert gt.DEFAULT_SPEC == "vmm_pool:peers=all"
    assert gt._resolve(None, None, None) == {None: gt.DEFAULT_SPEC}
    assert gpumem.canonical_spec(gt.DEFAULT_SPEC) == gt.DEFAULT_SPEC
    assert "'vmm_pool:peers=all'" in gt._USAGE
    # It builds on a machine with two GPUs (simulated) and serves memory.
    sim = gpumem.HostRuntime(capacity_bytes=1 << 34, backed=False, device_count=2)
    pool = gpumem.from_spec(gt.DEFAULT_SPEC, sim)
    assert isinstance(pool, gpumem.VmmPoolMemoryResource)
    pool.deallocate(pool.allocate(64 << 20), 64 << 20)


def test_the_docs_recommend_the_default():
    readme = (ROOT / "README.md").read_text()
    guide = (ROOT / "docs" / "python.md").read_text()
    assert 'use("pool:initial=2GiB")      # every GPU' not in readme
    assert "gpumem.torch.use()" in readme and "vmm_pool:peers=all" in readme
    assert "vmm_pool:peers=all" in guide and "expandable_segments" in guide
