"""Optimisers with parameter groups (word embeddings apart) and the warm-up schedule."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.optim.adagrad import adagrad

from treeqa.train.loop import TrainConfig

EMBEDDING_SUFFIX = "embed.weight"
"""Parameters whose name ends with this get ``emb_lr`` and no weight decay."""


def param_groups(model: nn.Module, config: TrainConfig) -> list[dict[str, Any]]:
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
    groups: list[dict[str, Any]] = [
        {"name": "params", "params": rest, "lr": config.lr, "weight_decay": config.weight_decay}
    ]
    if embed:
        groups.append(
            {
                "name": "embed",
                "params": embed,
                "lr": config.emb_lr,
                "weight_decay": 0.0,
                "sgd": config.emb_optim == "sgd",
            }
        )
    return groups


class Adagrad(torch.optim.Adagrad):
    """torch's Adagrad, except that a group with ``"sgd": True`` takes plain SGD steps.

    Tai et al.'s code steps the word vectors with plain SGD (``emb:updateParameters``) after
    Adagrad has stepped the other parameters. An Adagrad step moves every touched coordinate by
    about lr at first, whatever the gradient's size; plain SGD moves a word vector in proportion
    to its gradient, so pretrained vectors change slowly. Dense or sparse gradients both work.
    """

    def __init__(self, groups: list[dict[str, Any]], lr: float):
        super().__init__(groups, lr=lr)
        for group in self.param_groups:
            group.setdefault("sgd", False)
            if group["sgd"]:  # no squared-gradient sums for these
                for p in group["params"]:
                    self.state.pop(p, None)

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:  # type: ignore[override]
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            if group["sgd"]:
                for p in group["params"]:
                    if p.grad is not None:
                        p.add_(p.grad, alpha=-group["lr"])
                continue
            params: list[torch.Tensor] = []
            grads: list[torch.Tensor] = []
            sums: list[torch.Tensor] = []
            steps: list[torch.Tensor] = []
            has_sparse, has_complex = self._init_group(group, params, grads, sums, steps)
            # torch's fused CPU kernel is ~5x faster than its per-tensor loop here (a
            # Tree-LSTM step spent ~8% in Adagrad); it takes dense CPU gradients only.
            fused = group["fused"]
            if fused is None and params and not has_sparse and not has_complex:
                fused = all(p.device.type == "cpu" for p in params)
            # Sparse rows come from our own embedding gradients: torch need not re-check them
            # (and says so once per run, at length, unless told).
            with torch.sparse.check_sparse_tensor_invariants(enable=False):
                adagrad(
                    params,
                    grads,
                    sums,
                    steps,
                    lr=group["lr"],
                    weight_decay=group["weight_decay"],
                    lr_decay=group["lr_decay"],
                    eps=group["eps"],
                    has_sparse_grad=has_sparse,
                    foreach=group["foreach"],
                    maximize=group["maximize"],
                    differentiable=group["differentiable"],
                    has_complex=has_complex,
                    fused=fused,
                )
        return loss


def build_optimizer(model: nn.Module, config: TrainConfig) -> torch.optim.Optimizer:
    """The config's optimiser (its names and values checked by ``TrainConfig``)."""
    groups = param_groups(model, config)
    if config.optim == "adagrad":
        return Adagrad(groups, lr=config.lr)
    if config.optim == "adam":
        sparse = [
            name
            for name, m in model.named_modules()
            if isinstance(m, nn.Embedding) and m.sparse and m.weight.requires_grad
        ]
        if sparse:
            raise ValueError(
                f"train.optim = adam cannot step the sparse gradients of {', '.join(sparse)}: "
                "add --model.sparse_embedding=false, or train with adagrad"
            )
        b1, b2 = config.adam_betas
        # torch's fused kernel: on a GPU a few launches a step where its default multi-tensor
        # one takes several per operation (QANet's Adam was 14% of a step's kernel time on an
        # H200, not fused); on a CPU as fast (QANet, reduced config). Real floating point only.
        fused = all(p.is_floating_point() for g in groups for p in g["params"])
        return torch.optim.Adam(
            groups, lr=config.lr, betas=(b1, b2), eps=config.adam_eps, fused=fused or None
        )
    raise ValueError(f"train.optim must be adagrad or adam, got {config.optim!r}")


def build_scheduler(
    optimizer: torch.optim.Optimizer, config: TrainConfig
) -> torch.optim.lr_scheduler.LRScheduler | None:
    """QANet's inverse-exponential warm-up: lr * log(step + 1) / log(warmup) until warmup.

    The paper's "inverse exponential increase from 0.0" read, as its public re-implementations
    read it, as a logarithm: the first optimiser step takes lr 0, step ``warmup`` the full lr.
    A warm-up of 1 step is none (its log(1) = 0 would divide by zero)."""
    if config.warmup_steps <= 1:
        return None
    warmup = config.warmup_steps

    def factor(step: int) -> float:
        return min(1.0, math.log(step + 1) / math.log(warmup)) if step < warmup else 1.0

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
