"""Reading comprehension on prepared SQuAD: train QANet, evaluate with the official metric, predict.

Shape letters: B questions, L context tokens, J question tokens, W characters per token.
"""

from __future__ import annotations

import dataclasses
import json
import math
import numbers
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch
from torch import nn

from treeqa import config as cfg
from treeqa.data.collated import Collated
from treeqa.data.qa_batch import QABatch
from treeqa.data.squad import Tokenizer, visible
from treeqa.data.squad_prepared import PreparedSplit, load_meta, tokenizer_drift
from treeqa.data.vocab import Vocab
from treeqa.eval.squad import evaluate_predictions, gold_answers
from treeqa.health import monitor as health
from treeqa.models.common import inference
from treeqa.models.qanet import QANet, QANetConfig
from treeqa.models.spans import decode
from treeqa.train import checkpoint as ckpt
from treeqa.train import provenance
from treeqa.train.callbacks import (
    StopOnSignal,
    check_resumable,
    resume,
    say,
    say_if_done,
    standard_callbacks,
)
from treeqa.train.distributed import World
from treeqa.train.ema import build_ema
from treeqa.train.loop import (
    Callback,
    TrainConfig,
    TrainState,
    check_metric,
    fit,
    resolve_device,
    seed_everything,
)
from treeqa.train.optim import build_optimizer, build_scheduler

TASK = "qa"


@dataclass(frozen=True)
class QAData:
    prepared: str = "runs/squad_v1"
    """Directory written by ``treeqa data prepare squad`` (train/ and dev/ inside)."""
    bucket: bool = True
    """Group training questions of similar context length into a batch (less padding)."""
    dev_subset: int = 0
    """Dev questions scored during training: a fixed seeded sample; 0 = every dev question."""
    eval_batch_size: int = 32
    pad_multiple: int = 1
    """Pad each batch's context and question lengths up to a multiple of this (1: to the
    batch's longest). A few fixed shapes are what CUDA graphs (``train.compile =
    "reduce-overhead"``) record once each; on a CPU the padding is only extra work."""

    def __post_init__(self) -> None:
        cfg.check_fields(
            self, "data", at_least={"dev_subset": 0, "eval_batch_size": 1, "pad_multiple": 1}
        )


@dataclass(frozen=True)
class QASchedule:
    eval_every: int = 0
    """Steps between dev evaluations, each closing one fit() epoch; 0 = one pass over train."""
    budget_minutes: float = 0.0
    """Stop training after this much wall-clock time (checked every step); 0 = no limit.
    Counted from this start: a resumed run has a budget of its own, as a scheduler's job has."""
    threshold: float = 0.0
    """SQuAD 2.0: answer nothing when the no-answer score beats the best span's by more."""

    def __post_init__(self) -> None:
        cfg.check_fields(self, "schedule", at_least={"eval_every": 0, "budget_minutes": 0})
        if math.isnan(self.threshold):  # every comparison false: the model would never abstain
            raise cfg.ConfigError("schedule.threshold: expected a number, got nan")


@dataclass(frozen=True)
class QAExperiment:
    name: str = "qanet"
    data: QAData = field(default_factory=QAData)
    schedule: QASchedule = field(default_factory=QASchedule)
    train: TrainConfig = field(default_factory=TrainConfig)
    model: QANetConfig = field(default_factory=QANetConfig)


ALIASES = {"data": "data.prepared", "prepared": "data.prepared", "model": "model.name"}

TRAIN_DEFAULTS: dict[str, Any] = {
    "metric": "f1",
    "batch_size": 32,
    "optim": "adam",
    "lr": 1e-3,
    "emb_lr": 0.0,  # documents that word vectors are fixed; QANet keeps them in a buffer
    "weight_decay": 3e-7,
    "adam_betas": [0.8, 0.999],
    "adam_eps": 1e-7,
    "warmup_steps": 1000,
    "clip": 5.0,
    "amp": "bf16",
    "ema_decay": 0.9999,
}
"""QANet's training settings (configs/qanet_paper.toml gives their sources), under [train]."""


