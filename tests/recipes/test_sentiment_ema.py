"""Sentiment training with a moving average of the weights (``--train.ema_decay``)."""

from __future__ import annotations

from pathlib import Path

import torch

from treeqa.recipes.sentiment import evaluate, load_model, resolve_config, train
from treeqa.train import checkpoint as ckpt


def config(demo_dir: Path, epochs: int, ema: str):
    overrides = [("data", str(demo_dir)), ("model", "tree_lstm"), ("epochs", str(epochs))]
    overrides += [("model.embed_dim", "8"), ("model.hidden_dim", "8")]
    overrides += [("train.ema_decay", ema), ("health", "off")]
    return resolve_config({}, overrides)


def test_best_checkpoint_holds_the_averaged_weights_it_was_scored_with(
    demo_dir: Path, tmp_path: Path
) -> None:
    out = tmp_path / "run"
    result = train(config(demo_dir, 1, "0.9"), out)
    best, last = ckpt.load(out), ckpt.load(out, prefer=ckpt.LAST)
    w = "compose.weight"
    assert not torch.equal(best.tensors[f"model.{w}"], last.tensors[f"model.{w}"])
    assert torch.equal(best.tensors[f"model.{w}"], last.tensors[f"ema.{w}"])
    # Scoring the saved best checkpoint gives the dev score that selected it.
    assert evaluate(out, str(demo_dir), "dev")["root_acc"] == result["best_dev"]
    # So does the last one (here the same epoch): loaded for inference, it takes the averages.
    assert load_model(out / ckpt.LAST).model.state_dict()[w].equal(last.tensors[f"ema.{w}"])
    assert evaluate(out / ckpt.LAST, str(demo_dir), "dev") == evaluate(out, str(demo_dir), "dev")

    # A resumed run carries the averages on: they end as in a run never interrupted.
    train(config(demo_dir, 2, "0.9"), out, resume_run=True)
    train(config(demo_dir, 2, "0.9"), tmp_path / "whole")
    resumed = ckpt.load(out, prefer=ckpt.LAST).tensors
    whole = ckpt.load(tmp_path / "whole", prefer=ckpt.LAST).tensors
    assert not torch.equal(resumed[f"ema.{w}"], last.tensors[f"ema.{w}"])
    shadows = [k for k in whole if k.startswith("ema.")]
    assert len(shadows) == 7 and all(torch.equal(resumed[k], whole[k]) for k in shadows)
