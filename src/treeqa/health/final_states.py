"""A recurrent layer's final state read after its rows' padding (``rnn-state-after-padding``).

An ``nn.LSTM``/``nn.GRU``/``nn.RNN`` given a padded batch as a plain tensor runs every row to
the batch's longest length: a row padded at its end goes on through its padding, so its final
state (``h_n``, or the output at the last position, ``out[:, -1]``) is the state after up to
T - length padding steps, not after its last word. A label read off it must be carried
through all of them (the probe's LSTM, a label token anywhere in rows of 5 to 60, stayed at
0.28 accuracy over 400 steps where packed rows reached 0.98; a GRU 0.51 against 1.00). The
backward half of a bidirectional layer starts in the padding, and its output at the last
position has read padding only. Rows packed, then padded again by ``pad_packed_sequence`` and
read at the last position, read its zeros.

On sampled steps, a recurrent layer given a batch whose rows end in padding has gradient hooks
put on its output and final states, and so has ``pad_packed_sequence``'s output (wrapped for
the run; its rows' padding starts at their lengths). The padding is read off the ids of the
Embedding the input was made from (``packing.embedded_ids``): its ``padding_idx``; without one,
the id the padded rows end in a run of, found nowhere else in the batch. Else off the vector so
repeated at the rows' ends, found nowhere else either: a small vocabulary's word, a series'
zeros or a sensor's ceiling found before a row's end too are data. In the backward each row's
squared gradient is summed: at the final states (the forward directions' ``h_n`` and ``c_n``,
and the output at the last position) and in all. Rows with 2 padding positions or more, an
eighth of the batch or more, whose final states get a quarter of their gradient or more make
the step count; 3 sampled steps in a row make the finding. A packed batch is not judged, nor
rows padded at their start (read off the last state as they should be), and a row whose
output is read at its own last word, or pooled under a mask, leaves its padding no gradient.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.nn.utils import rnn

from treeqa.health import sites
from treeqa.health.findings import Finding
from treeqa.health.packing import embedded_ids, ids_start, padding_starts
from treeqa.health.wrap import Wrappers, note_function_results

CALLS = 64
"""Recurrent layer calls read a sampled step, at most (a word-level layer called once a
sentence of a document goes before the sentence-level one)."""
PADDED = 2
"""Padding positions at a row's end for it to be judged (after one word or more: a row of
nothing but one repeated input, a decoder run on zeros, has no last word)."""
ROWS = 0.125
"""Share of a batch's rows that must be judged for the call to be."""
SHARE = 0.25
"""Share of the judged rows' gradient at their final states for the call to count."""
STEPS = 3
"""Sampled steps in a row with such a call."""


class Reading:
    """One call of a recurrent layer: its rows' padding and, once its backward ran, each row's
    squared gradient at its final states and in all."""

    def __init__(
        self,
        layer: str,
        where: str,
        starts: torch.Tensor,
        length: int,
        unpacked: bool = False,
        exact: bool = True,
    ):
        self.layer, self.where, self.length = layer, where, length
        self.unpacked = unpacked  # pad_packed_sequence's output: zeros at the padding
        self.exact = exact  # the padding read off a padding_idx or lengths, not a repeated value
        self.starts = starts  # [B] on the host: where each row's padding starts (T: none)
        self.final: torch.Tensor | None = None  # [B] on the device, filled by the hooks
        self.total: torch.Tensor | None = None

    def add(self, final: torch.Tensor, total: torch.Tensor) -> None:
        self.final = final if self.final is None else self.final + final
        self.total = total if self.total is None else self.total + total


