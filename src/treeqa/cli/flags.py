"""The flags that more than one command takes, each defined once.

A command builds its parser from these pieces and its own flags; a flag a command does not
take is absent from its ``--help`` and, given anyway, refused (``main.foreign_flags``).

Config flags (``--lr 0.05``) are named shortcuts for config keys: argparse reads them, and the
task's recipe resolves them like any ``--key=value`` override (its aliases map ``--wd`` to
``train.weight_decay``). A config flag belongs to the tasks it states a default for; the
defaults are the configs' own, as a test checks, written here so that ``--help`` need not
import torch.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TASK_NAMES = {"sentiment": "sentiment", "qa": "reading comprehension"}


def usage_prog(command: str, task: str) -> str:
    """How --help names a task's command: the word sentiment may be left out."""
    return f"treeqa {command} {'[sentiment]' if task == 'sentiment' else task}"


CONFIG_HELP = (
    "A named flag sets the config key in brackets; any other key is set with "
    "--section.key=value or --key value ({sections}); unknown keys are errors. A key not "
    "given keeps its value from --config, else the default shown."
)
"""The description line of every command that takes config overrides."""

Group = argparse.ArgumentParser | argparse._ArgumentGroup


@dataclass(frozen=True)
class ConfigFlag:
    """``--name VALUE``: the override ``name=VALUE`` of config key ``key``."""

    name: str
    key: str
    help: str
    defaults: Mapping[str, str]
    """Task -> the config's default (as TOML would write it; "" for an empty string)."""
    metavar: str | None = None
    choices: tuple[str, ...] | None = None
    empty: str = ""
    """What an empty default means, for --help."""
    only: str = ""
    """The one model whose config has this key."""
    alias: str = ""
    """A second spelling of the flag."""
    group: str = ""
    """The --help group it is listed in ("": the command's own options)."""

    def add(self, group: Group, task: str, default: str = "") -> None:
        """Add it to ``group`` for ``task``; ``default`` says what a missing flag means there."""
        default = default or self.defaults[task] or self.empty
        scope = f"; {self.only} only" if self.only else ""
        names = [f"--{self.name}"] + ([f"--{self.alias}"] if self.alias else [])
        group.add_argument(
            *names,
            dest=self.name,
            metavar=self.metavar,
            choices=self.choices,
            help=f"{self.help} [{self.key}{scope}] (default: {default})",
        )


NAME = ConfigFlag(
    "name",
    "name",
    "run name; a new run goes to runs/NAME unless --out says otherwise",
    {"sentiment": "sentiment", "qa": "qanet"},
    metavar="NAME",
)
MODEL = ConfigFlag(
    "model",
    "model.name",
    "sentiment model",
    {"sentiment": "bow"},
    choices=("bow", "tree_lstm", "childsum", "tree_gru"),
    group="model",
)
TAG_DIM = ConfigFlag(
    "tag_dim",
    "model.tag_dim",
    "POS-tag vector size (dependency trees); 0 = no tags",
    {"sentiment": "0"},
    metavar="N",
    only="tree_gru",
    group="model",
)
REL_DIM = ConfigFlag(
    "rel_dim",
    "model.rel_dim",
    "dependency-relation vector size; 0 = no relations",
    {"sentiment": "0"},
    metavar="N",
    only="tree_gru",
    group="model",
)
AT_HID_DIM = ConfigFlag(
    "at_hid_dim",
    "model.attention_dim",
    "hidden size of the attention gate over children; 0 = no gate",
    {"sentiment": "0"},
    metavar="N",
    only="tree_gru",
    group="model",
)
DATA = ConfigFlag(
    "data",
    "data.path",
    "dataset directory: SST's train/dev/test.txt, or train/dev/test.jsonl dependency trees",
    {"sentiment": ""},
    metavar="DIR",
    empty="the embedded demo treebank",
    group="data",
)
TASK = ConfigFlag(
    "task",
    "data.task",
    "fine: 5 classes; binary: negative vs positive, neutral sentences dropped; binary3: "
    "the same scored as binary, trained on 3 classes at every node (Tai et al.)",
    {"sentiment": "fine"},
    choices=("fine", "binary", "binary3"),
    group="data",
)
VECTORS = ConfigFlag(
    "vectors",
    "data.vectors",
    "word vectors: GloVe text (.txt/.gz) or a spaCy table; A+B puts two side by side",
    {"sentiment": ""},
    metavar="FILE",
    empty="none, random embeddings",
    group="data",
)
PREPARED = ConfigFlag(
    "prepared",
    "data.prepared",
    "prepared SQuAD directory, from `treeqa data prepare squad`",
    {"qa": "runs/squad_v1"},
    metavar="DIR",
    alias="data",
    group="data",
)
EPOCHS = ConfigFlag(
    "epochs",
    "train.epochs",
    "passes over the training data; for QANet with schedule.eval_every > 0, rounds of "
    "eval_every steps, each ending in a dev evaluation",
    {"sentiment": "10", "qa": "10"},
    metavar="N",
    group="training",
)
BATCH_SIZE = ConfigFlag(
    "batch_size",
    "train.batch_size",
    "examples per optimiser step (per process under torchrun)",
    {"sentiment": "25", "qa": "32"},
    metavar="N",
    group="training",
)
OPTIM = ConfigFlag(
    "optim",
    "train.optim",
    "optimiser",
    {"sentiment": "adagrad", "qa": "adam"},
    choices=("adagrad", "adam"),
    group="training",
)
LR = ConfigFlag(
    "lr",
    "train.lr",
    "learning rate of every parameter but the word vectors",
    {"sentiment": "0.05", "qa": "0.001"},
    metavar="LR",
    group="training",
)
EMBLR = ConfigFlag(
    "emblr",
    "train.emb_lr",
    "learning rate of the word vectors; 0 freezes them",
    {"sentiment": "0.1"},
    metavar="LR",
    group="training",
)
WD = ConfigFlag(
    "wd",
    "train.weight_decay",
    "L2 penalty on the parameters but the word vectors",
    {"sentiment": "1e-4"},
    metavar="L2",
    group="training",
)
SEED = ConfigFlag(
    "seed",
    "train.seed",
    "random seed",
    {"sentiment": "0", "qa": "0"},
    metavar="N",
    group="training",
)
HEALTH = ConfigFlag(
    "health",
    "train.health",
    "training-health monitor; strict stops the run (exit 3) on an error finding",
    {"sentiment": "on", "qa": "on"},
    choices=("off", "on", "strict"),
    group="training",
)

