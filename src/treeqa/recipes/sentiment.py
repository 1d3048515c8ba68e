"""Sentiment on SST-format treebanks: train, evaluate and predict with any sentiment model."""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from treeqa import config as cfg
from treeqa.data import sst
from treeqa.data.batching import EncodedTree, batches, encode
from treeqa.data.tree import Tree, unescape_ptb
from treeqa.data.vocab import Vocab
from treeqa.eval.metrics import SentimentMetrics
from treeqa.health import HealthMonitor
from treeqa.models import build_sentiment_model, model_classes
from treeqa.models.common import Output
from treeqa.train import checkpoint as ckpt
from treeqa.train.callbacks import Checkpointer, EarlyStopping, MetricsLog, ProgressBar, resume
from treeqa.train.distributed import World
from treeqa.train.ema import build_ema
from treeqa.train.loop import Callback, TrainConfig, fit, resolve_device
from treeqa.train.optim import build_optimizer, build_scheduler

TASK = "sentiment"


@dataclass(frozen=True)
class SentimentData:
    path: str = ""
    """Directory with train.txt, dev.txt, test.txt in SST's bracket format; empty = embedded demo."""
    task: str = "fine"
    """fine (5 classes) | binary (neutral ignored, neutral-rooted sentences dropped) |
    binary3 (the same sentences, every node negative / neutral / positive, as Tai et al. train)"""
    vectors: str = ""
    """GloVe text (.txt/.gz) or spaCy vector table; empty = random embeddings. Several files
    joined by '+' are concatenated: a word's vector is its vector from each file, side by side
    (a path that exists as written is one file, '+' or not)."""
    lower_fallback: bool = True
    """Look a word up lower-cased when its exact form has no vector."""


# Flags of the original Tree-GRU report and of our CLI conventions, mapped onto config keys.
ALIASES = {
    "model": "model.name",
    "data": "data.path",
    "vectors": "data.vectors",
    "task": "data.task",
    "wd": "train.weight_decay",
    "emblr": "train.emb_lr",
    "at_hid_dim": "model.attention_dim",
}


def experiment_class(model_name: str) -> type:
    """The frozen config dataclass of one experiment with ``model_name``'s config section."""
    model_config: type = model_classes(model_name)[0]
    return dataclasses.make_dataclass(
        "SentimentExperiment",
        [
            ("name", str, field(default="sentiment")),
            ("data", SentimentData, field(default_factory=SentimentData)),
            ("train", TrainConfig, field(default_factory=TrainConfig)),
            ("model", model_config, field(default_factory=model_config)),
        ],
        frozen=True,
    )


def resolve_config(raw: dict[str, Any], overrides: Sequence[tuple[str, str]]) -> Any:
    """TOML dict + overrides -> the experiment config; unknown keys are errors."""
    name = raw.get("model", {}).get("name", "bow")
    for key, value in overrides:
        if ALIASES.get(key, key) == "model.name":
            name = value
    cls = experiment_class(name)
    return cfg.from_dict(cls, cfg.merge_overrides(cls, raw, overrides, ALIASES))


def load_trees(data: SentimentData) -> dict[str, list[Tree]]:
    if data.path:
        splits = {s: sst.load_split(data.path, s) for s in sst.SPLITS}
    else:
        from treeqa.data.demo import demo_splits

        splits = demo_splits()
    return {s: sst.task_view(trees, data.task) for s, trees in splits.items()}


def build_vocab(splits: dict[str, list[Tree]]) -> Vocab:
    # Every split's words, as in Tai et al.'s preprocessing: test words are given their
    # pretrained vectors; labels are never used.
    return Vocab.build(w for trees in splits.values() for t in trees for w in t.leaves)


def build_vectors(data: SentimentData, vocab: Vocab) -> np.ndarray | None:
    if not data.vectors:
        return None
    from treeqa.data.vectors import load_vectors

    keys = [None, None] + [unescape_ptb(t) for t in vocab.tokens[2:]]
    tables = []  # [V, D_i] per file; a word's vector is their concatenation
    paths = [data.vectors] if Path(data.vectors).exists() else data.vectors.split("+")
    for i, path in enumerate(paths):
        vectors = load_vectors(path, keys, lower_fallback=data.lower_fallback, seed=i)
        print(f"vectors: {vectors.report.summary()}")
        tables.append(vectors.matrix)
    return np.concatenate(tables, 1)


