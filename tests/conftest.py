"""Shared fixtures: tiny SST-format treebanks written by the tests themselves."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from treeqa.data.demo import write_demo

REPO = Path(__file__).resolve().parents[1]


def shared_data() -> Path | None:
    """The real datasets (TREEQA_DATA, else ../shared/data next to the repository), if present."""
    path = Path(os.environ.get("TREEQA_DATA", REPO.parent / "shared" / "data"))
    return path if path.is_dir() else None


@pytest.fixture(scope="session")
def demo_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small demo treebank (train 200 / dev 60 / test 60) in SST's file layout."""
    return Path(
        next(iter(write_demo(tmp_path_factory.mktemp("demo"), sizes=(200, 60, 60)).values())).parent
    )


@pytest.fixture(scope="session")
def real_data() -> Path:
    path = shared_data()
    if path is None:
        pytest.skip("real data not available (set TREEQA_DATA)")
    return path
