"""Optimisers with parameter groups (word embeddings apart) and the warm-up schedule."""

from __future__ import annotations

import math

import torch
from torch import nn

from treeqa.train.loop import TrainConfig

EMBEDDING_SUFFIX = "embed.weight"
"""Parameters whose name ends with this get ``emb_lr`` and no weight decay."""


def param_groups(model: nn.Module, config: TrainConfig) -> list[dict[str, object]]:
    """Two groups: word embeddings at ``emb_lr`` (frozen when 0) and the rest at ``lr``."""
    embed, rest = [], []
    for name, p in model.named_parameters():
        if name.endswith(EMBEDDING_SUFFIX):
            if config.emb_lr == 0:
                p.requires_grad_(False)
            else:
                embed.append(p)
        elif p.requires_grad:
            rest.append(p)
    groups: list[dict[str, object]] = [
        {"name": "params", "params": rest, "lr": config.lr, "weight_decay": config.weight_decay}
    ]
    if embed:
        groups.append({"name": "embed", "params": embed, "lr": config.emb_lr, "weight_decay": 0.0})
    return groups


def build_optimizer(model: nn.Module, config: TrainConfig) -> torch.optim.Optimizer:
    groups = param_groups(model, config)
    if config.optim == "adagrad":
        return torch.optim.Adagrad(groups, lr=config.lr)
    if config.optim == "adam":
        b1, b2 = config.adam_betas
        return torch.optim.Adam(groups, lr=config.lr, betas=(b1, b2), eps=config.adam_eps)
    raise ValueError(f"train.optim must be adagrad or adam, got {config.optim!r}")


def build_scheduler(
    optimizer: torch.optim.Optimizer, config: TrainConfig
) -> torch.optim.lr_scheduler.LRScheduler | None:
    """QANet's inverse-exponential warm-up: lr * log(step + 1) / log(warmup) until warmup."""
    if config.warmup_steps <= 0:
        return None
    warmup = config.warmup_steps

    def factor(step: int) -> float:
        return min(1.0, math.log(step + 1) / math.log(warmup)) if step < warmup else 1.0

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