def resolve_config(
    raw: dict[str, Any], overrides: Sequence[tuple[str, str]], named: int = 0
) -> QAExperiment:
    """TOML dict + overrides -> the experiment config; unknown keys are errors. The first
    ``named`` overrides come from named flags (see ``config.merge_overrides``)."""
    model, data = raw.get("model", {}), raw.get("data", {})
    name = model.get("name", "qanet") if isinstance(model, dict) else "qanet"
    if name != "qanet" or (isinstance(data, dict) and "path" in data):
        why = f"model {name!r}" if name != "qanet" else "its [data] has a treebank path"
        raise cfg.ConfigError(
            f"this is a sentiment config or run ({why}): use `treeqa train sentiment`"
        )
    schedule = raw.get("schedule", {})
    if (
        isinstance(schedule, dict) and "ema_decay" in schedule
    ):  # where run directories of earlier versions keep it
        raw = {**raw, "schedule": {k: v for k, v in schedule.items() if k != "ema_decay"}}
        raw["train"] = {"ema_decay": schedule["ema_decay"], **raw.get("train", {})}
    merged = cfg.merge_overrides(QAExperiment, raw, overrides, ALIASES, named)
    merged["train"] = {**TRAIN_DEFAULTS, **merged.get("train", {})}
    config = cfg.from_dict(QAExperiment, merged)
    prepared = cfg.home_path(config.data.prepared, "data.prepared")
    config = dataclasses.replace(config, data=dataclasses.replace(config.data, prepared=prepared))
    if config.model.name != "qanet":
        raise cfg.ConfigError(f"model.name: the qa task trains 'qanet', not {config.model.name!r}")
    if cfg.model_key_given(model, overrides, "word_dim"):
        check_word_dim(config)
    return config


def check_word_dim(config: QAExperiment) -> None:
    """The prepared vectors set the word-vector size: one given otherwise would be dropped."""
    try:
        width = int(load_meta(config.data.prepared)["vocab"]["vector_dim"])
    except (OSError, ValueError, KeyError, TypeError):
        return  # not prepared (yet): training says why
    if config.model.word_dim != width:
        raise cfg.ConfigError(
            f"model.word_dim {config.model.word_dim}: the vectors prepared in "
            f"{config.data.prepared} are {width}-d and set it; leave model.word_dim out"
        )


def check_prepared(prepared: str) -> None:
    """A FileNotFoundError naming the flag and the config key that set the prepared folder,
    unless ``prepared`` is one (a folder of ``treeqa data prepare squad``, with its meta.json)."""
    path = Path(prepared)
    if (path / "meta.json").is_file():
        return
    if not path.exists():
        problem = "no such folder"
    elif not path.is_dir():
        problem = "a file, not a folder"
    else:
        problem = "not a prepared SQuAD folder (no meta.json)"
    if prepared == QAData.prepared:
        problem += " (the default, as none was given)"
    raise FileNotFoundError(
        f"data.prepared: {path.absolute()}: {problem}; give the folder `treeqa data prepare "
        "squad` wrote with --prepared DIR, or as data.prepared in the config"
    )


