"""Every config in configs/ resolves (no key the code no longer takes), and each constituency
sentiment config trains an epoch on a small treebank as written, but for its layer sizes."""

from __future__ import annotations

from pathlib import Path

import pytest

from treeqa import config as cfg
from treeqa.cli.main import main
from treeqa.recipes import qa, sentiment

CONFIGS = sorted((Path(__file__).parents[1] / "configs").glob("*.toml"))


def test_the_configs_are_there() -> None:
    assert len(CONFIGS) >= 12


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_a_shipped_config_resolves(path: Path) -> None:
    raw = cfg.load_toml(path)
    recipe = qa if path.name.startswith("qanet") else sentiment
    config = recipe.resolve_config(raw, [])
    assert config.name == raw["name"] == path.stem


CONSTITUENCY = [p for p in CONFIGS if not p.name.startswith("qanet") and "_dep_" not in p.name]


@pytest.mark.parametrize("path", CONSTITUENCY, ids=lambda p: p.name)
def test_a_constituency_config_trains_as_written(
    path: Path, demo_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    small = ["--model.hidden_dim=8", "--epochs", "1", "--health", "off"]
    argv = ["train", "sentiment", "--config", str(path), "--data", str(demo_dir), *small]
    assert main([*argv, "--out", str(tmp_path / "run")]) == 0, capsys.readouterr().err
    assert (tmp_path / "run" / "best.safetensors").is_file()


def test_a_config_given_by_name_trains_from_any_folder(
    demo_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # no configs/ here: the name is the one treeqa ships
    small = ["--model.hidden_dim=8", "--epochs", "1", "--health", "off", "--data", str(demo_dir)]
    assert main(["train", "--config", "tree_gru_fine", *small, "--out", "run"]) == 0
    assert cfg.load_toml(tmp_path / "run" / "config.toml")["name"] == "tree_gru_fine"
