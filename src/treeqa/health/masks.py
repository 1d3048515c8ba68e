"""An attention mask that leaves open only the padding (``attention-mask-inverted``).

``nn.MultiheadAttention`` (and the ``nn.Transformer`` layers) read ``key_padding_mask`` as True
where a key is padding, to be ignored; ``F.scaled_dot_product_attention`` reads a boolean
``attn_mask`` as True where a key takes part; a Hugging Face ``attention_mask`` is 1 for tokens.
A mask built for one and given to the other (``ids != pad`` as a key padding mask) makes every
token attend to the padding alone. Nothing fails (a row whose every key is masked gets zeros):
each position keeps its own vector through the residual, and the model learns what it can
without attention (the probe, the order of two marker tokens: 0.89 accuracy where the right mask
gives 1.0).

While a trained model's forward runs on a sampled step, ``F.multi_head_attention_forward`` and
``F.scaled_dot_product_attention`` are wrapped. A call's mask is read for the keys every query
ignores, [B, S]; the tensors the model was given ([B, S] ids, [B, S, F] vectors, or time first)
are read for their padding: the value a row ends in (or starts with, padded on the left),
repeated to its end and shared by the padded rows. The mask is inverted where, in every row with
two padding positions or more and two others, it ignores exactly the others (one position of
slack: an end token that shares the padding's id), in rows padded to two lengths or more (a
fixed run of memory tokens a mask opens alone is no padding), and no tensor the model was given
reads it as the padding. One call is judged per forward, the first whose mask can be read.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.nn import functional as F

from treeqa.health import checks, sites
from treeqa.health.findings import Finding
from treeqa.health.wrap import Wrappers, note_function_calls

IGNORED = -1e4
"""An additive mask's value at or below which a key counts as masked out (-inf from a boolean
mask, ``finfo.min``, the -10000 of older code); above it, a bias (ALiBi's) is no mask."""
SLACK = 1
"""Positions of a row where the mask may differ from the padding, or from its complement."""
STEPS = 2
"""Sampled steps with an inverted mask, and more than those with a mask that matched."""
CANDIDATES = 8
"""The most tensors of a forward's inputs read for padding."""

FUNCTIONS = ("multi_head_attention_forward", "scaled_dot_product_attention")


class AttentionMasks:
    """``add``: where the finding goes. ``begin``/``end`` bracket a trained model's forward on
    a sampled step."""

    def __init__(self, add: Callable[[Finding], None]):
        self.add = add
        self.inputs: list[torch.Tensor] = []  # this forward's [B, S] and [B, S, F] tensors
        self.judged = False  # a call of this forward was judged
        self.inverted = self.matched = 0  # sampled forwards, by what their mask read as
        self.example: dict[str, Any] | None = None
        self.where = ""
        self.said = False
        self.wrappers = Wrappers()

    def begin(self, args: tuple[Any, ...], kwargs: dict[str, Any] | None) -> None:
        """A trained model's forward on a sampled step, given ``args`` and ``kwargs``."""
        self.end()  # (a forward that raised left its wrappers)
        if self.said:
            return
        self.inputs = list(_tensors((*args, *(kwargs or {}).values())))[:CANDIDATES]
        if not self.inputs:
            return
        self.judged = False
        for name in FUNCTIONS:
            self.wrappers.add(note_function_calls(F, name, self._called))

    def end(self) -> None:
        self.wrappers.undo()
        self.inputs = []

    def finish(self) -> None:
        """The run ended: one inverted forward is enough where no other was read (a short
        run)."""
        if not self.said and self.inverted and not self.matched:
            self._report()

    def _called(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        if self.judged or self.said:
            return
        ignored = _ignored(name, args, kwargs)
        if ignored is None:
            return
        readings = [r for x in self.inputs for r in _readings(x, ignored)]
        if not readings:
            return
        self.judged = True
        if any(r["matched"] for r in readings):
            self.matched += 1
            return
        inverted = [r for r in readings if r["inverted"]]
        if not inverted:
            self.matched += 1  # read, and not inverted: another mask (causal, say)
            return
        self.inverted += 1
        if self.example is None:
            self.example = {**inverted[0], "function": name}
            self.where = sites.user_site()
        if self.inverted >= STEPS and self.inverted > self.matched:
            self._report()

    def _report(self) -> None:
        assert self.example is not None
        self.said = True
        found = attention_mask_inverted(self.inverted, self.inverted + self.matched, self.example)
        found.where = self.where
        self.add(found)


def _tensors(values: Any, depth: int = 0) -> Iterator[torch.Tensor]:
    """The [B, S] integer and [B, S, F] floating tensors among a forward's arguments (in
    lists, tuples and dicts, two levels down: a batch dict given whole)."""
    for value in values:
        if isinstance(value, torch.Tensor):
            if not checks.dense(value) or checks.untraceable(value):
                continue
            if value.dim() == 2 and not value.is_floating_point() and value.dtype != torch.bool:
                yield value
            elif value.dim() == 3 and value.is_floating_point():
                yield value
        elif depth < 2 and isinstance(value, list | tuple):
            yield from _tensors(value, depth + 1)
        elif depth < 2 and isinstance(value, dict):
            yield from _tensors(value.values(), depth + 1)


def _ignored(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> torch.Tensor | None:
    """[B, S] bool: the keys every query of the call ignores, where its mask has a batch dim;
    else None."""
    if name == "multi_head_attention_forward":  # (query [L, B, E], key, value, ...)
        mask = kwargs.get("key_padding_mask")
        if not isinstance(mask, torch.Tensor) or mask.dim() != 2:
            return None
        return _masked_out(mask)
    query = args[0] if args else kwargs.get("query")
    mask = args[3] if len(args) > 3 else kwargs.get("attn_mask")
    if not isinstance(query, torch.Tensor) or not isinstance(mask, torch.Tensor):
        return None
    if mask.dim() < 3 or mask.dim() != query.dim() or mask.shape[0] != query.shape[0]:
        return None  # no batch dim ([L, S]: causal, say)
    if mask.shape[0] < 2 or checks.untraceable(mask) or not checks.dense(mask):
        return None
    out = ~mask if mask.dtype == torch.bool else _masked_out(mask)
    return out.flatten(1, -2).all(1)  # [B, S]: ignored by every head and query


def _masked_out(mask: torch.Tensor) -> torch.Tensor:
    """True where a boolean key padding mask, or an additive mask, masks a key out."""
    return mask if mask.dtype == torch.bool else mask <= IGNORED


def _readings(x: torch.Tensor, ignored: torch.Tensor) -> list[dict[str, Any]]:
    """How ``ignored`` [B, S] reads against the padding of ``x`` ([B, S, *] or [S, B, *]),
    right-padded and left-padded: one dict per reading that judged rows."""
    b, s = ignored.shape
    rows = []
    if tuple(x.shape[:2]) == (b, s):
        rows.append(x)
    if tuple(x.shape[:2]) == (s, b) and b != s:
        rows.append(x.transpose(0, 1))
    found = []
    for r in rows:
        r = r.detach().reshape(b, s, -1)
        for side in ("right", "left"):
            padding = _padding(r if side == "right" else r.flip(1))
            if padding is None:
                continue
            reading = _reading(padding if side == "right" else padding.flip(1), ignored)
            if reading is not None:
                found.append({**reading, "side": side})
    return found


def _padding(rows: torch.Tensor) -> torch.Tensor | None:
    """[B, S] bool: each row's trailing run of the vector the padded rows of ``rows`` [B, S, F]
    end in; None where no two rows end in it."""
    last = rows[:, -1]  # [B, F]
    same = (rows == last[:, None]).all(-1)  # [B, S]
    run = same.flip(1).int().cumprod(1).sum(1)  # [B]: its length at each row's end
    pad = last[run.argmax()]  # [F]
    padded = (last == pad).all(-1)  # [B]
    run = torch.where(padded, run, 0)
    positions = torch.arange(rows.shape[1], device=rows.device)
    return positions >= (rows.shape[1] - run)[:, None]


def _reading(padding: torch.Tensor, ignored: torch.Tensor) -> dict[str, Any] | None:
    """Rows judged (two padding positions or more and two others), those whose ignored keys are
    the padding (matched) or its complement (inverted), and the padding's lengths; one host
    read. None where fewer than two rows are judged."""
    ignored = ignored.to(padding.device)
    pads = padding.sum(1)  # [B]
    judged = (pads >= 2) & (padding.shape[1] - pads >= 2)
    matched = judged & ((ignored != padding).sum(1) <= SLACK)
    inverted = judged & ((ignored != ~padding).sum(1) <= SLACK)
    row = inverted.int().argmax()
    shortest = torch.where(inverted, pads, padding.shape[1]).min()
    longest = torch.where(inverted, pads, 0).max()
    stats = [judged.sum(), matched.sum(), inverted.sum(), row, pads[row], shortest, longest]
    n_judged, n_matched, n_inverted, row, pad, low, high = torch.stack(stats).tolist()
    if n_judged < 2:
        return None
    return {
        "matched": n_matched * 2 >= n_judged,
        "inverted": n_inverted == n_judged and low < high,
        "rows": n_judged,
        "row": row,
        "row_padding": pad,
        "row_tokens": padding.shape[1] - pad,
    }


def attention_mask_inverted(forwards: int, judged: int, example: dict[str, Any]) -> Finding:
    """``forwards`` of ``judged`` sampled forwards gave attention a mask that masks out each
    row's tokens and leaves its padding open (``example``: the first such call's reading)."""
    call = {
        "multi_head_attention_forward": "nn.MultiheadAttention's key_padding_mask",
        "scaled_dot_product_attention": "scaled_dot_product_attention's attn_mask",
    }[example["function"]]
    return Finding(
        "attention-mask-inverted",
        "error",
        f"{call} masks out the tokens and leaves only the padding to attend to, on {forwards} "
        f"of {judged} sampled forwards: in the first, all {example['rows']} padded rows "
        f"(row {example['row']}: its {example['row_tokens']} tokens masked, its "
        f"{example['row_padding']} padding positions attended; padded on the "
        f"{example['side']}); a mask built for the other convention? (key_padding_mask is True "
        "for padding, scaled_dot_product_attention's boolean attn_mask True for tokens)",
        evidence={
            "forwards": forwards,
            "judged_forwards": judged,
            "function": example["function"],
            "padded_rows": example["rows"],
            "row": example["row"],
            "row_tokens": example["row_tokens"],
            "row_padding": example["row_padding"],
            "padded_on": example["side"],
        },
    )