def evaluate_model(
    model: nn.Module, trees: Sequence[EncodedTree], task: str, batch_size: int = 256
) -> dict[str, float]:
    device = next(model.parameters()).device
    metrics = SentimentMetrics()
    was_training = model.training
    model.eval()
    with torch.no_grad():
        for batch in batches(trees, batch_size, shuffle=False):
            batch = batch.to(device)
            output: Output = model(batch)
            metrics.update(output.logits, batch.labels, batch.roots)
    model.train(was_training)
    return metrics.compute(task)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def train(
    config: Any, out: Path, *, resume_run: bool = False, extra_callbacks: Sequence[Callback] = ()
) -> dict[str, Any]:
    """Train one sentiment model into run directory ``out``; returns the best dev metrics."""
    ckpt.open_run_dir(out, resume_run)
    seed_everything(config.train.seed)
    splits = load_trees(config.data)
    vocab = build_vocab(splits)
    vectors = build_vectors(config.data, vocab)
    model_config = dataclasses.replace(
        config.model,
        num_classes=sst.TASKS[config.data.task],
        **({"embed_dim": vectors.shape[1]} if vectors is not None else {}),
    )
    config = dataclasses.replace(config, model=model_config)
    world = World.from_env()
    if world.main:  # under torchrun, process 0 writes the run directory
        (out / "config.toml").write_text(cfg.to_toml(config), encoding="utf-8")

    model = build_sentiment_model(model_config.name, model_config, len(vocab), vectors)
    optimizer = build_optimizer(model, config.train)
    scheduler = build_scheduler(optimizer, config.train)
    state = resume(out, model, optimizer, scheduler) if resume_run else None
    ema = build_ema(config.train.ema_decay, out if state is not None else None)

    encoded = {
        s: [encode(t, vocab, config.data.task) for t in trees] for s, trees in splits.items()
    }
    meta = {
        "task": TASK,
        "model": model_config.name,
        "model_config": cfg.to_dict(model_config),
        "data": cfg.to_dict(config.data),
        "train_config": cfg.to_dict(config.train),
        "vocab": list(vocab.tokens),
    }
    n_batches = -(-len(encoded["train"]) // config.train.batch_size)
    callbacks: list[Callback] = [
        ProgressBar(total=n_batches // world.size),
        MetricsLog(out, config.train.log_every),
        # EMA before the Checkpointer: it must swap its shadows in/out around evaluation.
        *([ema] if ema is not None else []),
        Checkpointer(
            out,
            meta,
            scheduler,
            ema.checkpoint_tensors if ema is not None else None,
            every=config.train.checkpoint_every,
        ),
        EarlyStopping(config.train.patience),
        *extra_callbacks,
    ]
    if config.train.health != "off":
        callbacks.append(HealthMonitor(config.train.health, json_path=out / "health.json"))
    seed = config.train.seed
    state = fit(
        model,
        optimizer,
        lambda epoch: batches(
            encoded["train"], config.train.batch_size, True, seed * 100_003 + epoch
        ),
        config.train,
        evaluate=lambda m: evaluate_model(m, encoded["dev"], config.data.task),
        callbacks=callbacks,
        scheduler=scheduler,
        state=state,
    )
    return state.summary()


@dataclass(frozen=True)
class Loaded:
    model: nn.Module
    vocab: Vocab
    task: str
    meta: dict[str, Any]


def load_model(path: str | Path, device: str = "auto") -> Loaded:
    """A trained model from a run directory or checkpoint file, ready for inference."""
    checkpoint = ckpt.load(path, task=TASK)
    meta = checkpoint.meta
    config_cls = model_classes(meta["model"])[0]
    model_config: Any = cfg.from_dict(config_cls, meta["model_config"], "checkpoint model_config")
    vocab = Vocab(tuple(meta["vocab"]))
    model = build_sentiment_model(meta["model"], model_config, len(vocab))
    model.load_state_dict(checkpoint.weights())
    model.to(resolve_device(device)).eval()
    return Loaded(model, vocab, meta["data"]["task"], meta)


def evaluate(path: str | Path, data_path: str, split: str) -> dict[str, float]:
    loaded = load_model(path)
    data = SentimentData(path=data_path, task=loaded.task)
    trees = load_trees(data)[split]
    encoded = [encode(t, loaded.vocab, loaded.task) for t in trees]
    scores: dict[str, float] = evaluate_model(loaded.model, encoded, loaded.task)
    scores["sentences"] = len(trees)
    if not data_path:
        # The demo treebank is built to test composition: score its negated sentences apart.
        from treeqa.data.demo import is_negated

        negated = [e for e, t in zip(encoded, trees, strict=True) if is_negated(t)]
        scores["negated_root_acc"] = evaluate_model(loaded.model, negated, loaded.task)["root_acc"]
        scores["negated_sentences"] = len(negated)
    return scores


def predict(loaded: Loaded, trees: Sequence[Tree]) -> list[dict[str, Any]]:
    """Per tree: the predicted label and class probabilities of every node (pre-order)."""
    encoded = [encode(t, loaded.vocab, loaded.task) for t in trees]
    device = next(loaded.model.parameters()).device
    results: list[dict[str, Any]] = []
    with torch.no_grad():
        batch = next(batches(encoded, len(encoded), shuffle=False)).to(device)
        probs = loaded.model(batch).logits.float().softmax(1).cpu()  # [N, C]
    start = 0
    for tree in trees:
        p = probs[start : start + len(tree)]
        start += len(tree)
        results.append(
            {
                "text": tree.text(),
                "label": int(p[0].argmax()),
                "probabilities": [round(float(x), 4) for x in p[0]],
                "nodes": [
                    {
                        "words": " ".join(w for w in tree.words[i : i + int(tree.size[i])] if w),
                        "label": int(p[i].argmax()),
                        "parent": int(tree.parent[i]),  # pre-order index; -1 at the root
                    }
                    for i in range(len(tree))
                ],
            }
        )
    return results
