"""``padding-not-masked``: attention over padded batches given no padding mask at all.

Sequences of several lengths padded to one (a pad id at the end of the shorter rows, or at
their start) and given to ``nn.TransformerEncoder`` without ``src_key_padding_mask``, to
``nn.MultiheadAttention`` without ``key_padding_mask``, to ``scaled_dot_product_attention``
without ``attn_mask``, or to a softmax over scores by hand that nothing masks: every token also
attends to the padding, so what it gathers depends on how much padding its batch holds. Nothing
fails; the model trains on its batches' padding, and an evaluation padded otherwise (one
example at a time, a batch padded to a longer row) scores otherwise.

Fed by ``masks.AttentionMasks``, whose wrappers are on during a trained model's forward on a
sampled step. Each attention call of the forward (up to ``CALLS``) is read for whether it was
given a mask over each row's keys: ``key_padding_mask``, an ``attn_mask`` with a batch dim, or,
by hand, scores at or below ``IGNORED`` given to a softmax over keys as many as its queries
(one host read a call); a ``[L, S]`` mask or ``is_causal`` masks no row's padding. Where no call
of the forward was, the forward's id tensors ([B, S] integers of ``IDS`` values or more, or
time first) are read for their padding (as ``masks`` reads it): rows padded to two lengths or
more, a padding position or more and two tokens each, and the pad id found nowhere else in
them, or, where an Embedding of the model declares a ``padding_idx`` that rows end in, two rows
or more padded with it by one position or more (length-bucketed batches pad a little). Padding
on the right under a causal mask is never attended by a token (only later positions are, and
they are padding), and is not this. 3 sampled forwards so, with none between whose attention
was masked (a batch without padding says nothing), make the finding, at the first unmasked
call's line.
"""

from __future__ import annotations

import sys
from pathlib import Path
from types import FrameType
from typing import Any

import torch
from torch import nn

from treeqa.health import checks, sites
from treeqa.health.causal import IGNORED
from treeqa.health.findings import Finding
from treeqa.health.packing import padding_runs, trailing

CALLS = 4
"""Attention calls read per forward."""
STEPS = 3
"""Sampled forwards whose padding every attention left open, none masked between."""
IDS = 8
"""The fewest values an integer tensor holds to be read as ids (here and in ``masks``): a mask
given beside them (1 for tokens), segment, speaker or turn ids hold a few, and the last
segment, a run at each row's end of varying length that a pooling may open alone, reads as
padding."""
ADDED = 4
"""Keys a model may add to its inputs' positions (a CLS vector, memory tokens)."""
HERE = str(Path(__file__).parent)