class StepStream:
    """Training batches as one endless stream cut into fit() epochs of ``per_epoch`` steps.

    Pass p over the data is shuffled with seed ``seed * 100_003 + p``, so the batches of
    every epoch depend only on its number; a resumed run skips to its first step once. The
    stream holds each batch's rows: an epoch's batches are collated when read (under torchrun,
    each process collates its own).
    """

    def __init__(
        self,
        split: PreparedSplit,
        batch_size: int,
        per_epoch: int,
        seed: int,
        bucket: bool,
        pad_multiple: int = 1,
    ):
        self.split, self.batch_size, self.per_epoch = split, batch_size, per_epoch
        self.seed, self.bucket, self.pad_multiple = seed, bucket, pad_multiple
        self.position, self.iterator = 0, self._stream()

    def _stream(self) -> Iterator[np.ndarray]:
        p = 0
        while True:
            groups = self.split.batches(
                self.batch_size, True, self.seed * 100_003 + p, bucket=self.bucket
            ).groups
            if not groups:  # else every pass yields nothing, for ever
                raise ValueError("the training split has no examples to make a batch of")
            yield from groups
            p += 1

    def __call__(self, epoch: int) -> Collated[QABatch]:
        first = epoch * self.per_epoch
        if first < self.position:
            self.position, self.iterator = 0, self._stream()
        for _ in range(first - self.position):
            next(self.iterator)
        self.position = first + self.per_epoch
        groups = [next(self.iterator) for _ in range(self.per_epoch)]
        return Collated(groups, self.split.collate(self.pad_multiple))


class Budget(Callback):
    """Stop the run once ``minutes`` of wall-clock time have passed since it started."""

    def __init__(self, minutes: float):
        self.minutes = minutes
        self.stopped = ""  # where it stopped the run: "after step 84 (epoch 17, batch 4)"

    def on_fit_start(
        self, state: TrainState, model: nn.Module, optimizer: torch.optim.Optimizer
    ) -> None:
        self.started = time.monotonic()

    def on_step_end(self, state: TrainState, output: Any, batch: Any) -> None:
        if self.minutes > 0 and time.monotonic() - self.started > self.minutes * 60:
            state.stop = True
            self.stopped = f"after step {state.step} ({state.position()})"

    def said(self, out: Path) -> bool:
        """Say on stderr where the budget stopped the run, if it did."""
        if self.stopped:
            say(
                f"the time budget ({self.minutes:g} minutes) stopped the run {self.stopped}; "
                f"--resume {out} goes on from there, with a budget of its own as long "
                "(--schedule.budget_minutes=0 for none)"
            )
        return bool(self.stopped)


class Answer(NamedTuple):
    text: str
    """The answer given: the best span, or "" when the no-answer score wins by > threshold."""
    score: float
    """log p(start) + log p(end) of the choice."""
    span: str
    """The best span's text, given or not (what a lower threshold would answer)."""
    no_answer_margin: float
    """No-answer score minus the best span's; -inf for a model without the no-answer slot."""


@dataclass(frozen=True)
class IdMap:
    """Renumbers a prepared split's word and char ids into a model's vocabularies: a split
    prepared apart from the model's training data numbers its tokens otherwise."""

    words: torch.Tensor  # [V_split] the model's id of each split word id; 1 = unknown to it
    chars: torch.Tensor  # [C_split]

    @classmethod
    def between(cls, split: PreparedSplit, words: Vocab, chars: Vocab) -> IdMap | None:
        """None when the split already numbers its tokens as the model does."""
        split_words, split_chars = split.word_vocab(), split.char_vocab()
        if split_words == words and split_chars == chars:
            return None
        return cls(
            *(
                torch.tensor(v.ids(s.tokens))
                for s, v in ((split_words, words), (split_chars, chars))
            )
        )

    @property
    def unknown_words(self) -> int:
        return int((self.words[2:] == 1).sum())

    def __call__(self, batch: QABatch) -> QABatch:
        w, c = self.words, self.chars
        return dataclasses.replace(
            batch,
            context_words=w[batch.context_words],
            context_chars=c[batch.context_chars],
            question_words=w[batch.question_words],
            question_chars=c[batch.question_chars],
        )


