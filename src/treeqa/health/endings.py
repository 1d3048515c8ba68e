"""A language model never trained on the token that ends its texts, masked out of the loss as
padding (``end-token-masked``).

Tokenizers without a padding token (GPT-2's, Llama's, Mistral's) are given their end-of-text
token as one (``tokenizer.pad_token = tokenizer.eos_token``, as transformers' own language
modelling guide did), and the labels are then made from the ids with the padding id set to
-100 (``DataCollatorForLanguageModeling``, ``labels[labels == pad_id] = -100``). That masks the
real end-of-text token each text ends with too: the model is never trained to predict it, and
at generation it does not stop (transformers issue 23530, TRL issues 734 and 976).

``causal.py`` reads it from a next-token target beside an attention mask given to the same
forward (0/1, the ids' shape: a Hugging Face ``attention_mask``): the padding id is the one
every unattended position holds; a row ends in it where its last attended position holds it
(the tokenizer's end token, attended, before the padding or at the row's end); and the model
is never taught the end where no position whose target is that id is supervised (the one
before each such end, or any other: a chat's turns that end in it, the last turn's left out
on purpose, still teach it). Where the rows do not end in it, the last ids of the texts shorter than the
longest are read: texts that end in as many ids as half their rows have no end token
(``end-token-missing``), unless a target is the padding id (an end token that the mask hides,
its label kept; end tokens inside packed rows). A mask is read as given, inverted (True for
padding: ``key_padding_mask``'s) and, additive, by its 0s (``ways``). Judged where the loss is the step's, as for
``targets-shifted-twice`` (a language model's term beside a classifier's, or beside another
loss that teaches the end, is not). Counted on the device with the step's other
counts (no host read of its own).

Coordinates: ids, mask ``[B, T]``; ``supervised`` ``[B, T - 1]``, the targets of queries
0 .. T - 2 that are not ignored.
"""

from __future__ import annotations

from typing import Any

import torch

from treeqa.health.findings import Finding

COUNTS = 8
"""Numbers ``counts`` gives: values of the mask other than 0 and 1, unattended positions,
those of another id than the padding's (all of them where every row has as much padding), rows
ending in it, positions whose target is such an end, supervised positions whose target is the
padding id anywhere in a row; rows with padding and a text shorter than the longest, and how
many ids end them."""
ROWS = 0.125
"""Share of the rows that must end in the padding id, attended (a corpus of long documents
truncated to the context ends few of its rows: 3 of 16 in a probe)."""
ADDED = -100.0
"""An additive mask's value at or below which a position is padding (``causal.IGNORED``)."""
PADDED = 8
"""Rows with padding and a text shorter than the longest (a row as long as the longest may
have been cut at the length: padded to a multiple of 8, it has padding too), at least, for
their texts' last ids to be read (``end-token-missing``): in fewer, a few stop tokens ('.',
'?' or '!'; one per speaker) end half of them as often as no end token does."""
SHARED = 0.5
"""Ids that end those rows, as a share of them, from which the texts have no end token:
texts of a corpus end in whatever word they end in, nearly one id a row; texts closed by an end
token, or by one of a few (a stop token per speaker, '.', '?' or '!', the end token or it and a
newline), end in few."""


def ways(mask: torch.Tensor) -> list[torch.Tensor]:
    """The ways a tensor given beside ids may mark their tokens: as given (1 or True for a
    token: a Hugging Face ``attention_mask``), inverted (True for padding: a
    ``key_padding_mask``), and an additive mask's 0 for a token (-inf, -1e9 for padding)."""
    if mask.dtype == torch.bool:
        return [mask, ~mask]
    found = [mask, 1 - mask]
    return [*found, mask > ADDED] if mask.is_floating_point() else found