class FinalStates:
    """``add``: where the finding goes (``HealthMonitor.add``); ``safely``: what runs the
    gradient hooks, in the script's backward (``HealthMonitor.safely``: a failure of the
    monitor's stops the monitor, not the script)."""

    def __init__(
        self,
        add: Callable[[Finding], None],
        safely: Callable[..., None] = lambda work, *args: work(*args),
        active: Callable[[], bool] = lambda: True,
    ):
        self.add, self.safely, self.active = add, safely, active
        # the gradient hooks put on this step's tensors, taken off at its end: a hook on a
        # tensor of the script's graph that held the monitor (and through it the script's
        # models and their module's globals) made a cycle through autograd's C++ nodes that
        # gc cannot see, and kept a finished script's namespace alive
        self.handles: list[Any] = []
        self.wrappers = Wrappers()
        self.readings: list[Reading] = []  # this sampled step's
        self.steps = 0  # sampled steps in a row whose final states were read after padding
        self.first: tuple[Reading, float, int] | None = None  # the first of them, its share
        self.said = False

    def install(self) -> None:
        self.wrappers.add(note_function_results(rnn, "pad_packed_sequence", self._unpacked))

    def uninstall(self) -> None:
        self.wrappers.undo()
        self._unhook()

    def begin_step(self) -> None:
        self.readings = []
        self._unhook()

    def _unhook(self) -> None:
        while self.handles:
            self.handles.pop().remove()

    def _unpacked(
        self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any], result: Any
    ) -> None:
        """``pad_packed_sequence(sequence, batch_first=False, ...) -> (padded, lengths)``: the
        rows' padding is where their lengths end, zeros."""
        if self.said or not self.active() or len(self.readings) >= CALLS:
            return
        padded, lengths = result
        if not isinstance(padded, torch.Tensor) or padded.dim() != 3 or not padded.requires_grad:
            return
        batch_first = bool(args[1] if len(args) > 1 else kwargs.get("batch_first", False))
        length = padded.shape[1 if batch_first else 0]
        starts = torch.as_tensor(lengths).reshape(-1).to("cpu", torch.long)
        reading = Reading(f"{name}'s output", sites.user_site(), starts, length, unpacked=True)
        self.readings.append(reading)
        self._read_output(reading, padded, batch_first)

    def note(self, name: str, module: nn.Module, inputs: Any, output: Any) -> None:
        """A module's forward on a sampled step: a recurrent layer's is read."""
        if self.said or not isinstance(module, nn.RNNBase) or len(self.readings) >= CALLS:
            return
        x = inputs[0] if isinstance(inputs, tuple) and inputs else None
        if not isinstance(x, torch.Tensor) or x.dim() != 3 or not isinstance(output, tuple):
            return  # a PackedSequence (read as it should be), an unbatched sequence
        out, state = output[0], output[1]
        states = list(state) if isinstance(state, tuple) else [state]  # (h_n, c_n) or h_n
        if not isinstance(out, torch.Tensor) or not out.requires_grad:
            return
        ends = row_ends(x, module.batch_first)
        if ends is None:
            return
        length = x.shape[1 if module.batch_first else 0]
        layer = f"{name} ({type(module).__name__})"
        reading = Reading(layer, sites.user_site(), ends[0], length, exact=ends[1])
        self.readings.append(reading)
        self._read_output(reading, out, module.batch_first)
        directions = 2 if module.bidirectional else 1
        for h in states:
            if isinstance(h, torch.Tensor) and h.requires_grad and h.dim() == 3:

                def on_state(grad: torch.Tensor | None) -> None:
                    if grad is None:
                        return
                    g = grad.detach().float().pow(2)  # [L * D, B, H]
                    reading.add(g[::directions].sum((0, 2)), g.sum((0, 2)))

                self.handles.append(h.register_hook(functools.partial(self.safely, on_state)))

    def _read_output(self, reading: Reading, out: torch.Tensor, batch_first: bool) -> None:
        """A hook on ``out`` ([B, T, F] batch first, else [T, B, F]) adds each row's squared
        gradient at the last position, and in all, to ``reading``."""
        last = reading.length - 1

        def on_output(grad: torch.Tensor | None) -> None:
            if grad is None:  # (no gradient reached it)
                return
            g = (grad if batch_first else grad.transpose(0, 1)).detach().float().pow(2)
            reading.add(g[:, last].sum(-1), g.sum((1, 2)))  # [B] each

        self.handles.append(out.register_hook(functools.partial(self.safely, on_output)))

    def judge(self, step: int) -> None:
        """At the sampled step's end (one host read)."""
        readings = [r for r in self.readings if r.final is not None]
        self.readings = []
        self._unhook()
        if self.said or not readings:
            return
        shares = torch.stack([_share(r) for r in readings]).tolist()
        counted = [(r, s) for r, s in zip(readings, shares, strict=True) if s >= SHARE]
        if not counted:
            self.steps, self.first = 0, None
            return
        self.steps += 1
        if self.first is None:
            self.first = (*max(counted, key=lambda c: c[1]), step)  # the most read
        if self.steps >= STEPS:
            self.said = True
            reading, share, at = self.first
            found = rnn_state_after_padding(reading, share, at, self.steps)
            self.add(found)