def predict_rows(
    model: nn.Module,
    split: PreparedSplit,
    rows: np.ndarray | None,
    batch_size: int,
    threshold: float,
    id_map: IdMap | None = None,
    pad_multiple: int = 1,
) -> dict[str, Answer]:
    """question id -> its ``Answer`` for ``rows`` (None = all); batches padded as
    ``data.pad_multiple`` says."""
    config: QANetConfig = model.config  # type: ignore[assignment]
    device = next(model.parameters()).device
    out: dict[str, Answer] = {}
    with inference(model):
        # Bucketed: answers are keyed by row, so sorting by length only saves padding.
        for batch in split.batches(
            batch_size, False, 0, bucket=True, rows=rows, pad_multiple=pad_multiple
        ):
            batch = (id_map(batch) if id_map is not None else batch).to(device)
            logits = model(batch).logits  # [B, 2, L(+1)]
            mask = batch.context_words != 0  # [B, L]
            # Best spans for all rows (threshold inf); the threshold is applied here.
            best = decode(logits, mask, config.max_answer_len, config.no_answer, math.inf)
            for row, s, e, p, m in zip(
                batch.index.tolist(),
                best.start.tolist(),
                best.end.tolist(),
                best.score.tolist(),
                best.no_answer_margin.tolist(),
                strict=True,
            ):
                span = split.answer_text(row, s, e)
                empty = m > threshold
                out[split.question_id(row)] = Answer(
                    "" if empty else span, p + m if empty else p, span, m
                )
    return out


def official_scores(gold: dict[str, Any], answers: dict[str, Answer]) -> dict[str, float]:
    """Official EM/F1 (0-100) of the answers given; for SQuAD 2.0 with a no-answer slot also the
    official best threshold search over the no-answer margins (``best_f1`` at
    ``best_f1_thresh``: the ``schedule.threshold`` that gives it)."""
    scores = evaluate_predictions(gold, {q: a.text for q, a in answers.items()})
    margins = {q: a.no_answer_margin for q, a in answers.items()}
    if scores["version"] == "v2.0" and all(math.isfinite(m) for m in margins.values()):
        spans = {q: a.span for q, a in answers.items()}
        # Margins are log-odds: abstaining everywhere needs a threshold below them all.
        floor = min(margins.values(), default=0.0) - 1.0
        best = evaluate_predictions(gold, spans, na_probs=margins, abstain_thresh=floor)
        scores |= {k: v for k, v in best.items() if k.startswith("best_")}
    return {k: v for k, v in scores.items() if isinstance(v, int | float)}  # counts stay ints


def evaluate_model(
    model: nn.Module,
    split: PreparedSplit,
    rows: np.ndarray | None,
    batch_size: int,
    threshold: float,
    pad_multiple: int = 1,
) -> dict[str, float]:
    """Official SQuAD scores over the questions of ``rows`` (None = every question)."""
    answers = predict_rows(model, split, rows, batch_size, threshold, pad_multiple=pad_multiple)
    gold = split.gold()
    if rows is not None:  # the official scripts score every question they are given
        gold = gold_subset(gold, set(answers))
    return official_scores(gold, answers)


def dev_metric_names(version: str) -> list[str]:
    """The scores in-training evaluation gives (``official_scores``) that ``train.metric`` may name."""
    names = ["exact_match", "f1"]
    if version == "v2.0":
        names += [f"{part}_{m}" for part in ("has_ans", "no_ans", "best") for m in ("exact", "f1")]
    return names


def gold_subset(gold: dict[str, Any], ids: set[str]) -> dict[str, Any]:
    """The SQuAD-layout ``gold`` restricted to questions ``ids``."""
    data = [
        {
            **a,
            "paragraphs": [
                {**p, "qas": [q for q in p["qas"] if q["id"] in ids]} for p in a["paragraphs"]
            ],
        }
        for a in gold["data"]
    ]
    return {**gold, "data": data}


def dev_sample(questions: int, size: int, seed: int) -> np.ndarray | None:
    """The sorted rows of the dev questions that in-training evaluation scores (``data.dev_subset``
    of them, drawn with the run's seed); None for every question."""
    if not 0 < size < questions:
        return None
    return np.sort(np.random.default_rng(seed).choice(questions, size, replace=False))


def build_model(model_config: QANetConfig, split: PreparedSplit) -> tuple[QANet, Vocab, Vocab]:
    words, chars = split.word_vocab(), split.char_vocab()
    return QANet(model_config, len(words), len(chars), split.word_vectors()), words, chars