class PaddingReads:
    """``add``: where the finding goes. ``forward(ids)`` at a sampled forward's start, with its
    integer [B, S] tensors; ``called`` for each call the masks' wrappers see; ``end()`` after
    it (a short run's one or two such forwards are not judged)."""

    def __init__(self, add: Any):
        self.add = add
        self.ids: list[torch.Tensor] = []
        # (keys, rows, a causal mask) of each unmasked call: rows, its batch (times its heads)
        self.calls: list[tuple[int, int, bool]] = []
        self.masked = False  # a call of this forward masked each row's keys
        self.where = ""  # the first unmasked call's line
        self.example: dict[str, Any] | None = None
        self.forwards = 0  # sampled forwards left open, none masked since the first
        self.said = False
        self.declared: dict[int, set[int]] = {}  # each model's Embeddings' padding_idx
        self.pads: set[int] = set()  # the forward's model's

    def forward(self, model: nn.Module, ids: list[torch.Tensor]) -> None:
        self.ids = [] if self.said else ids
        self.calls, self.masked = [], False
        if self.ids and id(model) not in self.declared:  # (once a model)
            self.declared[id(model)] = {
                int(m.padding_idx)
                for m in model.modules()
                if isinstance(m, nn.Embedding) and m.padding_idx is not None
            }
        self.pads = self.declared.get(id(model), set())

    def called(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        if not self.ids or self.masked or len(self.calls) >= CALLS:
            return
        if name == "multi_head_attention_forward":  # (query [L, B, E], key [S, B, E], ...)
            key = args[1] if len(args) > 1 else kwargs.get("key")
            mask, attn = kwargs.get("key_padding_mask"), kwargs.get("attn_mask")
            if not isinstance(key, torch.Tensor) or not checks.dense(key) or key.dim() != 3:
                return
            keys, rows, batched = key.shape[0], key.shape[1], _batched(attn, 3)
            causal = bool(kwargs.get("is_causal")) or (attn is not None and not batched)
            given = mask is not None or batched
        elif name == "scaled_dot_product_attention" and not _in_torch_attention():
            key = args[1] if len(args) > 1 else kwargs.get("key")
            attn = args[3] if len(args) > 3 else kwargs.get("attn_mask")
            if not isinstance(key, torch.Tensor) or not checks.dense(key) or key.dim() < 3:
                return
            keys, rows, batched = key.shape[-2], key.shape[0], _batched(attn, key.dim())
            causal = bool(args[5] if len(args) > 5 else kwargs.get("is_causal")) or (
                attn is not None and not batched
            )
            given = batched
        elif name == "softmax" and not _in_torch_attention():  # scores by hand
            scores = args[0] if args else kwargs.get("input")
            dim = args[1] if len(args) > 1 else kwargs.get("dim")
            if not isinstance(scores, torch.Tensor) or not checks.dense(scores):
                return
            if not scores.is_floating_point():
                return
            if scores.dim() < 3 or dim not in (-1, scores.dim() - 1):
                return
            keys, rows = scores.shape[-1], scores.shape[0]
            if keys != scores.shape[-2]:
                return  # (self-attention scores are square)
            low = scores.detach() <= IGNORED  # one host read: is any key masked?
            given = causal = bool(low.any())
            if given and bool(low[..., 0, 1:].all()):  # the first query sees itself alone
                given = False  # a causal mask, over no row's padding
        else:
            return
        if given:
            self.masked = True
            return
        if not self.calls:
            self.where = sites.user_site()
        self.calls.append((keys, rows, causal))

    def end(self) -> None:
        """The forward ended: judged where every attention call left its keys open."""
        calls, self.calls = self.calls, []
        if self.said or not self.ids:
            return
        if self.masked:
            self.forwards = 0
        if self.masked or not calls:
            return
        keys, rows, _ = calls[0]
        causal = all(c for _, _, c in calls)
        reading = None
        for ids in self.ids:
            reading = reading or _padded(ids, keys, rows, causal, self.pads)
        self.ids = []
        if reading is None:
            return  # (a batch without padding, length-bucketed, says nothing)
        self.forwards += 1
        self.example = self.example or reading
        if self.forwards >= STEPS:
            self._report()

    def _report(self) -> None:
        assert self.example is not None
        self.said = True
        e = self.example
        lengths = f" to {e['lengths']} lengths" if e["lengths"] > 1 else ""
        self.add(
            Finding(
                "padding-not-masked",
                "warning",
                f"attention runs over padded batches with no padding mask, on {self.forwards} "
                f"sampled forwards: in the first, {e['rows']} rows padded{lengths} (row "
                f"{e['row']}: {e['tokens']} tokens and {e['padding']} padding "
                f"position{'s' if e['padding'] != 1 else ''}, padded on the {e['side']}); every "
                "token attends to the padding too, so what it gathers depends on how much "
                "padding its batch holds, and an evaluation padded otherwise (one example at a "
                "time, a longer batch) scores otherwise",
                where=self.where,
                evidence={"forwards": self.forwards, **e},
            )
        )


def _batched(mask: Any, dims: int) -> bool:
    """Whether an attention's mask has a batch dim (``dims``: its query's dims): one mask per
    row, which may mask each row's padding."""
    return isinstance(mask, torch.Tensor) and mask.dim() >= dims and mask.shape[0] > 1


def _in_torch_attention() -> bool:
    """Whether the call noted (a softmax, or ``scaled_dot_product_attention``) was made inside
    torch's ``multi_head_attention_forward``: that call is read as itself (its own masks, as
    given, before it merges them into one per row)."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(HERE):
        frame = frame.f_back
    while frame is not None and frame.f_code.co_filename.startswith(sites.TORCH_DIR):
        if frame.f_code.co_name == "multi_head_attention_forward":
            return True
        frame = frame.f_back
    return False


def _padded(
    ids: torch.Tensor, keys: int, rows: int, causal: bool, declared: set[int]
) -> dict[str, Any] | None:
    """How ``ids`` ([B, S] or [S, B]) are padded, lined up with attention over ``keys`` keys
    (its S, or up to ``ADDED`` more) and ``rows`` rows (B, or B times the heads: each row
    attended alone, cropped to its length, is no padded batch): None where fewer than two rows are padded, or to one
    length unless the pad is an Embedding's ``padding_idx`` (``declared``: rows bucketed by
    length, each padded by one), or where right padding meets a causal mask (no token attends
    to later keys)."""
    if ids.unique().numel() < IDS:  # (one host read)
        return None
    for x in [ids] if ids.shape[0] == ids.shape[1] else [ids, ids.t()]:
        if not 0 <= keys - x.shape[1] <= ADDED or rows % x.shape[0]:
            continue
        for side in ("right", "left"):
            if side == "right" and causal:
                continue
            r = (x if side == "right" else x.flip(1)).detach()  # [B, S]
            reading = _reading(r, declared)
            if reading is not None:
                return {**reading, "side": side}
    return None


def _reading(rows: torch.Tensor, declared: set[int]) -> dict[str, Any] | None:
    """The padding at the end of ``rows`` [B, S]: an Embedding's ``padding_idx`` where the
    rows end in one (``declared``), else the id the padded rows end in (``masks``' reading);
    None where fewer than two rows are padded, or, for an id not declared, to one length."""
    ends = [p for p in declared if bool((rows[:, -1] == p).any())][:1]
    if ends:
        pad = torch.tensor(ends, device=rows.device)
        run = trailing(rows == pad)
    else:
        run, pad = padding_runs(rows[..., None])
    tokens = rows.shape[1] - run
    elsewhere = (rows == pad).sum(1) - run  # the pad id before the padding
    judged = (run >= 1) & (tokens >= 2)  # (length-bucketed batches pad a little)
    lengths = (torch.where(judged, run, -1).unique() >= 0).sum()
    stats = [judged.sum(), run.argmax(), run.max(), lengths, elsewhere.sum()]
    stats.append(torch.where(judged, run, rows.shape[1]).min())
    n, row, most, lengths, inside, least = torch.stack(stats).tolist()
    if n < 2 or inside > n or (least == most and not ends):
        return None
    return {
        "rows": n,
        "lengths": lengths,
        "row": row,
        "tokens": int(tokens[row]),
        "padding": most,
    }