def _judged(reading: Reading) -> torch.Tensor:
    """[B] bool on the host: the rows with a word or more and ``PADDED`` padding positions or
    more after it."""
    return (reading.starts >= 1) & (reading.starts <= reading.length - PADDED)


def _share(reading: Reading) -> torch.Tensor:
    """The share of the padded rows' squared gradient at their final states (0 where their
    rows are too few to judge)."""
    assert reading.final is not None and reading.total is not None
    starts = reading.starts
    padded = _judged(reading)
    if int(padded.sum()) < max(2, ROWS * starts.numel()):
        return torch.zeros((), device=reading.final.device)
    rows = padded.to(reading.final.device)
    total = reading.total[rows].sum()
    return torch.where(total > 0, reading.final[rows].sum() / total, 0.0)


def row_ends(x: torch.Tensor, batch_first: bool) -> tuple[torch.Tensor, bool] | None:
    """([B] on the host, where each row of ``x`` ([B, T, F] batch first, else [T, B, F]) starts
    its padding at its end (T for a row that ends in none); whether that was read exactly, off
    a ``padding_idx``), or None where no padding shows.
    Read off the ids of an Embedding's output: its ``padding_idx``'s run at each row's end;
    without one, the id that the rows end in a run of (the row with the longest run gives it)
    where it is found nowhere else in any row. Else off the vector so repeated at the rows'
    ends, found nowhere else either (a small vocabulary's word, a series' zeros or a sensor's
    ceiling that come before its end too are data). Two host reads at most."""
    embedded = embedded_ids(x)
    if embedded is not None and embedded[1] is not None:
        return ids_start(embedded[0], embedded[1], batch_first), True
    given = x if embedded is None else embedded[0][..., None]  # (ids laid out as x)
    starts = padding_starts(given, batch_first, alone=True)
    if starts is None:
        return None
    return torch.where(starts >= 0, starts, given.shape[1 if batch_first else 0]), False


def rnn_state_after_padding(reading: Reading, share: float, step: int, steps: int) -> Finding:
    """``reading``'s rows padded at their end had ``share`` of their gradient at the layer's
    final states at ``step``, and ``steps`` sampled steps in a row did so."""
    starts = reading.starts
    padded = _judged(reading)
    shortest = int(starts[padded].min()) if bool(padded.any()) else reading.length
    rows = (
        f"from step {step}: {int(padded.sum())} of {starts.numel()} rows padded, the shortest "
        f"{shortest} of {reading.length} positions"
    )
    if reading.unpacked:
        said = (
            "the output of pad_packed_sequence is read at its last position: "
            f"{share:.0%} of the gradient that reaches its padded rows is there, on {steps} "
            f"sampled steps in a row ({rows}); for a row shorter than the longest that "
            "position is padding, filled with zeros, so the loss reads nothing of its words"
        )
    else:
        said = (
            f"{reading.layer} is given rows padded at their end as a plain tensor, not packed, "
            f"and {share:.0%} of the gradient that reaches those rows is at its final state "
            f"(h_n, or its output at the last position), on {steps} sampled steps in a row "
            f"({rows}): for a padded row that is the state after its padding, not after its "
            "last word, so what the loss reads must be carried through every padding step"
        )
        if not reading.exact:
            said += (
                " (the padding is read as the run of one value those rows end in, found nowhere "
                "else in the batch: data that ends so, an absorbing state or a sensor latched at "
                "its limit, reads the same)"
            )
    found = Finding(
        "rnn-state-after-padding",
        "warning",
        said,
        evidence={
            "layer": reading.layer,
            "padded_rows": int(padded.sum()),
            "rows": starts.numel(),
            "shortest": shortest,
            "length": reading.length,
            "share_at_final_state": round(share, 4),
            "steps": steps,
        },
    )
    found.where = reading.where or reading.layer
    return found