def fitted_to_data(model: QANetConfig, meta_data: dict[str, Any]) -> QANetConfig:
    """``model`` as the prepared data (its ``meta.json``) sets it: the word vectors' width, and
    the no-answer slot where there is something to train it on: SQuAD 2.0, or v1.1 train with
    same-article negatives (without it their rows would be ignored by the loss)."""
    unanswerable = meta_data["splits"]["train"].get("unanswerable_examples", 0) > 0
    no_answer = model.no_answer or meta_data["version"] == "v2.0" or unanswerable
    dim = int(meta_data["vocab"]["vector_dim"])
    return dataclasses.replace(model, no_answer=no_answer, word_dim=dim)


def run_meta(
    config: QAExperiment,
    words: Vocab,
    chars: Vocab,
    meta_data: dict[str, Any],
    made: dict[str, Any],
) -> dict[str, Any]:
    """What every checkpoint of a run carries besides its weights and training state."""
    return {
        "task": TASK,
        "model": "qanet",
        "model_config": cfg.to_dict(config.model),
        "data": cfg.to_dict(config.data),
        "schedule": cfg.to_dict(config.schedule),
        "train_config": cfg.to_dict(config.train),
        "config": cfg.to_toml(config),  # what a resumed run is checked against
        "word_vocab": list(words.tokens),
        "char_vocab": list(chars.tokens),
        "limits": meta_data["limits"],
        "squad_version": meta_data["version"],
        "made_with": made,
    }


def train(
    config: QAExperiment,
    out: str | Path,
    *,
    resume_run: bool = False,
    extra_callbacks: Sequence[Callback] = (),
) -> dict[str, Any]:
    """Train QANet into run directory ``out``; returns ``fit()``'s summary (``best_dev``, the
    best dev score, and ``best_epoch``, ``steps``, ...)."""
    out = Path(out)
    with ckpt.run_lock(out, World.from_env().main, resume=resume_run):
        return _train(config, out, resume_run=resume_run, extra_callbacks=extra_callbacks)


def graphs_without_fixed_shapes(config: QAExperiment) -> str | None:
    """CUDA graphs (``reduce-overhead``, ``max-autotune``) record a graph for each shape a batch
    comes in; bucketed batches come in hundreds of lengths unless padded to a few."""
    graphs = config.train.compile in ("reduce-overhead", "max-autotune")
    if not graphs or config.data.pad_multiple > 1:
        return None
    try:
        if resolve_device(config.train.device).type != "cuda":
            return None
    except ValueError:  # no such device: training says so
        return None
    return (
        f"train.compile = {config.train.compile} records a CUDA graph for every batch shape, and "
        "batches padded to their own longest context come in hundreds of lengths: add "
        "--data.pad_multiple=64 (a few shapes; outputs unchanged)"
    )


