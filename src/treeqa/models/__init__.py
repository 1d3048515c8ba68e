"""Model names -> (config class, model class): the one table configs are resolved through."""

from __future__ import annotations

from typing import Any

from treeqa.config import ConfigError, check_fields
from treeqa.models.baselines import BagOfWords, BowConfig
from treeqa.models.childsum import ChildSumConfig, ChildSumTreeLSTM
from treeqa.models.tree_gru import TreeGRU, TreeGRUConfig
from treeqa.models.tree_lstm import TreeLSTM, TreeLSTMConfig

SENTIMENT_MODELS: dict[str, tuple[type, type]] = {
    "bow": (BowConfig, BagOfWords),
    "tree_lstm": (TreeLSTMConfig, TreeLSTM),
    "childsum": (ChildSumConfig, ChildSumTreeLSTM),
    "tree_gru": (TreeGRUConfig, TreeGRU),
}


def model_classes(name: str) -> tuple[type, type]:
    """The config and model classes of ``model.name``; a ConfigError naming the key (and so,
    read from a file, the file) and the names there are."""
    if name not in SENTIMENT_MODELS:
        raise ConfigError(
            f"model.name: expected one of {' | '.join(SENTIMENT_MODELS)}, got {name!r}"
        )
    return SENTIMENT_MODELS[name]


def check_model_config(config: Any) -> None:
    """A ConfigError naming ``model.<key>`` for a size or rate a sentiment model cannot take
    (the recipe checks it when the config is resolved, before any data is read)."""
    sizes = [k for k in ("embed_dim", "hidden_dim", "num_classes") if hasattr(config, k)]
    optional = [k for k in ("attention_dim", "tag_dim", "rel_dim") if hasattr(config, k)]
    rates = [k for k in ("dropout",) if hasattr(config, k)]
    check_fields(
        config,
        "model",
        at_least=dict.fromkeys(sizes, 1) | dict.fromkeys(optional + rates, 0),
        below=dict.fromkeys(rates, 1),
    )


def build_sentiment_model(name: str, config: Any, vocab_size: int, vectors: Any = None) -> Any:
    check_model_config(config)
    return model_classes(name)[1](config, vocab_size, vectors)
