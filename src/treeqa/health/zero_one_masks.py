"""``attention-mask-not-additive``: an attention mask of 0s and 1s given as floats.

``F.scaled_dot_product_attention``, ``nn.MultiheadAttention`` and the ``nn.Transformer`` layers
read a boolean mask as which keys take part (or, as a key padding mask, which to ignore), and
*add* a floating one to the attention scores. A 0/1 mask made float (a Hugging Face
``attention_mask`` given as ``attn_mask=mask[:, None, None, :].float()``,
``src_key_padding_mask=(ids == pad).float()``, a causal mask ``torch.tril(torch.ones(T, T))``)
therefore hides no key: the keys it marks get e times the weight (or 1/e), where 0 and -inf
were meant. Nothing fails; the model attends to the padding (or to the future) as if no mask
were given.

Fed by ``masks.AttentionMasks``'s wrappers during a trained model's forward on a sampled step:
each floating mask of those calls (``key_padding_mask`` and ``attn_mask`` of
``F.multi_head_attention_forward``, ``attn_mask`` of a ``scaled_dot_product_attention`` the
script calls itself) is read once (one host read): every value 0 or 1, and both there. ``STEPS``
sampled forwards with such a mask make the finding, at the first one's line (one, where the run
ends before a second).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from treeqa.health import checks, sites
from treeqa.health.findings import Finding

STEPS = 2
"""Sampled forwards with a 0/1 floating mask that make the finding."""
NAMES = {
    ("multi_head_attention_forward", "key_padding_mask"): "key_padding_mask",
    ("multi_head_attention_forward", "attn_mask"): "attn_mask",
    ("scaled_dot_product_attention", "attn_mask"): "scaled_dot_product_attention's attn_mask",
}


class ZeroOneMasks:
    """``add``: where the finding goes. ``called`` for each wrapped attention call of a sampled
    forward, ``end`` when that forward ends, ``finish`` when the run does."""

    def __init__(self, add: Callable[[Finding], None]):
        self.add = add
        self.seen: list[Any] = []  # the masks read in this forward (a stack's layers share one)
        self.found: dict[str, Any] | None = None  # this forward's first 0/1 mask
        self.forwards = 0  # sampled forwards with one
        self.example: dict[str, Any] | None = None
        self.where = ""
        self.said = False

    def called(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        if self.said or self.found is not None:
            return
        if name == "multi_head_attention_forward":
            masks = [("key_padding_mask", kwargs.get("key_padding_mask"))]
            masks.append(("attn_mask", kwargs.get("attn_mask")))
        elif name == "scaled_dot_product_attention":
            masks = [("attn_mask", args[3] if len(args) > 3 else kwargs.get("attn_mask"))]
        else:
            return
        for kind, mask in masks:
            if not isinstance(mask, torch.Tensor) or any(m is mask for m in self.seen):
                continue
            self.seen.append(mask)
            if not mask.is_floating_point() or mask.numel() < 2:
                continue
            if checks.untraceable(mask) or not checks.dense(mask):
                continue
            ones = _zero_one(mask)
            if ones is not None:
                self.found = {
                    "mask": NAMES[(name, kind)],
                    "shape": list(mask.shape),
                    "ones": ones,
                    "entries": mask.numel(),
                }
                self.where = self.where or sites.user_site()
                return

    def end(self) -> None:
        """The sampled forward ended."""
        found, self.found, self.seen = self.found, None, []
        if found is None or self.said:
            return
        self.forwards += 1
        self.example = self.example or found
        if self.forwards >= STEPS:
            self._report()

    def finish(self) -> None:
        self.end()
        if self.forwards and not self.said:
            self._report()

    def _report(self) -> None:
        assert self.example is not None
        self.said = True
        found = attention_mask_not_additive(self.forwards, self.example)
        found.where = self.where
        self.add(found)


def _zero_one(mask: torch.Tensor) -> int | None:
    """The count of ones where every value of ``mask`` is 0 or 1 and both are there, else
    None. One host read."""
    m = mask.detach()
    zeros, ones = (m == 0).sum(), (m == 1).sum()
    z, o = torch.stack([zeros, ones]).tolist()
    if z + o != m.numel() or not z or not o:
        return None
    return int(o)


def attention_mask_not_additive(forwards: int, example: dict[str, Any]) -> Finding:
    """``forwards`` sampled forwards gave attention a floating mask of 0s and 1s (``example``:
    the first)."""
    share = example["ones"] / example["entries"]
    return Finding(
        "attention-mask-not-additive",
        "error",
        f"{example['mask']} is a floating mask of 0s and 1s ({example['shape']}, "
        f"{share:.0%} ones) on {forwards} sampled forward(s): attention adds a floating mask "
        "to its scores, so this one hides no key (the keys marked 1 get e times the weight of "
        "the others, where 0 and -inf were meant); the padding or the future it was meant to "
        "hide is attended to as if no mask were given",
        evidence={
            "forwards": forwards,
            "mask": example["mask"],
            "shape": example["shape"],
            "ones": example["ones"],
            "entries": example["entries"],
        },
    )
