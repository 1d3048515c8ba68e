"""Exponential moving average of the weights, used for evaluation and saved in checkpoints."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from treeqa.models.common import Output
from treeqa.train import checkpoint as ckpt
from treeqa.train.loop import Callback, TrainState


class EMA(Callback):
    """Shadow weights s <- d s + (1 - d) w after every step, d = min(decay, (1+n)/(10+n)).

    The warm-up term keeps the first shadows close to the current weights, so early
    evaluations are not dominated by the random initialisation. Evaluation runs on the
    shadows (swapped in by ``on_eval_start``, swapped out by ``on_eval_end``); give
    ``checkpoint_tensors`` to the Checkpointer so the best checkpoint holds the shadows as its
    model weights and the last checkpoint keeps them as ``ema.*`` for resuming.
    """

    def __init__(self, decay: float = 0.9999):
        self.decay = decay
        self.shadow: dict[str, torch.Tensor] = {}
        self.backup: dict[str, torch.Tensor] = {}
        self.params: dict[str, nn.Parameter] = {}
        self.loaded: dict[str, torch.Tensor] | None = None
        """Shadows ``load`` read from a checkpoint, which the next ``fit()`` goes on from."""

    def on_fit_start(
        self, state: TrainState, model: nn.Module, optimizer: torch.optim.Optimizer
    ) -> None:
        self.params = {n: p for n, p in model.named_parameters() if p.requires_grad}
        # Only shadows loaded for this run: an earlier fit()'s are another run's (a model
        # trained before this one), not where this one starts.
        loaded, self.loaded = self.loaded, None
        self.shadow = {n: p.detach().clone() for n, p in self.params.items()}
        if loaded:  # resumed: shadows restored by load() before the loop started
            if loaded.keys() != self.shadow.keys():
                raise ValueError(
                    "EMA shadows in the checkpoint do not match the model's parameters"
                )
            for n, s in self.shadow.items():
                s.copy_(loaded[n])

    @torch.no_grad()
    def on_step_end(self, state: TrainState, output: Output, batch: object) -> None:
        n = state.step - 1  # updates made before this one
        decay = min(self.decay, (1 + n) / (10 + n))
        for name, p in self.params.items():
            self.shadow[name].lerp_(p.detach(), 1 - decay)

    @torch.no_grad()
    def swap_in(self) -> None:
        self.backup = {n: p.detach().clone() for n, p in self.params.items()}
        for n, p in self.params.items():
            p.copy_(self.shadow[n])

    @torch.no_grad()
    def swap_out(self) -> None:
        for n, p in self.params.items():
            p.copy_(self.backup[n])
        self.backup = {}

    def on_eval_start(self, state: TrainState, model: nn.Module) -> None:
        self.swap_in()

    def on_eval_end(self, state: TrainState, model: nn.Module) -> None:
        self.swap_out()

    def checkpoint_tensors(self, kind: str) -> dict[str, torch.Tensor]:
        """For ``Checkpointer(extra_tensors=...)``: shadows as model weights in the best
        checkpoint (what evaluation scored), as ``ema.*`` beside the raw weights in the last."""
        prefix = "model." if kind == "best" else "ema."
        return {prefix + n: s for n, s in self.shadow.items()}

    def load(self, tensors: dict[str, torch.Tensor]) -> None:
        """Shadows from a last checkpoint's ``ema.*`` group (``Checkpoint.group("ema.")``)."""
        self.shadow = {n: t.clone() for n, t in tensors.items()}
        self.loaded = self.shadow


def build_ema(decay: float, resumed_from: Path | None = None) -> EMA | None:
    """The EMA callback of a run (None when ``decay`` is 0); a run resumed from
    ``resumed_from`` carries on with the shadows of its last checkpoint."""
    if decay <= 0:
        return None
    ema = EMA(decay)
    if resumed_from is not None:
        ema.load(ckpt.load(resumed_from, prefer=ckpt.LAST).group("ema."))
    return ema
