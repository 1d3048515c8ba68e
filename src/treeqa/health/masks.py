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
reads it as the padding. Up to 4 masks a forward are read; one inverted makes the forward so.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from treeqa.health import checks, sites
from treeqa.health.attended import ADDED, HERE, IDS, PaddingReads
from treeqa.health.causal import IGNORED, CausalReads
from treeqa.health.findings import Finding
from treeqa.health.packing import padding_runs
from treeqa.health.wrap import Wrappers, note_function_calls, note_function_results
from treeqa.health.zero_one_masks import ZeroOneMasks

SLACK = 1
"""Positions of a row where the mask may differ from the padding, or from its complement."""
STEPS = 2
"""Sampled steps with an inverted mask, and more than those with a mask that matched."""
CALLS = 4
"""Masks read per forward, told apart by their values (a stack's layers share one; a seq2seq
model's decoder masks its own keys after the encoder's)."""
CANDIDATES = 8
"""The most tensors of a forward's inputs read for padding."""

FUNCTIONS = ("multi_head_attention_forward", "scaled_dot_product_attention")
FILLS = ("masked_fill", "masked_fill_")
"""Tensor methods attention written by hand masks its scores with (``scores.masked_fill(mask,
float("-inf"))`` before a softmax)."""


class AttentionMasks:
    """``add``: where the finding goes. ``begin``/``end`` bracket a trained model's forward on
    a sampled step."""

    def __init__(self, add: Callable[[Finding], None], active: Callable[[], bool]):
        self.add = add
        self.causal = CausalReads(add, active)  # read through the same wrappers
        self.padding = PaddingReads(add)  # and attention given no mask over padded rows
        self.zero_one = ZeroOneMasks(add)  # and floating masks of 0s and 1s
        self.inputs: list[torch.Tensor] = []  # this forward's [B, S] and [B, S, F] tensors
        self.masks: list[torch.Tensor] = []  # the forward's masks read, [B, S] ignored keys
        self.given: list[Any] = []  # the masks its calls were given (held until it ends)
        self.sifted = False  # its inputs left to those that may be ids or vectors
        self.read = 0  # those read against its inputs' padding
        self.found: tuple[dict[str, Any], str] | None = None  # the first inverted, its line
        self.inverted = self.matched = 0  # sampled forwards, by what their mask read as
        self.example: dict[str, Any] | None = None
        self.where = ""
        self.said = False
        self.wrappers = Wrappers()

    def begin(self, model: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any] | None) -> None:
        """A trained ``model``'s forward on a sampled step, given ``args`` and ``kwargs``."""
        self.end()  # (a forward that raised left its wrappers)
        given = list(_given((*args, *(kwargs or {}).values())))
        inputs = list(_tensors(given))[:CANDIDATES]
        self.causal.forward(model, [x for x in inputs if x.dim() == 2], list(_beside(given)))
        self.padding.forward(model, [x for x in inputs if x.dim() == 2])
        self.inputs = [] if self.said else inputs
        if not self.inputs and not self.causal.ids and not self.padding.ids:
            return
        for name in FUNCTIONS:
            self.wrappers.add(note_function_calls(F, name, self._called))
        for name in FILLS:
            self.wrappers.add(note_function_calls(torch.Tensor, name, self._called))
        self.wrappers.add(note_function_calls(torch.Tensor, "softmax", self._called))  # (F's too)
        self.wrappers.add(note_function_calls(torch, "softmax", self._called))
        if self.causal.ids:  # (an Embedding's lookup: the ids it embeds, for ``causal``)
            self.wrappers.add(note_function_results(F, "embedding", self._looked_up))

    def end(self) -> None:
        self.wrappers.undo()
        self.padding.end()
        self.zero_one.end()
        self.inputs, self.masks, self.given, self.sifted = [], [], [], False
        if self.read:
            self._tally()

    def finish(self) -> None:
        """The run ended: one inverted forward is enough where no other was read (a short
        run)."""
        if self.read:
            self._tally()
        self.zero_one.finish()
        if not self.said and self.inverted and not self.matched:
            self._report()

    def _looked_up(
        self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any], result: Any
    ) -> None:
        self.causal.looked(args, kwargs, result)

    def _called(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        self.causal.called(name, args, kwargs)
        self.padding.called(name, args, kwargs)
        if name == FUNCTIONS[0] or (name == FUNCTIONS[1] and not _torchs_own()):
            self.zero_one.called(name, args, kwargs)
        if len(self.masks) >= CALLS or name not in (*FUNCTIONS, *FILLS) or not self.inputs:
            return
        if name != FUNCTIONS[0] and _torchs_own():
            return
        given = _given_mask(name, args, kwargs)
        if given is None or any(m is given for m in self.given):
            return  # (the layers of a stack share their mask: no host read)
        self.given.append(given)
        ignored = _ignored(name, args, kwargs)
        if ignored is None or any(
            m.shape == ignored.shape and m.equal(ignored) for m in self.masks
        ):
            return
        self.masks.append(ignored)
        if not self.sifted:  # once a forward, at its first mask read
            self.inputs, self.sifted = [x for x in self.inputs if _ids_or_vectors(x)], True
        readings = [r for x in self.inputs for r in _readings(x, ignored)]
        if not readings:
            return
        self.read += 1
        inverted = [r for r in readings if r["inverted"]]
        if inverted and not any(r["matched"] for r in readings) and self.found is None:
            self.found = ({**inverted[0], "function": name}, sites.user_site())

    def _tally(self) -> None:
        """The forward's calls read: inverted where one of them was."""
        found, self.read, self.found = self.found, 0, None
        if found is None:
            self.matched += 1
            return
        self.inverted += 1
        if self.example is None:
            self.example, self.where = found
        if self.inverted >= STEPS and self.inverted > self.matched:
            self._report()

    def _report(self) -> None:
        assert self.example is not None
        self.said = True
        found = attention_mask_inverted(self.inverted, self.inverted + self.matched, self.example)
        found.where = self.where
        self.add(found)


def _torchs_own() -> bool:
    """Whether the call being noted was made by torch itself: ``nn.MultiheadAttention``
    making a float mask of a boolean one with ``masked_fill``, or calling
    ``scaled_dot_product_attention`` (its mask read at its own call)."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(HERE):
        frame = frame.f_back
    return frame is not None and frame.f_code.co_filename.startswith(sites.TORCH_DIR)


def _given(values: Any, depth: int = 0) -> Iterator[torch.Tensor]:
    """The dense tensors among a forward's arguments (in lists, tuples and dicts, two levels
    down: a batch dict given whole)."""
    for value in values:
        if isinstance(value, torch.Tensor):
            if checks.dense(value) and not checks.untraceable(value):
                yield value
        elif depth < 2 and isinstance(value, list | tuple):
            yield from _given(value, depth + 1)
        elif depth < 2 and isinstance(value, dict):
            yield from _given(value.values(), depth + 1)


def _tensors(given: list[torch.Tensor]) -> Iterator[torch.Tensor]:
    """The [B, S] integer and [B, S, F] floating tensors among a forward's (``_given``)."""
    for value in given:
        if value.dim() == 2 and not value.is_floating_point() and value.dtype != torch.bool:
            yield value
        elif value.dim() == 3 and value.is_floating_point():
            yield value


