"""``tokens-mostly-unknown``: a text model whose token ids are mostly one id.

Text maps to ids through a vocabulary, and every word the vocabulary lacks becomes one id
(``vocab.get(w, unk)``, a ``defaultdict``, a tokenizer's unknown token). Where the vocabulary and
the lookup disagree (built from lower-cased words and looked up with the raw ones, split on
spaces and looked up with punctuation attached, a ``min_freq`` that keeps a few hundred words,
the evaluation text mapped through a vocabulary built anew), most tokens are that one id: the
model sees little of the text, and learns from the few words that got through. Nothing fails;
the accuracy is low or, where only the evaluation's lookup is wrong, the held-out score alone.

Each ``nn.Embedding`` and ``nn.EmbeddingBag`` of ``VOCABULARY`` ids or more in the models the
clock trains gets a forward pre-hook (a ``ModelHook``). On sampled training steps, and in
evaluations (the layer in eval mode), its integer input is read. Of two dims, rows of
``MIN_LENGTH`` tokens or more: batch first where dim 0 alone has the DataLoader's batch size,
time first where dim 1 alone has it, and both ways where neither tells (the smaller share
taken). Padding is left out (``unpadded``); every other id counts, between a row's words too.
An EmbeddingBag's bags, one after another, count whole. ``SHARE`` of ``MIN_TOKENS`` tokens or
more one id, or half the rows nothing but padding, in ``BATCHES`` batches in a row of training
(or of evaluation), or in fewer evaluation batches that hold ``TOKENS``, make the finding,
where that id is one a vocabulary keeps its unknown id at (``special``): a token common by
design (a mask, a blank, silence) among those reads the same, hence a warning.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn

from treeqa.health import sites
from treeqa.health.findings import Finding
from treeqa.health.hooks import ModelHook

EMBEDDINGS = (nn.Embedding, nn.EmbeddingBag)

VOCABULARY = 1000
"""Embeddings of fewer ids (characters, bytes, categories) are not read."""
MIN_LENGTH = 8
"""Rows of fewer tokens are not read."""
MIN_TOKENS = 64
"""Tokens a batch must hold, padding left out."""
SHARE = 0.5
"""The share of a batch's tokens one id must take."""
BATCHES = 3
"""Batches in a row (training steps, or evaluation batches) with one id taking the tokens."""
TOKENS = 2048
"""Or as many evaluation tokens in fewer batches (a test set scored in one batch)."""
SPECIALS = 4
"""The first ids of a vocabulary, where its unknown id is kept (or else its last)."""


class UnknownTokens:
    """``add``: where the finding goes; ``safely``: what runs the hooks; ``sampling()``:
    whether this training step is sampled; ``batch_size()``: the newest DataLoader's."""

    def __init__(
        self,
        add: Callable[[Finding], None],
        safely: Callable[..., None],
        sampling: Callable[[], bool],
        batch_size: Callable[[], int | None],
    ):
        self.add, self.safely, self.sampling, self.batch_size = add, safely, sampling, batch_size
        self.handles: list[Any] = []
        # training, evaluation -> (the id, batches in a row it took, its share, tokens)
        self.runs: dict[bool, tuple[int, int, float, int]] = {}
        self.said = False

    def watch(self, models: Sequence[nn.Module]) -> None:
        """Hook the vocabulary embeddings of the models the clock trains."""
        self.unwatch()
        if self.said:
            return
        for model in models:
            for name, module in model.named_modules():
                if isinstance(module, EMBEDDINGS) and module.num_embeddings >= VOCABULARY:
                    hook = ModelHook(self.safely, self._called, name)
                    self.handles.append(module.register_forward_pre_hook(hook))

    def unwatch(self) -> None:
        while self.handles:
            self.handles.pop().remove()

    def _called(
        self, name: str, module: nn.Embedding | nn.EmbeddingBag, args: tuple[Any, ...]
    ) -> None:
        training = module.training and torch.is_grad_enabled()
        if (training and not self.sampling()) or (module.training and not training):
            return  # (not sampled; or without gradients in train mode: no evaluation)
        ids = args[0] if args else None
        if not isinstance(ids, torch.Tensor) or ids.is_floating_point():
            return
        if ids.dim() == 1 and isinstance(module, nn.EmbeddingBag):  # bags, one after another
            read = _counted(ids)
        elif ids.dim() == 2:
            read = _read(ids, module.padding_idx, self.batch_size())
        else:
            return
        if read is None:
            return
        top, share, tokens = read
        last = self.runs.get(training)
        if share < SHARE or not special(top, module.num_embeddings):
            self.runs.pop(training, None)
            return
        if last is not None and last[0] == top:
            batches, tokens = last[1] + 1, last[3] + tokens
        else:
            batches = 1
        self.runs[training] = (top, batches, share, tokens)
        if batches >= BATCHES or (tokens >= TOKENS and not training):
            self.said = True
            layer = f"{name} ({type(module).__name__} of {module.num_embeddings} ids)"
            found = tokens_mostly_unknown(layer, top, share, batches, training)
            found.where = sites.models_caller()
            self.add(found)
            self.unwatch()