def _train(
    config: QAExperiment,
    out: Path,
    *,
    resume_run: bool = False,
    extra_callbacks: Sequence[Callback] = (),
) -> dict[str, Any]:
    ckpt.check_run_dir(out, resume_run)
    check_prepared(config.data.prepared)
    # Absolute, so the run's config.toml names its data from any working directory.
    prepared = Path(config.data.prepared).resolve()
    config = dataclasses.replace(
        config, data=dataclasses.replace(config.data, prepared=str(prepared))
    )
    seed_everything(config.train.seed)
    train_split, dev_split = PreparedSplit(prepared, "train"), PreparedSplit(prepared, "dev")
    meta_data = train_split.meta
    if note := tokenizer_drift(meta_data, prepared):
        say(f"warning: {note}")
    if note := graphs_without_fixed_shapes(config):
        say(f"warning: {note}")
    config = dataclasses.replace(config, model=fitted_to_data(config.model, meta_data))
    world = World.from_env()

    model, words, chars = build_model(config.model, train_split)
    # Vocabularies and vectors were read by name: of the folder the splits opened, or of one
    # prepared in its place since.
    train_split.check_unchanged()
    dev_split.check_unchanged()
    optimizer = build_optimizer(model, config.train)
    scheduler = build_scheduler(optimizer, config.train)
    check_metric(config.train.metric, dev_metric_names(meta_data["version"]))
    if resume_run:
        check_resumable(out, config)
    # meta.json holds the SHA-256 of every source file and the limits the arrays were made with.
    made = provenance.made_with([prepared / "meta.json"])
    if resume_run and (note := provenance.data_changed(out, made)):
        say(note)
    same = {"word_vocab": list(words.tokens), "char_vocab": list(chars.tokens)}
    # A folder prepared again since (other limits, v2.0) may keep the same vocabularies.
    same |= {"limits": meta_data["limits"], "squad_version": meta_data["version"]}
    state = resume(out, model, optimizer, scheduler, same) if resume_run else None
    say_if_done(out, state, config.train.epochs)
    ema = build_ema(config.train.ema_decay, out if state is not None else None)
    # Written once the last checkpoint has loaded: a resume whose overrides do not fit it
    # fails above and leaves the run's config as it was.
    if world.main:  # under torchrun, process 0 writes the run directory
        ckpt.write_run_config(out, cfg.to_toml(config), resume_run)

    dev_rows = dev_sample(len(dev_split), config.data.dev_subset, config.train.seed)
    # Batches per fit() epoch: eval_every optimiser steps, each taking one batch per process
    # (under torchrun every process takes every P-th batch), or one pass over the data.
    per_epoch = config.schedule.eval_every * world.size or -(
        -len(train_split) // config.train.batch_size
    )
    pad = config.data.pad_multiple
    stream = StepStream(
        train_split,
        config.train.batch_size,
        per_epoch,
        config.train.seed,
        config.data.bucket,
        pad,
    )
    meta = run_meta(config, words, chars, meta_data, made)
    budget = Budget(config.schedule.budget_minutes)
    callbacks: list[Callback] = [
        *standard_callbacks(out, config.train, meta, scheduler, ema, per_epoch // world.size),
        budget,
        StopOnSignal(),
        *extra_callbacks,
    ]
    monitor = health.for_run(config.train, out, state, world.main)
    if monitor is not None:
        callbacks.append(monitor)
    threshold, eval_bs = config.schedule.threshold, config.data.eval_batch_size
    state = fit(
        model,
        optimizer,
        stream,
        config.train,
        evaluate=lambda m: evaluate_model(m, dev_split, dev_rows, eval_bs, threshold, pad),
        callbacks=callbacks,
        scheduler=scheduler,
        state=state,
    )
    stopped = budget.said(out) if world.main else bool(budget.stopped)
    return {**state.summary(), "budget_stopped": stopped}


@dataclass(frozen=True)
class Loaded:
    model: QANet
    words: Vocab
    chars: Vocab
    max_chars: int
    threshold: float
    meta: dict[str, Any]


def load_model(path: str | Path, device: str = "auto") -> Loaded:
    """A trained QANet from a run directory or checkpoint file, for inference: with EMA, the
    averaged weights (best holds them as its weights, last beside the raw ones)."""
    needs = ("model_config", "word_vocab", "char_vocab", "limits", "squad_version")
    checkpoint = ckpt.load(path, task=TASK, needs=needs)
    meta = checkpoint.meta
    model_config = cfg.from_dict(QANetConfig, meta["model_config"], "checkpoint model_config")
    words, chars = Vocab(tuple(meta["word_vocab"])), Vocab(tuple(meta["char_vocab"]))
    model = QANet(model_config, len(words), len(chars))
    checkpoint.load_weights(model, averaged=True)
    model.to(resolve_device(device)).eval()
    threshold = float(meta.get("schedule", {}).get("threshold", 0.0))
    return Loaded(model, words, chars, int(meta["limits"]["chars"]), threshold, meta)


def evaluate(
    path: str | Path,
    prepared: str | Path,
    split: str = "dev",
    predictions_out: str | Path | None = None,
) -> dict[str, float]:
    """Official EM/F1 of a checkpoint on every question of a prepared split.

    A training split holds fewer questions than its file (those past the length limits are
    left out) and may hold unanswerable ones made by pairing a question with another paragraph
    (``--negatives``), which the file does not: the scores are over the file's questions that
    the split holds; ``left_out`` counts the others, ``not_in_file`` the made ones.
    With ``predictions_out``, also writes the answers in the official format (question id ->
    answer text, "" for no answer), which ``treeqa evaluate qa --predictions`` scores again.
    A split prepared apart from the model's training data is renumbered into the model's
    vocabularies; ``words_unknown_to_model`` then counts its words the model reads as unknown.
    """
    loaded = load_model(path)
    data = PreparedSplit(Path(prepared), split)
    if note := tokenizer_drift(data.meta, prepared):
        say(f"warning: {note}")
    id_map = IdMap.between(data, loaded.words, loaded.chars)
    gold = data.gold()  # read before anything is written
    answers = predict_rows(loaded.model, data, None, 32, loaded.threshold, id_map)
    if predictions_out is not None:
        text = json.dumps({q: a.text for q, a in answers.items()}, ensure_ascii=False)
        ckpt.write_text_atomic(Path(predictions_out), text)
    scored = official_scores(gold_subset(gold, set(answers)), answers)
    scores = {
        **scored,
        "questions": scored["total"],  # counts, ints
        "left_out": len(gold_answers(gold)) - scored["total"],
        "not_in_file": scored["unknown"],
    }
    if id_map is not None:
        scores["words_unknown_to_model"] = float(id_map.unknown_words)
    return scores


MAX_CONTEXT_TOKENS = 2_000
"""The longest context ``predict`` takes: ~2.6 s for the paper's model on one CPU thread
(8.3 s at 4,000 tokens); SQuAD's contexts are under 1,000 tokens."""
MAX_QUESTION_TOKENS = 500
"""The longest question ``predict`` takes: SQuAD's are under 100 tokens (training keeps 50),
and a question's self-attention grows with the square of its length too (a 1 MiB request
body would be ~200,000 tokens)."""


def _encode(loaded: Loaded, tokens: Sequence[Sequence[str]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Padded word ids [B, T] and char ids [B, T, W] of tokenised texts."""
    width = max(len(t) for t in tokens)
    words = torch.zeros(len(tokens), width, dtype=torch.long)
    chars = torch.zeros(len(tokens), width, loaded.max_chars, dtype=torch.long)
    for i, toks in enumerate(tokens):
        words[i, : len(toks)] = torch.tensor(loaded.words.ids(toks), dtype=torch.long)
        for j, tok in enumerate(toks):
            ids = loaded.chars.ids(tok[: loaded.max_chars])
            chars[i, j, : len(ids)] = torch.tensor(ids, dtype=torch.long)
    return words, chars


class PairError(ValueError):
    """A context or question ``predict`` cannot answer; ``field`` says which."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field


def check_pair(k: int, pair: Any) -> None:
    """A TypeError or ValueError naming example ``k`` unless it is a (context, question)
    pair of strings that UTF-8 can carry (JSON's "\\ud800" decodes to a lone surrogate)."""
    if not isinstance(pair, tuple | list):
        raise TypeError(f"example {k}: a {type(pair).__name__}, not a (context, question) pair")
    if len(pair) != 2:
        raise TypeError(
            f"example {k}: a {type(pair).__name__} of {len(pair)}, not a (context, question) pair"
        )
    for name, text in zip(("context", "question"), pair, strict=True):
        if not isinstance(text, str):
            raise TypeError(f"example {k}: the {name} is a {type(text).__name__}, not a str")
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as err:
            raise ValueError(
                f"example {k}: the {name} is not valid text (a lone surrogate, "
                f"U+{ord(text[err.start]):04X}, at character {err.start})"
            ) from None


def predict(
    loaded: Loaded,
    examples: Sequence[tuple[str, str]],
    batch_size: int = 16,
    tokenizer: Tokenizer | None = None,
) -> list[dict[str, Any]]:
    """Per (context, question): the answer text, its character offsets and its probability
    (empty answer and start = end = -1 when a SQuAD 2.0 model answers nothing). A SQuAD 2.0
    model also gives ``no_answer_margin`` (log p(no answer) - log p(best span); it abstains
    when this beats its threshold) and ``best_span``, the text a lower threshold would answer.
    A server passes its ``tokenizer``: making one takes ~0.3 s. The model answers in eval mode
    (a model left in training mode by a loop is put back in it after)."""
    if not isinstance(loaded, Loaded):
        raise TypeError(
            f"a {type(loaded).__module__}.{type(loaded).__name__}, not a QA model: give what "
            "treeqa.recipes.qa.load_model returns"
        )
    if not isinstance(examples, Sequence):
        raise TypeError(
            f"examples is a {type(examples).__name__}; give a list of (context, question) pairs"
        )
    if (
        isinstance(batch_size, bool)
        or not isinstance(batch_size, numbers.Integral)
        or batch_size < 1
    ):
        raise ValueError(f"batch_size {batch_size!r}: give a positive number of pairs")
    for k, pair in enumerate(examples):
        check_pair(k, pair)
    # Tokenizer() imports spaCy, an optional dependency, only when made
    tokenizer, device = tokenizer or Tokenizer(), next(loaded.model.parameters()).device
    config, results = loaded.model.config, []
    for at in range(0, len(examples), batch_size):
        chunk = examples[at : at + batch_size]
        for i, name in enumerate(("context", "question")):
            if not all(visible(pair[i]) for pair in chunk):  # "\u200b", say: tokens, no text
                raise PairError(
                    name,
                    f"a {name} with no visible character (only whitespace, zero-width or "
                    "control characters)",
                )
        contexts = [tokenizer.tokenize(c) for c, _ in chunk]  # (tokens, spans [T, 2])
        questions = [tokenizer.tokenize(q)[0] for _, q in chunk]
        longest = max(len(toks) for toks, _ in contexts)
        if longest > MAX_CONTEXT_TOKENS:
            raise PairError(
                "context",
                f"a context of {longest} tokens; this reads at most {MAX_CONTEXT_TOKENS} at once "
                "(time grows with the square of the length): give it one passage at a time",
            )
        asked = max(len(toks) for toks in questions)
        if asked > MAX_QUESTION_TOKENS:
            raise PairError(
                "question",
                f"a question of {asked} tokens; this reads at most {MAX_QUESTION_TOKENS}",
            )
        cw, cc = _encode(loaded, [toks for toks, _ in contexts])
        qw, qc = _encode(loaded, questions)
        none = torch.full((len(chunk),), -1, dtype=torch.long)
        batch = QABatch(cw, cc, qw, qc, none, none, torch.arange(len(chunk))).to(device)
        with inference(loaded.model):
            logits = loaded.model(batch).logits
        # Best spans for all rows (threshold inf); the threshold is applied here.
        mask = batch.context_words != 0  # [B, L]
        best = decode(logits, mask, config.max_answer_len, config.no_answer, math.inf)
        for (context, _), (_, spans), s, e, p, m in zip(
            chunk, contexts, *(t.tolist() for t in best), strict=True
        ):
            a, b = int(spans[s, 0]), int(spans[e, 1])
            result: dict[str, Any] = {"answer": context[a:b], "start": a, "end": b}
            if config.no_answer and m > loaded.threshold:
                result = {"answer": "", "start": -1, "end": -1}
                p += m  # the no-answer score
            result["score"] = round(float(np.exp(p)), 6)
            if config.no_answer:
                result |= {"no_answer_margin": round(m, 6), "best_span": context[a:b]}
            results.append(result)
    return results
