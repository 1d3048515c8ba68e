"""Sentiment on SST-format treebanks: train, evaluate and predict with any sentiment model."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from treeqa import config as cfg
from treeqa.data import sst
from treeqa.data.batching import EncodedTree, batches, encode
from treeqa.data.dependency import DependencyTree
from treeqa.data.tree import UNLABELLED, Tree, unescape_ptb
from treeqa.data.vocab import Vocab
from treeqa.eval.metrics import SentimentMetrics, binary_predictions
from treeqa.health import monitor as health
from treeqa.models import (
    SENTIMENT_MODELS,
    build_sentiment_model,
    check_model_config,
    model_classes,
)
from treeqa.models.common import Output, inference
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
    check_metric,
    fit,
    resolve_device,
    seed_everything,
)
from treeqa.train.optim import build_optimizer, build_scheduler

TASK = "sentiment"


@dataclass(frozen=True)
class SentimentData:
    path: str = ""
    """Directory with train.txt, dev.txt, test.txt in SST's bracket format, or train/dev/test.jsonl
    dependency trees (`treeqa data prepare sst-dependency`); empty = embedded demo."""
    task: str = "fine"
    """fine (5 classes) | binary (neutral ignored, neutral-rooted sentences dropped) |
    binary3 (the same sentences, every node negative / neutral / positive, as Tai et al. train)"""
    vectors: str = ""
    """GloVe text (.txt/.gz) or spaCy vector table; empty = random embeddings. Several files
    joined by '+' are concatenated: a word's vector is its vector from each file, side by side
    (a path that exists as written is one file, '+' or not)."""
    lower_fallback: bool = True
    """Look a word up lower-cased when its exact form has no vector."""

    def __post_init__(self) -> None:
        cfg.check_fields(self, "data", choices={"task": tuple(sst.TASKS)})


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


def resolve_config(
    raw: dict[str, Any], overrides: Sequence[tuple[str, str]], named: int = 0
) -> Any:
    """TOML dict + overrides -> the experiment config; unknown keys are errors. The first
    ``named`` overrides come from named flags (see ``config.merge_overrides``)."""
    section = raw.get("model", {})  # not a table: from_dict below says so, naming the key
    name = section.get("name", "bow") if isinstance(section, dict) else "bow"
    for key, value in overrides:
        if ALIASES.get(key, key) == "model.name":
            name = value
    data = raw.get("data", {})
    if name == "qanet" or (isinstance(data, dict) and "prepared" in data):
        raise cfg.ConfigError(
            "this is a reading-comprehension (QANet) config or run: use `treeqa train qa`"
        )
    cls = experiment_class(name)
    try:
        config: Any = cfg.from_dict(cls, cfg.merge_overrides(cls, raw, overrides, ALIASES, named))
    except cfg.ConfigError as err:
        written = section.get("name", "bow") if isinstance(section, dict) else name
        keys = set(section) - {"name"} if isinstance(section, dict) else set()
        if written == name or not keys or "config.model" not in str(err):  # not [model]'s
            raise
        raise cfg.ConfigError(
            f"{err}: the config's [model] section is {written}'s, and --model {name} takes "
            f"other keys; start from a {name} config (configs/) or drop [model]'s other keys"
        ) from None
    # A num_classes the config's own task gives (a run's saved config.toml) is derived, not set
    # by hand: another --task replaces it.
    derived = sst.TASKS.get(data.get("task", "fine") if isinstance(data, dict) else "fine")
    given = isinstance(section, dict) and section.get("num_classes", derived) != derived
    given |= cfg.model_key_given(None, overrides, "num_classes")
    classes = sst.TASKS[config.data.task]
    if given and config.model.num_classes != classes:  # set from the task, never by hand
        raise cfg.ConfigError(
            f"model.num_classes: {config.model.num_classes} does not fit data.task "
            f"{config.data.task!r}, which has {classes} classes (it is set from the task)"
        )
    # Set here, so that a model built from the config (build_sentiment_model) fits the task.
    config = dataclasses.replace(
        config,
        data=home_paths(config.data),
        model=dataclasses.replace(config.model, num_classes=classes),
    )
    check_model_config(config.model)
    given = cfg.model_key_given(section, overrides, "embed_dim", ALIASES)
    if given and config.data.vectors and hasattr(config.model, "embed_dim"):
        check_embed_dim(config, vectors_width(config.data.vectors), given=True)
    return config


def vectors_width(spec: str) -> int | None:
    """D of ``data.vectors`` from the first line of each file (None if one does not tell)."""
    from treeqa.data.vectors import width

    widths = [width(path) for path in vector_files(spec)]
    return None if None in widths else sum(w for w in widths if w is not None)


def load_trees(
    data: SentimentData, names: Sequence[str] = sst.SPLITS, optional: Sequence[str] = ()
) -> dict[str, list[Tree]]:
    """The ``names`` splits of ``data`` (a folder of SST files, or the embedded demo). A split
    in ``optional`` whose file is missing or holds no tree is left out of the result."""
    if data.path:
        splits = {}
        for split in names:
            try:
                path = sst.split_path(data.path, split)
            except FileNotFoundError:
                if split in optional:
                    continue
                raise
            trees = sst.read_tree_file(path)
            if trees:
                splits[split] = trees
            elif split not in optional:  # nothing to learn from, or every score NaN
                raise ValueError(f"{path}: no trees in the {split} split")
    else:
        from treeqa.data.demo import demo_splits

        splits = {s: trees for s, trees in demo_splits().items() if s in names}
    return {s: sst.task_view(trees, data.task) for s, trees in splits.items()}


TRAINING_USE = {"train": "learn from", "dev": "choose the best epoch by"}
"""The splits training needs. Test, when the folder has it, only adds its words to the
vocabulary (``build_vocab``); a folder of train and dev alone trains as well."""


def training_trees(config: Any) -> dict[str, list[Tree]]:
    """The splits a run trains on (test too, when the folder has it), refused before anything
    is built where the model could learn nothing from them (``check_labelled``,
    ``check_binary``, ``check_both_sides``)."""
    data = config.data
    splits = load_trees(data, optional=("test",))
    if "test" not in splits:
        say(
            f"note: {data.path} has no test trees: the vocabulary is built from train "
            "and dev alone (with a test split, from all three)"
        )
    for split in TRAINING_USE:
        check_labelled(data.path, split, splits[split], TRAINING_USE[split], data.task)
    if config.model.name == "tree_lstm":
        check_binary(splits, data.path)
    check_both_sides(data.path, splits["train"], data.task)
    return splits


def check_embed_dim(config: Any, width: int | None, given: bool = False) -> None:
    """The vectors set the word-vector size: one given otherwise would be silently dropped,
    so it is refused. ``given``: the config or a flag set it (else the model's default, which
    the vectors replace, is let through)."""
    default = next(f.default for f in dataclasses.fields(config.model) if f.name == "embed_dim")
    allowed = (width,) if given else (default, width)
    if width is not None and config.model.embed_dim not in allowed:
        raise cfg.ConfigError(
            f"model.embed_dim {config.model.embed_dim}: the vectors in {config.data.vectors} "
            f"are {width}-d and set it; leave model.embed_dim out, or give vectors of that size "
            "(a resumed run: the vectors it started from)"
        )


def check_labelled(
    data_path: str,
    split: str,
    trees: Sequence[Tree],
    purpose: str = "score",
    data_task: str = "fine",
) -> None:
    """A split to learn from or score needs labelled sentences (root accuracy would be 0/0)."""
    if not any(t.label != UNLABELLED for t in trees):
        where = sst.split_path(data_path, split) if data_path else f"the demo {split} split"
        labels = (
            "a label"
            if data_task == "fine"
            else "a non-neutral label (the binary tasks score no neutral sentence)"
        )
        raise ValueError(f"{where}: no sentence has {labels}, so there is nothing to {purpose}")


def check_both_sides(data_path: str, trees: Sequence[Tree], data_task: str) -> None:
    """The binary tasks learn negative against positive: a train split whose every label reads
    as one side would train a model that always says it, and score 100% on a dev split like
    it (a treebank labelled 0/1 for negative/positive, read on SST's 0-4 scale)."""
    if sst.scored_as(data_task) != "binary":
        return
    sides = {y > 2 for t in trees for y in t.labels.tolist() if y not in (UNLABELLED, 2)}
    if len(sides) == 1:
        where = sst.split_path(data_path, "train") if data_path else "the demo train split"
        side = "positive (3-4)" if sides.pop() else "negative (0-1)"
        raise ValueError(
            f"{where}: every label is {side} or neutral under --task {data_task}, so there is "
            "nothing to tell apart; labels are SST's 0-4 scale (0-1 negative, 2 neutral, 3-4 "
            "positive): write a two-class treebank's classes as 0 and 4, or train it with "
            "--task fine"
        )


def build_vocab(splits: dict[str, list[Tree]]) -> Vocab:
    # Every split's words, as in Tai et al.'s preprocessing: test words are given their
    # pretrained vectors; labels are never used. Without a test split, train's and dev's.
    return Vocab.build(w for trees in splits.values() for t in trees for w in t.tokens)


def build_syntax_vocabs(splits: dict[str, list[Tree]]) -> tuple[Vocab | None, Vocab | None]:
    """POS-tag and relation vocabularies of dependency trees (None, None for constituency)."""
    trees = [t for split in splits.values() for t in split if isinstance(t, DependencyTree)]
    if not trees:
        return None, None
    tags = Vocab.build(tag for t in trees for tag in t.tags)
    return tags, Vocab.build(rel for t in trees for rel in t.rels)


def check_binary(splits: dict[str, list[Tree]], data_path: str) -> None:
    """A ValueError naming the file and line of the first tree with a node of more than two
    children, which the binary Tree-LSTM cannot read (before any training)."""
    for split, trees in splits.items():
        for tree in trees:
            if isinstance(tree, DependencyTree):  # refused as a whole by syntax_config
                return
            widest = max((len(c) for c in tree.children), default=0)
            if widest > 2:
                path = sst.split_path(data_path, split)
                # The binary tasks' view has no neutral-rooted sentences: count in the file's.
                full = sst.load_split(data_path, split)
                k = next(i for i, t in enumerate(full) if t == tree)
                lines = sst.tree_lines(path)
                where = f"{path}:{lines[k]}" if len(lines) == len(full) else f"{path}, tree {k + 1}"
                raise ValueError(
                    f"{where}: a node with {widest} children; the binary Tree-LSTM takes at "
                    "most 2 (the Child-Sum Tree-LSTM, --model childsum, takes any number)"
                )


def syntax_config(model_config: Any, tags: Vocab | None, rels: Vocab | None) -> dict[str, int]:
    """Model-config fields set from the data's tree kind; a model that cannot read the data
    (the binary Tree-LSTM on dependency trees, tags without tags) is an error here."""
    if tags is None or rels is None:
        if getattr(model_config, "tag_dim", 0) or getattr(model_config, "rel_dim", 0):
            raise ValueError(
                "model.tag_dim and model.rel_dim need dependency trees (data from "
                "`treeqa data prepare sst-dependency`); set them to 0 for constituency trees"
            )
        return {}
    if model_config.name == "tree_lstm":
        raise ValueError(
            "the binary Tree-LSTM reads constituency trees; on dependency trees use "
            "--model childsum or --model tree_gru"
        )
    if hasattr(model_config, "tag_dim"):
        return {"num_tags": len(tags), "num_rels": len(rels)}
    return {}


def parser_of(data: SentimentData) -> str:
    """The spaCy pipeline that parsed a dependency data directory ("" for PTB trees)."""
    meta = Path(data.path) / "meta.json" if data.path else None
    if meta is None or not meta.is_file():
        return ""
    try:
        found = json.loads(meta.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{meta}: not a JSON file ({e})") from None
    if not isinstance(found, dict) or not isinstance(found.get("pipeline", ""), str):
        raise ValueError(f"{meta}: expected a JSON object whose 'pipeline' is a string")
    return str(found.get("pipeline", ""))


def build_vectors(data: SentimentData, vocab: Vocab) -> np.ndarray | None:
    if not data.vectors:
        return None
    from treeqa.data.vectors import load_vectors

    keys = [None, None] + [unescape_ptb(t) for t in vocab.tokens[2:]]
    tables = []  # [V, D_i] per file; a word's vector is their concatenation
    paths = vector_files(data.vectors)
    if "" in paths:
        raise cfg.ConfigError(
            f"data.vectors: {data.vectors!r} has an empty part; join vector files as A+B"
        )
    for path in paths:  # every part found before minutes of reading the first
        if not Path(path).is_file():
            problem = "not a file" if Path(path).exists() else "no such file"
            raise FileNotFoundError(f"data.vectors: {path}: {problem}")
    for i, path in enumerate(paths):
        vectors = load_vectors(path, keys, lower_fallback=data.lower_fallback, seed=i)
        say(f"vectors: {vectors.report.summary()}")  # under torchrun, by process 0
        tables.append(vectors.matrix)
    return np.concatenate(tables, 1)


def check_same_vectors(run_dir: Path, vectors: str) -> None:
    """A resumed run may find its vectors moved (``data.vectors`` may change), not other ones:
    they set only the starting weights, which the checkpoint replaces, and the run's record
    would then name vectors it never started from. The same files are the same names."""
    if not (run_dir / ckpt.LAST).is_file():
        return  # it starts again: from these vectors
    data = ckpt.read_meta(run_dir, prefer=ckpt.LAST).get("data", {})
    trained = data.get("vectors", "") if isinstance(data, dict) else ""
    names = [[Path(p).name for p in vector_files(v)] if v else [] for v in (trained, vectors)]
    if names[0] != names[1]:
        raise cfg.ConfigError(
            f"data.vectors: {run_dir} started from {trained or 'random vectors'}, not "
            f"{vectors or 'random vectors'}; a resumed run keeps its own (give the same files "
            "where they lie now, or leave --vectors out)"
        )


def vector_files(vectors: str) -> list[str]:
    """The files of ``data.vectors``: one, or several joined by '+' (a path that exists as
    written is one file, '+' or not)."""
    return [vectors] if Path(vectors).exists() else vectors.split("+")


def map_paths(data: SentimentData, fn: Callable[[str, str], str]) -> SentimentData:
    """``data`` with ``fn(path, key)`` applied to its path and to each of its vector files."""
    files = vector_files(data.vectors) if data.vectors else []
    vectors = "+".join(fn(p, "data.vectors") for p in files)
    return dataclasses.replace(data, path=fn(data.path, "data.path"), vectors=vectors)


def home_paths(data: SentimentData) -> SentimentData:
    """``data`` with a ``~`` that begins a path (or one of the vector files) expanded."""
    return map_paths(data, cfg.home_path)


def absolute_paths(data: SentimentData) -> SentimentData:
    """``data`` with its paths made absolute: the run's config.toml names the same files from
    any working directory (``--resume``, ``treeqa evaluate``)."""
    return map_paths(data, lambda path, key: str(Path(path).resolve()) if path else path)


def evaluate_model(
    model: nn.Module, trees: Sequence[EncodedTree], task: str, batch_size: int = 256
) -> dict[str, float]:
    """Root and all-node accuracy of ``model`` (any whose forward takes a ``TreeBatch`` and
    returns logits for every node) on ``trees`` (``batching.encode``), as ``treeqa evaluate``
    reports them for ``task``; the model runs in eval mode, put back as it was after."""
    device = next(model.parameters()).device
    metrics = SentimentMetrics()
    with inference(model):
        for batch in batches(trees, batch_size, shuffle=False):
            batch = batch.to(device)
            output: Output = model(batch)
            metrics.update(output.logits, batch.labels, batch.roots)
    return metrics.compute(task)


def run_meta(
    config: Any, vocab: Vocab, tags: Vocab | None, rels: Vocab | None, made: dict[str, Any]
) -> dict[str, Any]:
    """What every checkpoint of a run carries besides its weights and training state."""
    return {
        "task": TASK,
        "model": config.model.name,
        "model_config": cfg.to_dict(config.model),
        "data": cfg.to_dict(config.data),
        "train_config": cfg.to_dict(config.train),
        "config": cfg.to_toml(config),  # what a resumed run is checked against
        "vocab": list(vocab.tokens),
        **({"tags": list(tags.tokens), "rels": list(rels.tokens)} if tags and rels else {}),
        "parser": parser_of(config.data),
        "made_with": made,
    }


def train(
    config: Any,
    out: str | Path,
    *,
    resume_run: bool = False,
    extra_callbacks: Sequence[Callback] = (),
) -> dict[str, Any]:
    """Train one sentiment model into run directory ``out``; returns ``fit()``'s summary
    (``best_dev``, the best dev score, and ``best_epoch``, ``epochs``, ``steps``, ...)."""
    out = Path(out)
    with ckpt.run_lock(out, World.from_env().main, resume=resume_run):
        return _train(config, out, resume_run=resume_run, extra_callbacks=extra_callbacks)


def _train(
    config: Any, out: Path, *, resume_run: bool = False, extra_callbacks: Sequence[Callback] = ()
) -> dict[str, Any]:
    ckpt.check_run_dir(out, resume_run)
    config = dataclasses.replace(config, data=absolute_paths(config.data))
    if resume_run:  # before the vectors are read
        check_same_vectors(out, config.data.vectors)
    seed_everything(config.train.seed)
    try:
        splits = training_trees(config)
    except FileNotFoundError as error:
        if not resume_run:
            raise
        raise FileNotFoundError(
            f"{error}; the run was trained on {config.data.path} (its config.toml): if the "
            "data moved, resume with --data set to where it is now"
        ) from None
    vocab = build_vocab(splits)
    tags, rels = build_syntax_vocabs(splits)
    vectors = build_vectors(config.data, vocab)
    if vectors is not None:
        check_embed_dim(config, vectors.shape[1])
    model_config = dataclasses.replace(
        config.model,
        num_classes=sst.TASKS[config.data.task],
        **({"embed_dim": vectors.shape[1]} if vectors is not None else {}),
        **syntax_config(config.model, tags, rels),
    )
    config = dataclasses.replace(config, model=model_config)
    world = World.from_env()

    model = build_sentiment_model(model_config.name, model_config, len(vocab), vectors)
    optimizer = build_optimizer(model, config.train)
    scheduler = build_scheduler(optimizer, config.train)
    check_metric(config.train.metric, SentimentMetrics.names(model_config.num_classes))
    if resume_run:
        check_resumable(out, config)
    data = config.data
    files = [sst.split_path(data.path, s) for s in splits] if data.path else []
    files += [Path(p) for p in vector_files(data.vectors)] if data.vectors else []
    made = provenance.made_with(files)
    if resume_run and (note := provenance.data_changed(out, made)):
        say(note)
    same = {"vocab": list(vocab.tokens)}
    state = resume(out, model, optimizer, scheduler, same) if resume_run else None
    say_if_done(out, state, config.train.epochs)
    ema = build_ema(config.train.ema_decay, out if state is not None else None)
    # Written once the last checkpoint has loaded: a resume whose overrides do not fit it
    # fails above and leaves the run's config as it was.
    if world.main:  # under torchrun, process 0 writes the run directory
        ckpt.write_run_config(out, cfg.to_toml(config), resume_run)

    encoded = {
        s: [encode(t, vocab, config.data.task, tags, rels) for t in trees]
        for s, trees in splits.items()
    }
    # A sentence with no label (labels are optional in the bracket format) gives no loss: a
    # batch of only such sentences would stop the run part-way, so they are left out here.
    learnable = [e for e in encoded["train"] if bool((e.targets >= 0).any())]
    if len(learnable) < len(encoded["train"]):
        say(
            f"train: {len(encoded['train']) - len(learnable)} of {len(encoded['train'])} "
            f"sentences carry no {config.data.task} label on any node: left out of training"
        )
    encoded["train"] = learnable
    meta = run_meta(config, vocab, tags, rels, made)
    n_batches = -(-len(encoded["train"]) // config.train.batch_size)
    callbacks: list[Callback] = [
        *standard_callbacks(out, config.train, meta, scheduler, ema, n_batches // world.size),
        StopOnSignal(),
        *extra_callbacks,
    ]
    monitor = health.for_run(config.train, out, state, world.main)
    if monitor is not None:
        callbacks.append(monitor)
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
    tags: Vocab | None = None
    """POS tags and relations of a model trained on dependency trees (else None)."""
    rels: Vocab | None = None

    @property
    def parser(self) -> str:
        """The spaCy pipeline its dependency trees came from ("" for constituency trees)."""
        return str(self.meta.get("parser", ""))

    def encode(self, tree: Tree) -> EncodedTree:
        if self.tags is not None and not isinstance(tree, DependencyTree):
            text = "raw text, or " if self.parser else ""
            raise ValueError(
                f"this model was trained on dependency trees, not bracketed ones: give it {text}"
                "data from `treeqa data prepare sst-dependency`"
            )
        if self.tags is None and isinstance(tree, DependencyTree):
            raise ValueError(
                "this model was trained on bracketed constituency trees, not dependency trees: "
                "give it trees in SST's bracket format"
            )
        return encode(tree, self.vocab, self.task, self.tags, self.rels)

    def parse(self, text: str) -> list[Tree]:
        """Raw text -> one dependency tree per sentence, parsed as the training data was."""
        if not self.parser and self.tags is not None:
            raise ValueError(
                "this model was trained on dependency trees whose parser is not recorded (its "
                "data folder had no meta.json naming the spaCy pipeline), so text cannot be "
                "parsed as its data was: predict from parsed trees (`treeqa predict --input "
                "FILE.jsonl`, one a line as `treeqa data prepare sst-dependency` writes them)"
            )
        if not self.parser:
            raise ValueError(
                "this model reads bracketed constituency trees, and treeqa has no constituency "
                "parser: give a bracketed tree, or train on dependency trees "
                "(`treeqa data prepare sst-dependency`) to predict from raw text"
            )
        from treeqa.data.dependency import load_parser, parse_text

        trees: list[Tree] = list(parse_text(load_parser(self.parser), text))
        if not trees:
            raise ValueError("no words to predict in the text")
        return trees


def load_model(path: str | Path, device: str = "auto") -> Loaded:
    """A trained model from a run directory or checkpoint file, ready for inference: with EMA,
    the averaged weights (best holds them as its weights, last beside the raw ones)."""
    checkpoint = ckpt.load(path, task=TASK, needs=("model", "model_config", "vocab", "data"))
    meta = checkpoint.meta
    if meta["model"] not in SENTIMENT_MODELS:
        raise ckpt.CheckpointError(
            f"{checkpoint.file}: a model this treeqa does not know ({meta['model']!r}; it knows "
            f"{', '.join(SENTIMENT_MODELS)})"
        )
    config_cls = model_classes(meta["model"])[0]
    model_config: Any = cfg.from_dict(config_cls, meta["model_config"], "checkpoint model_config")
    vocab = Vocab(tuple(meta["vocab"]))
    model = build_sentiment_model(meta["model"], model_config, len(vocab))
    checkpoint.load_weights(model, averaged=True)
    model.to(resolve_device(device)).eval()
    tags, rels = (Vocab(tuple(meta[k])) if k in meta else None for k in ("tags", "rels"))
    return Loaded(model, vocab, meta["data"]["task"], meta, tags, rels)


def evaluate(path: str | Path, data_path: str, split: str) -> dict[str, float]:
    if split not in sst.SPLITS:
        raise ValueError(f"split must be one of {', '.join(sst.SPLITS)}, got {split!r}")
    loaded = load_model(path)
    data = SentimentData(path=data_path, task=loaded.task)
    trees = load_trees(data, (split,))[split]  # a folder holding that split alone will do
    check_labelled(data_path, split, trees, data_task=loaded.task)
    if loaded.meta["model"] == "tree_lstm":
        check_binary({split: trees}, data_path)
    encoded = [loaded.encode(t) for t in trees]
    scores: dict[str, float] = evaluate_model(loaded.model, encoded, loaded.task)
    scores["sentences"] = len(trees)
    if not data_path:
        # The demo treebank is built to test composition: score its negated sentences apart.
        from treeqa.data.demo import is_negated

        negated = [e for e, t in zip(encoded, trees, strict=True) if is_negated(t)]
        scores["negated_root_acc"] = evaluate_model(loaded.model, negated, loaded.task)["root_acc"]
        scores["negated_sentences"] = len(negated)
    return scores


def syntax_of(tree: Tree, i: int) -> dict[str, Any]:
    """A dependency node's own word, its place in the sentence, tag and relation ({} else)."""
    if not isinstance(tree, DependencyTree):
        return {}
    return {
        "word": tree.words[i],
        "position": int(tree.position[i]),
        "tag": tree.tags[i],
        "rel": tree.rels[i],
    }


MAX_PREDICT_NODES = 5_000
"""The largest tree ``predict`` takes (SST's longest sentence has 111 nodes). Memory grows with
the nodes whatever the shape (children are packed), but time grows with the height: a chain
of 5,000 nodes is 5,000 levels run one after another (~10 s on a CPU)."""


def check_predictable(loaded: Loaded, tree: Tree) -> None:
    """A ValueError for a tree ``predict`` should not run: too large, or too wide for the
    binary Tree-LSTM (checked here, before the batch is built)."""
    if len(tree) > MAX_PREDICT_NODES:
        raise ValueError(
            f"a tree of {len(tree)} nodes; predict takes at most {MAX_PREDICT_NODES} at once"
        )
    widest = max((len(c) for c in tree.children), default=0)
    if loaded.meta["model"] == "tree_lstm" and widest > 2:
        raise ValueError(
            f"this model takes trees with at most 2 children per node, got {widest}; use the "
            "Child-Sum Tree-LSTM (--model childsum) for any fan-out"
        )


def labels_of(probs: torch.Tensor, task: str) -> torch.Tensor:
    """[N] predicted labels from [N, C] probabilities; a binary3 model's are negative or
    positive (0 or 2), as it is scored: neutral never wins."""
    if task == "binary3":
        return binary_predictions(probs) * 2
    return probs.argmax(1)


def predict(loaded: Loaded, trees: Sequence[Tree]) -> list[dict[str, Any]]:
    """Per tree: the predicted label and class probabilities of every node (pre-order), from
    the model in eval mode (a model left in training mode by a loop is put back in it after),
    and its words outside the model's vocabulary (``unknown_words``)."""
    if not isinstance(loaded, Loaded):
        raise TypeError(
            f"a {type(loaded).__module__}.{type(loaded).__name__}, not a sentiment model: "
            "give what treeqa.recipes.sentiment.load_model returns"
        )
    if not isinstance(trees, Sequence):
        raise TypeError(
            f"trees is a {type(trees).__name__}; give a list of Trees"
            + (" ([tree] for one)" if isinstance(trees, Tree) else "")
        )
    for k, tree in enumerate(trees):
        if not isinstance(tree, Tree):
            raise TypeError(
                f"tree {k}: a {type(tree).__name__}, not a Tree (treeqa.data.tree.parse_tree "
                "reads a bracketed string into one)"
            )
        check_predictable(loaded, tree)
    if not trees:
        return []
    encoded = [loaded.encode(t) for t in trees]
    device = next(loaded.model.parameters()).device
    results: list[dict[str, Any]] = []
    with inference(loaded.model):
        batch = batches(encoded, len(encoded), shuffle=False)[0].to(device)
        probs = loaded.model(batch).logits.float().softmax(1).cpu()  # [N, C]
    labels = labels_of(probs, loaded.task).tolist()  # [N]
    start = 0
    for tree in trees:
        p, label = probs[start : start + len(tree)], labels[start : start + len(tree)]
        start += len(tree)
        results.append(
            {
                "text": tree.text(),
                "label": label[0],
                "probabilities": [round(float(x), 4) for x in p[0]],
                # Read as one unknown word, whatever they mean: a sentence of them is no reading
                "unknown_words": list(
                    dict.fromkeys(w for w in tree.words if w is not None and w not in loaded.vocab)
                ),
                "nodes": [
                    {
                        "words": tree.phrase(i),
                        "label": label[i],
                        "parent": int(tree.parent[i]),  # pre-order index; -1 at the root
                        **syntax_of(tree, i),
                    }
                    for i in range(len(tree))
                ],
            }
        )
    return results