def counts(ids: torch.Tensor, mask: torch.Tensor, supervised: torch.Tensor) -> list[torch.Tensor]:
    """``COUNTS`` counts on the device, for ``reading``; the padding id is the largest id at
    an unattended position (all of them the same where the mask pads with one id)."""
    attended = mask != 0  # [B, T]
    odd = ((mask != 0) & (mask != 1)).sum()
    padding = ids.masked_fill(attended, torch.iinfo(ids.dtype).min).amax()
    unattended = ~attended
    other = (unattended & (ids != padding)).sum()
    # padding of one length in every row is no padding to the longest (token type ids, 0 on a
    # prompt's first position, read as a mask hid the real one)
    width = unattended.sum(1)  # [B]
    varied = width.amax() - width.amin()
    after = torch.cat([unattended[:, 1:], torch.ones_like(attended[:, :1])], 1)  # [B, T]
    ends = attended & after & (ids == padding)  # [B, T]: a row's last attended id, the padding's
    before = ends[:, 1:]  # [B, T - 1]: queries whose target is such an end
    # [B, T - 1]: queries trained on the padding id anywhere (a chat's turns ending in it, the
    # last turn's ignored on purpose, still teach it; an end token the mask hides, its label
    # kept; the end tokens inside packed rows)
    taught = supervised & (ids[:, 1:] == padding)
    # the last attended id of each row with padding whose text is shorter than the longest
    # (whole, not cut at the length), and how many ids end them
    length = attended.sum(1)  # [B]
    whole = attended.any(1) & unattended.any(1) & (length < length.amax())  # [B]
    positions = torch.arange(ids.shape[1], device=ids.device)
    last = ids.gather(1, (attended * positions).argmax(1, keepdim=True))[:, 0]  # [B]
    same = (last[:, None] == last[None, :]) & whole[:, None] & whole[None, :]  # [B, B]
    distinct = (whole / same.sum(1).clamp(min=1)).sum()  # sum over rows of 1 / rows sharing
    return [
        odd,
        unattended.sum(),
        other + (varied == 0) * unattended.sum(),  # (no padding to read where not varied)
        ends.any(1).sum(),
        before.sum(),
        taught.sum(),
        whole.sum(),
        distinct,
    ]


def reading(values: list[float], rows: int) -> dict[str, Any] | None:
    """The step's reading from ``counts``' values over ``rows`` rows: None where it says
    nothing (no padding, or padding of several ids, or of one length in every row, or a mask
    of other values); else, where rows end in the padding id, whether that end token was left
    out of the targets (``end-token-masked``), and where they do not, whether the texts end in
    ids as many as they are (``end-token-missing``): ``code`` and ``found``."""
    odd, unattended, other, ended, ends, taught, whole, distinct = values
    if odd or not unattended or other:
        return None
    if ended >= ROWS * rows and ends:
        return {
            "code": "end-token-masked",
            "found": taught == 0,
            "rows": int(ended),
            "ends": int(ends),
        }
    if whole >= PADDED:
        return {
            "code": "end-token-missing",
            "found": distinct >= SHARED * whole and taught == 0,
            "rows": int(whole),
            "shared": round(distinct),
        }
    return None


def first_reading(values: list[float], rows: int) -> dict[str, Any] | None:
    """The reading of the first tensor read as the mask that says something, from ``counts``'
    values of each (``COUNTS`` a tensor) over ``rows`` rows."""
    for i in range(0, len(values), COUNTS):
        found = reading(values[i : i + COUNTS], rows)
        if found is not None:
            return found
    return None


def end_token_missing(steps: int, judged: int, example: dict[str, Any]) -> Finding:
    """``steps`` of ``judged`` sampled steps padded texts that end in no shared token."""
    return Finding(
        "end-token-missing",
        "warning",
        f"the padded texts end in no common token: {example['rows']} rows with padding end in "
        f"{example['shared']} different ids, on {steps} of {judged} sampled steps; with no "
        "end-of-text token after each text (a tokenizer that does not append one: Llama's "
        "add_eos_token=False, GPT-2's), or one left out of the attention mask as padding, the "
        "model is never trained to end a text and at generation goes on until its length "
        "limit; unless it is not meant to end one (a fixed length)",
        evidence={"steps": steps, "judged_steps": judged, "rows_padded": example["rows"]},
    )


def end_token_masked(steps: int, judged: int, example: dict[str, Any]) -> Finding:
    """``steps`` of ``judged`` sampled steps left the end token out of their targets."""
    return Finding(
        "end-token-masked",
        "warning",
        f"the token that ends each text is never a target: {example['rows']} of the batch's rows "
        "end in an attended token whose id is also the padding's, and no position before one "
        f"of them is trained to predict it ({example['ends']} such positions, all ignored), on "
        f"{steps} of {judged} sampled steps; the labels were made by masking the padding id "
        "(-100), which masks the real end-of-text token too where the padding token is the "
        "end token (pad_token = eos_token), so the model never learns to end a text and at "
        "generation goes on until its length limit; unless it is not meant to end one (a "
        "fixed length) or ends its texts with a stop token of its own just before (a chat "
        "format's turn end)",
        evidence={"steps": steps, "judged_steps": judged, "rows_ending": example["rows"]},
    )
