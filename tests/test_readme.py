"""The README's Python example runs as written (from a scratch directory: it writes runs/)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

README = Path(__file__).parents[1] / "README.md"


def test_the_from_python_example_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    section = README.read_text(encoding="utf-8").split("## From Python", 1)[1]
    (code,) = re.findall(r"```python\n(.*?)```", section.split("\n## ", 1)[0], re.DOTALL)
    monkeypatch.chdir(tmp_path)
    exec(compile(code, str(README), "exec"), {"__name__": "readme"})
    label, nodes = capsys.readouterr().out.strip().splitlines()[-1].split(" ", 1)
    assert int(label) in range(5) and len(ast.literal_eval(nodes)) == 9  # a label per node
    assert (tmp_path / "runs" / "py-tl" / "best.safetensors").is_file()
