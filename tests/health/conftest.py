"""Shared fixtures: one torch thread (the suite shares 2 busy cores) and one doctor run per script."""

from __future__ import annotations

import contextlib
import io
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from treeqa.health import run_doctor

SCRIPTS = Path(__file__).parent / "scripts"


@pytest.fixture(autouse=True)
def one_thread() -> Iterator[None]:
    # Intra-op threads spin on an oversubscribed CPU; these tiny models run faster on one.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


_REPORTS: dict[str, tuple[int, dict[str, Any], str]] = {}


@pytest.fixture
def doctor_report() -> Callable[[str], tuple[int, dict[str, Any], str]]:
    """``(exit code, report, script stdout)`` of ``treeqa doctor`` on a corpus script, run in
    process (no fresh interpreter and torch import per script) and cached for the rest of the test run."""

    def run(name: str) -> tuple[int, dict[str, Any], str]:
        if name not in _REPORTS:
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                code, report = run_doctor(
                    ["python", str(SCRIPTS / name)], every=10, stream=io.StringIO()
                )
            _REPORTS[name] = (code, report, out.getvalue())
        return _REPORTS[name]

    return run