def _beside(given: list[torch.Tensor]) -> Iterator[torch.Tensor]:
    """The boolean or floating [B, S] tensors and the [B, 1, 1, S] ones among a forward's
    (``_given``), which may be the mask of [B, S] ids beside them."""
    for value in given:
        flat = value.dim() == 2 and (value.is_floating_point() or value.dtype == torch.bool)
        if flat or (value.dim() == 4 and value.shape[1:3] == (1, 1)):
            yield value


def _given_mask(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """The mask a call was given, as it was given (None: none)."""
    if name == "multi_head_attention_forward":
        return kwargs.get("key_padding_mask")
    if name in FILLS:
        return args[1] if len(args) > 1 else kwargs.get("mask")
    return args[3] if len(args) > 3 else kwargs.get("attn_mask")


def _ignored(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> torch.Tensor | None:
    """[B, S] bool: the keys every query of the call ignores, where its mask has a batch dim;
    else None."""
    if name == "multi_head_attention_forward":  # (query [L, B, E], key, value, ...)
        mask = kwargs.get("key_padding_mask")
        if not isinstance(mask, torch.Tensor) or mask.dim() != 2 or checks.untraceable(mask):
            return None
        return _masked_out(mask) if checks.dense(mask) else None
    if name in FILLS:  # (scores [B, ..., S], mask, value)
        return _filled(args, kwargs)
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


def _filled(args: tuple[Any, ...], kwargs: dict[str, Any]) -> torch.Tensor | None:
    """[B, S] bool: the keys every query ignores, where ``scores.masked_fill(mask, value)``
    masks floating scores [B, ..., L, S] out by a value at or below ``IGNORED`` with a mask
    that has a batch dim; else None."""
    scores = args[0] if args else None
    mask = args[1] if len(args) > 1 else kwargs.get("mask")
    value = args[2] if len(args) > 2 else kwargs.get("value")
    if isinstance(value, torch.Tensor) and value.numel() == 1 and not checks.untraceable(value):
        value = value.item() if value.device.type == "cpu" else None
    if not isinstance(value, float | int) or value > IGNORED:
        return None
    if not isinstance(scores, torch.Tensor) or not isinstance(mask, torch.Tensor):
        return None
    if mask.dtype != torch.bool or scores.dim() < 3 or mask.dim() != scores.dim():
        return None  # (a [B, S] fill: a pointer's or a policy's logits, labels set to -100)
    if not scores.is_floating_point():
        return None
    if mask.shape[0] != scores.shape[0] or mask.shape[-1] != scores.shape[-1] or mask.shape[0] < 2:
        return None  # no batch dim (a causal mask), or not over the keys
    if checks.untraceable(mask) or not checks.dense(mask):
        return None
    return mask.flatten(1, -2).all(1)


def _masked_out(mask: torch.Tensor) -> torch.Tensor:
    """True where a boolean key padding mask, or an additive mask, masks a key out."""
    return mask if mask.dtype == torch.bool else mask <= IGNORED


def _readings(x: torch.Tensor, ignored: torch.Tensor) -> list[dict[str, Any]]:
    """How ``ignored`` [N, K] reads against the padding of ``x`` ([B, S, *] or [S, B, *]),
    right-padded and left-padded: one dict per reading that judged rows. N may be B times the
    heads (folded into the batch), K up to ``ADDED`` more than S (tokens the model prepended or
    appended, a CLS vector)."""
    pairs = [
        (rows, keys)
        for rows in ([x, x.transpose(0, 1)] if x.shape[0] != x.shape[1] else [x])
        for keys in _aligned(ignored, *rows.shape[:2])
    ]
    found = []
    for rows, keys in pairs:
        r = rows.detach().reshape(*rows.shape[:2], -1)  # [B, S, F]
        for side in ("right", "left"):
            padding, elsewhere = _padding(r if side == "right" else r.flip(1))
            if side == "left":
                padding, elsewhere = padding.flip(1), elsewhere.flip(1)
            reading = _reading(padding, elsewhere, keys)
            if reading is not None:
                found.append({**reading, "side": side})
    return found


def _ids_or_vectors(x: torch.Tensor) -> bool:
    """Vectors, or integers of ``IDS`` values or more: fewer are no ids (a mask, segment or
    speaker ids, whose runs read as padding too). One host read for integers."""
    return x.is_floating_point() or x.unique().numel() >= IDS


def _aligned(ignored: torch.Tensor, b: int, s: int) -> list[torch.Tensor]:
    """``ignored`` [N, K] as [B, S] keys, each way it may line up with rows [B, S]."""
    n, k = ignored.shape
    if n != b:
        if n % b or n < b:
            return []
        ignored = ignored.reshape(b, n // b, k).all(1)  # [B, K]: heads folded into the batch
    if k == s:
        return [ignored]
    if 0 < k - s <= ADDED:
        return [ignored[:, k - s :], ignored[:, :s]]  # prepended, appended
    return []


def _padding(rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """[B, S] bool each: each row's trailing run of the vector the padded rows of ``rows``
    [B, S, F] end in (the row with the longest run gives it), and that vector elsewhere."""
    run, pad = padding_runs(rows)  # [B], [F]
    positions = torch.arange(rows.shape[1], device=rows.device)
    padding = positions >= (rows.shape[1] - run)[:, None]
    return padding, (rows == pad).all(-1) & ~padding


def _reading(
    padding: torch.Tensor, elsewhere: torch.Tensor, ignored: torch.Tensor
) -> dict[str, Any] | None:
    """Rows judged (two padding positions or more and two others), those whose ignored keys are
    the padding (matched) or its complement (inverted), and the padding's lengths; one host
    read. None where fewer than two rows are judged. Inverted needs padding found nowhere else
    in the rows judged (once a row, on average: an end token that shares its id): a speaker's
    or segment's id, whose last run a mask may open alone, is found in earlier turns too."""
    ignored = ignored.to(padding.device)
    pads = padding.sum(1)  # [B]
    judged = (pads >= 2) & (padding.shape[1] - pads >= 2)
    matched = judged & ((ignored != padding).sum(1) <= SLACK)
    inverted = judged & ((ignored != ~padding).sum(1) <= SLACK)
    row = inverted.int().argmax()
    shortest = torch.where(inverted, pads, padding.shape[1]).min()
    longest = torch.where(inverted, pads, 0).max()
    inside = (elsewhere & judged[:, None]).sum()
    stats = [judged.sum(), matched.sum(), inverted.sum(), row, pads[row], shortest, longest, inside]
    n_judged, n_matched, n_inverted, row, pad, low, high, inside = torch.stack(stats).tolist()
    if n_judged < 2:
        return None
    return {
        "matched": n_matched * 2 >= n_judged,
        "inverted": n_inverted == n_judged and low < high and inside <= n_judged,
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
        "masked_fill": "masked_fill's mask over the attention scores",
        "masked_fill_": "masked_fill_'s mask over the attention scores",
    }[example["function"]]
    hint = (
        "masked_fill fills where its mask is True: it should be True for the padding"
        if example["function"] in FILLS
        else "a mask built for the other convention? (key_padding_mask is True for padding, "
        "scaled_dot_product_attention's boolean attn_mask True for tokens)"
    )
    return Finding(
        "attention-mask-inverted",
        "error",
        f"{call} masks out the tokens and leaves only the padding to attend to, on {forwards} "
        f"of {judged} sampled forwards: in the first, all {example['rows']} padded rows "
        f"(row {example['row']}: its {example['row_tokens']} tokens masked, its "
        f"{example['row_padding']} padding positions attended; padded on the "
        f"{example['side']}); {hint}",
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