def special(token: int, ids: int) -> bool:
    """Whether ``token`` is where a vocabulary keeps its unknown id: among its first
    ``SPECIALS`` (``<pad>``, ``<unk>``, ``<s>``, ``</s>`` in some order) or its last (an
    ``<unk>`` appended). A code or item id common by design (an image's background, a home
    page) is anywhere."""
    return token < SPECIALS or token == ids - 1


def _read(
    ids: torch.Tensor, padding_idx: int | None, batch: int | None
) -> tuple[int, float, int] | None:
    """``dominant`` of ids batch first ([B, T]: dim 0 alone has the DataLoader's batch size) or
    time first ([T, B]: dim 1 alone has it); where neither tells (batches sliced by hand, a
    square batch), the reading of the two whose share is the smaller."""
    if ids.shape[0] == batch != ids.shape[1]:
        return dominant(ids, padding_idx)
    if ids.shape[1] == batch != ids.shape[0]:
        return dominant(ids.t(), padding_idx)
    reads = [r for r in (dominant(ids, padding_idx), dominant(ids.t(), padding_idx)) if r]
    return min(reads, key=lambda r: r[1], default=None)


def dominant(ids: torch.Tensor, padding_idx: int | None) -> tuple[int, float, int] | None:
    """(the id most of ``ids`` [rows, T]'s tokens are, its share, the tokens counted),
    padding at the rows' ends left out; None where too few tokens are left. Rows that are all
    padding, half of them or more, count as their id taking every token."""
    rows, length = ids.shape
    if rows < 2 or length < MIN_LENGTH:
        return None
    kept = unpadded(ids, padding_idx)
    empty = ~kept.any(1)
    if empty.double().mean() >= 0.5:
        return int(ids[empty][0, 0]), 1.0, int(empty.sum()) * length
    counted = ids[kept]
    if counted.numel() < MIN_TOKENS:
        return None
    return _counted(counted)


def unpadded(ids: torch.Tensor, padding_idx: int | None) -> torch.Tensor:
    """[rows, T]: the positions of ``ids`` that are no padding. Padding is a run, at either
    end of a row, of the layer's ``padding_idx`` or of the commonest last id of the rows, where
    it ends half of them (a GPT-2's end token padding on the left and closing each text); else,
    a run at a row's start of the commonest first id, where it starts half. An id between a
    row's words is a word, whatever its id (an unknown id that also pads), and so is a run of
    unknown words at the start of rows padded on the right."""
    rows, length = ids.shape
    pads = [] if padding_idx is None else [padding_idx]
    left: list[int] = []
    for column, side in ((ids[:, -1], pads), (ids[:, 0], left)):
        common = column.mode().values
        if 2 * int((column == common).sum()) >= rows:
            side.append(int(common))
            break  # (rows padded on the right are not padded on the left too)
    at = torch.arange(length, device=ids.device)
    words = ~torch.isin(ids, torch.tensor(pads, dtype=ids.dtype, device=ids.device))
    last = length - 1 - words.flip(1).int().argmax(1)
    kept = (at <= last[:, None]) & words.any(1)[:, None]
    words &= ~torch.isin(ids, torch.tensor(left, dtype=ids.dtype, device=ids.device))
    first = words.int().argmax(1)
    return kept & (at >= first[:, None]) & words.any(1)[:, None]


def _counted(ids: torch.Tensor) -> tuple[int, float, int] | None:
    """(the commonest id, its share, the ids counted) of ids with no padding (an
    EmbeddingBag's bags, one after another; a batch's words)."""
    if ids.numel() < MIN_TOKENS:
        return None
    values, counts = ids.unique(return_counts=True)
    top = int(counts.argmax())
    return int(values[top]), float(counts[top]) / ids.numel(), ids.numel()


def tokens_mostly_unknown(
    layer: str, token: int, share: float, batches: int, training: bool
) -> Finding:
    """``share`` of the tokens ``layer`` was given in ``batches`` batches in a row (of
    training, or of an evaluation) were the one id ``token``."""
    what = ("training" if training else "evaluation") + (" batches" if batches > 1 else " batch")
    return Finding(
        "tokens-mostly-unknown",
        "warning",
        f"{share:.0%} of the tokens given to {layer} were one id, {token}, in {batches} "
        f"{what}{' in a row' if batches > 1 else ''} (padding at the rows' ends left out). "
        "Where that id is the unknown word's, most words are missing from the vocabulary and "
        "the model sees little of the text: the vocabulary and the lookup disagree (built "
        "from lower-cased words and looked up with the raw ones, split one way and looked up "
        "split another, a minimum count that keeps too few words, "
        + (
            "a vocabulary of another corpus)"
            if training
            else "the evaluation text mapped through a vocabulary other than the training one)"
        )
        + "; a token common by design (a mask, a blank, silence) reads the same",
        evidence={"layer": layer, "id": token, "share": round(share, 3), "batches": batches},
    )
