"""A run records what it was made with; a resumed one says which data files changed."""

import hashlib
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

import treeqa
from treeqa.cli.main import main
from treeqa.data import vectors
from treeqa.train import checkpoint as ckpt
from treeqa.train import provenance


def test_a_file_is_identified_by_its_whole_content_or_past_a_size_by_its_ends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    small = tmp_path / "train.txt"
    small.write_bytes(b"(3 (2 a) (4 b))\n" * 100)
    made = provenance.made_with([small])
    assert made["versions"]["treeqa"] == treeqa.__version__
    assert made["versions"]["torch"] == torch.__version__
    assert made["versions"]["numpy"] == np.__version__
    assert made["files"] == [
        {
            "name": "train.txt",
            "path": str(small.absolute()),
            "bytes": 1600,
            "sha256": hashlib.sha256(small.read_bytes()).hexdigest(),
        }
    ]
    monkeypatch.setattr(provenance, "WHOLE", 1000)
    monkeypatch.setattr(vectors, "_FINGERPRINT", 100)
    ends = provenance.identity(small)
    data = small.read_bytes()
    assert ends["sha256_ends"] == hashlib.sha256(data[:100] + data[-100:]).hexdigest()
    assert "sha256" not in ends


def test_changed_files_are_named_by_name_wherever_they_lie_now(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    for folder in ("a", "b"):
        (tmp_path / folder / "train.txt").write_text("(2 x)\n")
        (tmp_path / folder / "dev.txt").write_text("(2 y)\n")
    before = provenance.made_with([tmp_path / "a" / "train.txt", tmp_path / "a" / "dev.txt"])
    moved = provenance.made_with([tmp_path / "b" / "train.txt", tmp_path / "b" / "dev.txt"])
    assert provenance.changed_files(before, moved) == []  # moved, the same content
    (tmp_path / "b" / "dev.txt").write_text("(4 y)\n")  # same size, another label
    edited = provenance.made_with([tmp_path / "b" / "train.txt", tmp_path / "b" / "dev.txt"])
    assert provenance.changed_files(before, edited) == ["dev.txt"]
    assert provenance.changed_files(None, edited) == []  # a run of a treeqa that kept none


def test_a_run_records_its_versions_and_data_and_a_resume_names_a_changed_split(
    demo_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "sst"
    shutil.copytree(demo_dir, data)
    run = tmp_path / "run"
    small = ["--health", "off"]
    assert main(["train", "--data", str(data), "--epochs", "1", "--out", str(run), *small]) == 0
    made = ckpt.read_meta(run, prefer=ckpt.LAST)["made_with"]
    assert [f["name"] for f in made["files"]] == ["train.txt", "dev.txt", "test.txt"]
    assert made["versions"]["torch"] == torch.__version__
    capsys.readouterr()
    # Was: a resumed run trained on an edited split without a word.
    text = (data / "train.txt").read_text()
    at = text.index("(", 1) + 1  # the first label past the root's, 0-4: another one
    (data / "train.txt").write_text(text[:at] + str((int(text[at]) + 1) % 5) + text[at + 1 :])
    assert main(["train", "--resume", str(run), "--epochs", "2"]) == 0
    out = "".join(capsys.readouterr())
    assert f"warning: train.txt changed since {run} last saved itself" in out
    assert main(["train", "--resume", str(run), "--epochs", "3"]) == 0  # recorded anew
    assert "changed since" not in capsys.readouterr().out