CONFIG_FLAGS: tuple[ConfigFlag, ...] = (
    *(NAME, DATA, TASK, VECTORS, PREPARED, MODEL, TAG_DIM, REL_DIM, AT_HID_DIM),
    *(EPOCHS, BATCH_SIZE, OPTIM, LR, EMBLR, WD, SEED, HEALTH),
)
"""Every config flag, in --help order."""

ELSEWHERE = {
    "--vectors": "QANet's word vectors are fixed by `treeqa data prepare squad --vectors`",
    "--wd": "QANet's weight decay is --train.weight_decay",
    "--seeds": "for QANet, train each seed with `treeqa train qa --train.seed=K` and score it "
    "with --checkpoint",
}
"""Said after the error for a flag given to the task that does not take it."""


def config_flags(task: str) -> list[ConfigFlag]:
    return [flag for flag in CONFIG_FLAGS if task in flag.defaults]


def add_config_flags(
    parser: argparse.ArgumentParser, task: str, defaults: Mapping[str, str] = {}
) -> None:
    """The task's config flags, each in its group; ``defaults``: flag name -> what a missing
    flag means for this command, where that is not the config's default."""
    groups: dict[str, Group] = {"": parser}
    for flag in config_flags(task):
        if flag.group not in groups:
            groups[flag.group] = parser.add_argument_group(flag.group)
        flag.add(groups[flag.group], task, defaults.get(flag.name, ""))


def named_overrides(args: argparse.Namespace, named: Iterable[ConfigFlag]) -> list[tuple[str, str]]:
    """(name, value) of the flags in ``named`` that were given. argparse reads these itself, so
    their place among the other overrides is lost: they go first, and ``merge_overrides``
    refuses a later override that sets the same key otherwise."""
    values = [(flag.name, getattr(args, flag.name, None)) for flag in named]
    return [(name, str(value)) for name, value in values if value is not None]


def add_config(group: Group, example: str) -> None:
    group.add_argument(
        "--config",
        type=Path,
        metavar="TOML",
        help=f"config file, or the name of one treeqa ships, e.g. {example} "
        "(default: none, the defaults below)",
    )


def add_resume(group: Group) -> None:
    group.add_argument(
        "--resume",
        type=Path,
        metavar="RUN_DIR",
        help="continue the run in RUN_DIR from its last checkpoint, with its config "
        "(default: start a new run)",
    )


def add_out(group: Group, help: str = "run directory") -> None:
    group.add_argument("--out", type=Path, metavar="DIR", help=f"{help} (default: runs/NAME)")


def add_json(
    group: Group,
    help: str = "standard output is one JSON object alone; the text goes to stderr",
) -> None:
    group.add_argument("--json", action="store_true", help=f"{help} (default: text only)")


def add_checkpoint(group: Group, help: str, required: bool = False) -> None:
    group.add_argument(
        "--checkpoint",
        type=Path,
        metavar="RUN",
        required=required,
        help=f"{help}: a run directory (its best checkpoint, else its last) or a .safetensors file"
        + ("" if required else " (default: none)"),
    )


def add_split(
    group: Group, default: str, splits: tuple[str, ...] = ("train", "dev", "test")
) -> None:
    group.add_argument("--split", choices=splits, help=f"split to score (default: {default})")


def add_input(group: Group, help: str) -> None:
    group.add_argument("--input", type=Path, metavar="FILE", help=f"{help} (default: none)")


def add_output(group: Group) -> None:
    group.add_argument(
        "--output",
        type=Path,
        metavar="FILE",
        help="write the results here, one JSON line each, replacing the file once all are "
        "written (default: print them)",
    )


def add_overwrite(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="replace an --out this command wrote before and that holds nothing else "
        "(default: a non-empty --out is an error)",
    )


def resolve_file(
    resolve: Callable[..., Any],
    source: Path | None,
    named: list[tuple[str, str]],
    overrides: Sequence[str],
) -> Any:
    """``resolve`` (a recipe's ``resolve_config``) over the TOML file ``source``, the config
    flags ``named`` and the ``--key=value`` ``overrides``. An error in the file itself (a
    sentiment config given to ``train qa``, a value of the wrong type) names the file; a bare
    name (``tree_lstm_fine``) that is no file here is the config treeqa ships."""
    from treeqa.config import ConfigError, find_config, load_toml, parse_overrides

    raw = load_toml(find_config(source)) if source else {}
    if source:
        try:
            resolve(raw, [])
        except ConfigError as err:
            raise ConfigError(f"{source}: {err}") from None
    return resolve(raw, named + parse_overrides(overrides), len(named))
