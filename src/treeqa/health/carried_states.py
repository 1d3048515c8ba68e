"""A recurrent layer's state carried from one batch into the next while the batches are
independent examples (``rnn-state-carried-over``).

A language model trained by truncated backpropagation through time carries its LSTM's state
from batch to batch (detached: ``repackage_hidden``), which is right there: row i of each batch
goes on where row i of the batch before stopped (a stream cut in rows, read in order). Copied
into a classifier trained on a shuffled DataLoader (the tutorial recipe that makes
``h = net.init_hidden(batch_size)`` once an epoch and ``h = tuple(e.data for e in h)`` each
batch), each batch starts from the final state of unrelated sequences: the model must learn to
wash out a state that is noise, and where the evaluation carries it too (or starts from the
last training batch's), each prediction depends on the batch that went before.

Each recurrent layer (``nn.RNN``/``nn.LSTM``/``nn.GRU`` and their cells) of the models the
clock trains gets a forward hook (with keyword arguments; a dict read and a pointer compared a
call). A layer's output state is kept after each call (a detached alias: its memory stays
taken, so its address tells it apart), with the count of batches drawn from the loaders by
then. A call after a new batch was drawn is judged by the state it is given (``hx``; an LSTM's
``h``): the same memory (``.detach()``, ``.data``) or, on the CPU, the same values (a copy) as
the layer's last output state carry it over. Between two draws a state may be handed on at
will (a decoder fed its own state, the chunks of one sequence, an encoder's state given to a
decoder, which is another layer's). Batches are independent where the training batches come
from a loader that draws at random (``passes.Pass.shuffled``); a loader read in order, or
batches the script makes itself, are not judged. ``STEPS`` training steps in a row, or
``STEPS`` evaluation batches of 2 rows or more drawn at random too (an evaluation read in order
may stream series in chunks; one scored a series at a time has one row), each started from the
carried state make the finding. A state zeroed in place (``h.zero_()``) carries nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn

from treeqa.health import sites
from treeqa.health.findings import Finding
from treeqa.health.hooks import ModelHook

STEPS = 3
"""Training steps (or evaluation batches) in a row, each begun from a carried state."""


class CarriedStates:
    """``add``: where the finding goes; ``safely``: what runs the hooks
    (``HealthMonitor.safely``); ``shuffled(latest)``: whether the latest training batches
    (``latest``: and the latest batch, an evaluation's) were drawn at random; ``draws``: the
    batches drawn from the loaders so far."""

    def __init__(
        self,
        add: Callable[[Finding], None],
        safely: Callable[..., None],
        shuffled: Callable[[bool], bool],
        draws: Callable[[], int],
    ):
        self.add, self.safely, self.shuffled, self.draws = add, safely, shuffled, draws
        self.handles: list[Any] = []
        # layer id -> its last output state, and the draws counted when it was made
        self.last: dict[int, tuple[torch.Tensor, int]] = {}
        self.carried = False  # a training call of this step began from a carried state
        self.steps = 0  # training steps in a row that did
        self.evaluated = 0  # evaluation batches in a row that did
        self.layer = self.where = ""  # the layer, and where it was called
        self.said = False

    def watch(self, models: Sequence[nn.Module]) -> None:
        """Hook the recurrent layers of the models the clock trains (anew for a new clock)."""
        self.unwatch()
        for model in models:
            for name, module in model.named_modules():
                if isinstance(module, nn.RNNBase | nn.RNNCellBase):
                    # (left out of copies and pickles of the model: ``hooks.py``)
                    hook = ModelHook(self.safely, self._called, name)
                    self.handles.append(module.register_forward_hook(hook, with_kwargs=True))

    def unwatch(self) -> None:
        while self.handles:
            self.handles.pop().remove()
        self.last = {}

    def _called(
        self,
        name: str,
        module: nn.Module,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        output: Any,
    ) -> None:
        if self.said:
            return
        key, draws = id(module), self.draws()
        last = self.last.get(key)
        if last is not None and last[1] != draws:  # the first call on a new batch
            given = _hidden(args[1] if len(args) > 1 else kwargs.get("hx"))
            carried = given is not None and _same(given, last[0])
            if torch.is_grad_enabled() and module.training:
                self.carried = self.carried or carried
                self.evaluated = 0
            elif given is not None and carried and _rows(given, module) >= 2:
                self.evaluated += 1
            else:
                self.evaluated = 0
            if carried and (not self.layer or max(self.steps, self.evaluated) + 1 >= STEPS):
                self.layer = f"{name or 'the model'} ({type(module).__name__})"
                self.where = sites.user_site()
            if self.evaluated >= STEPS and self.shuffled(True):
                self._report(evaluated=True)
                return
        state = _hidden(output[1] if isinstance(module, nn.RNNBase) else output)
        if state is not None:
            self.last[key] = (state.detach(), draws)

    def end_step(self) -> None:
        """The clock stepped (the doctor calls it while layers are hooked)."""
        self.steps = self.steps + 1 if self.carried and self.shuffled(False) else 0
        self.carried = False
        if self.steps >= STEPS:
            self._report(evaluated=False)

    def _report(self, evaluated: bool) -> None:
        self.said = True
        found = rnn_state_carried_over(self.layer, STEPS, evaluated)
        found.where = self.where
        self.add(found)
        self.unwatch()


def _hidden(state: Any) -> torch.Tensor | None:
    """The hidden state of a layer's state: ``h`` itself, or an LSTM's ``(h, c)``'s ``h``."""
    if isinstance(state, tuple | list) and state:
        state = state[0]
    return state if isinstance(state, torch.Tensor) else None


def _rows(state: torch.Tensor, module: nn.Module) -> int:
    """The batch's rows of a layer's state: [layers * directions, B, H] for a layer, [B, H] for
    a cell (one row where it is unbatched)."""
    batched = state.dim() == (3 if isinstance(module, nn.RNNBase) else 2)
    return state.shape[-2] if batched else 1


def _same(given: torch.Tensor, held: torch.Tensor) -> bool:
    """``given`` is ``held``'s memory, or (on the CPU, where comparing costs no sync) a copy of
    its values."""
    if given.shape != held.shape or given.device != held.device:
        return False
    if given.data_ptr() == held.data_ptr():  # (unless zeroed in place since: h.zero_())
        return bool(given.any())
    return given.device.type == "cpu" and bool(torch.equal(given.detach(), held))


def rnn_state_carried_over(layer: str, batches: int, evaluated: bool) -> Finding:
    what = "evaluation batches" if evaluated else "training batches"
    return Finding(
        "rnn-state-carried-over",
        "warning",
        f"{layer} began each of {batches} {what} in a row from the final state it ended the "
        "batch before in, while the training batches are drawn at random: each sequence "
        "starts from the state of other, unrelated sequences, "
        + (
            "so each prediction depends on the batch scored before it"
            if evaluated
            else "which the model must learn to wash out, and a prediction depends on the "
            "batch that went before"
        ),
        evidence={
            "layer": layer,
            "batches": batches,
            "in": "evaluation" if evaluated else "training",
        },
    )
