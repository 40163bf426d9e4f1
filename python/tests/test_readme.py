"""The README's Python quick start runs as written."""

import re
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


def test_readme_python_quick_start_runs(capsys):
    text = README.read_text()
    block = re.search(r"<!-- quickstart-python -->\n```python\n(.*?)```", text, re.S)
    assert block, "README.md has no quick start marked <!-- quickstart-python -->"
    exec(compile(block.group(1), "README.md quick start", "exec"), {})
    printed = capsys.readouterr().out
    assert "StatisticsCounter" in printed and "PoolMemoryResource(" in printed, printed
