"""A ``pack_padded_sequence`` given lengths that are not its rows' (``packed-lengths-mismatch``).

``torch.nn.utils.rnn.pack_padded_sequence`` is wrapped for the run. On sampled steps a call's
padded input is read for its padding: the vector that rows shorter than the batch end in (an
Embedding's padding row, zeros), repeated to the row's end; where it starts is the row's
length as the data has it. A row whose given length stops two or more before that is cut short
(its last words never reach the recurrent layer); one whose length runs two or more past it
reads padding as words. One either way is let be: an end-of-sequence token that shares the
padding's id (GPT-2's tokenizer), a decoder given every token but the last.

Each alone has its reasons. Rows cut short: a forecaster's history packed without the steps it
predicts (``lengths - horizon``), a truncation by ``lengths.clamp(max=n)``. Rows read past
what looks like padding: data whose own last values equal it (a churned user's days of zero
counts, digital silence at a clip's end, a poly-A tail as long as the padding), or rows padded
by repeating their own last vector. Lengths sorted on their own to satisfy
``enforce_sorted=True``, while the rows keep their order, or taken from another batch, make
rows of both kinds in one call: that is what counts. Where the input is an Embedding's output
with a ``padding_idx`` (or made from one by layers that keep each position where it was:
dropout, a position signal, a Linear), the padding is read off the ids its autograd node
saved, exactly: rows read past their padding ids count alone (lengths counted before tokens
were filtered out).

Only rows that end in the batch's padding are judged, and only where that vector repeats (two
or more at a row's end): a position signal added after the embedding (no two padded positions
alike) shows no padding and is passed by. A row read past its padding is judged only over
vectors of 4 features or more: a scalar series padded with 0 may hold 0s of its own.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

import torch
from torch.nn.utils import rnn

from treeqa.health import checks, sites
from treeqa.health.findings import Finding
from treeqa.health.wrap import Wrappers, note_function_calls

SLACK = 1
"""Positions a given length may differ from the padding's start by (see the module's text)."""
ROW_SHARE = 0.25
"""Rows of a call, of those that end in padding, whose length is off (some cut short and some
read past their padding) for the call to count."""
CALLS = 3
"""Sampled calls with lengths off, and at least as many as the calls whose lengths matched."""
FEATURES = 4
"""The fewest features a padded vector needs for a row read past its padding to count."""


class PackedLengths:
    """``add``: where the finding goes; ``active()``: read this call (a sampled step)."""

    def __init__(self, add: Callable[[Finding], None], active: Callable[[], bool]):
        self.add, self.active = add, active
        self.matched = self.off = 0  # sampled calls whose padding showed, by their lengths
        # the first call with lengths off: its rows cut short, read past their padding, and
        # judged; a row off, its given length and where its padding starts
        self.example: tuple[int, int, int, int, int, int] | None = None
        self.where = ""
        self.said = False
        self.wrappers = Wrappers()

    def install(self) -> None:
        self.wrappers.add(note_function_calls(rnn, "pack_padded_sequence", self._called))

    def uninstall(self) -> None:
        self.wrappers.undo()

    def _called(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """``pack_padded_sequence(input, lengths, batch_first=False, enforce_sorted=True)``."""
        if self.said or not self.active():
            return
        x = args[0] if args else kwargs.get("input")
        lengths = args[1] if len(args) > 1 else kwargs.get("lengths")
        batch_first = args[2] if len(args) > 2 else kwargs.get("batch_first", False)
        if not isinstance(x, torch.Tensor) or checks.untraceable(x) or not checks.dense(x):
            return
        starts = padding_ids_start(x, bool(batch_first))
        by_ids = starts is not None
        if starts is None:
            starts = padding_starts(x, bool(batch_first))
        if starts is None:
            return
        given = torch.as_tensor(lengths).reshape(-1).to("cpu", torch.long)
        if given.numel() != starts.numel():
            return  # torch raises on it
        features = FEATURES if by_ids else x.reshape(*x.shape[:2], -1).shape[-1]
        cut, read = _lengths_off(given, starts, features)
        off = cut | read
        judged = int((starts >= 0).sum())
        both = read.any() and (cut.any() or by_ids)  # (padding ids read are padding)
        if not both or int(off.sum()) < max(2, ROW_SHARE * judged):
            self.matched += 1
            return
        self.off += 1
        if self.example is None:
            row = int(off.nonzero()[0])
            counts = (int(cut.sum()), int(read.sum()), judged)
            self.example = (*counts, row, int(given[row]), int(starts[row]))
            self.where = sites.user_site()
        if self.off >= CALLS and self.off >= self.matched:
            self.said = True
            found = packed_lengths_mismatch(self.off, self.off + self.matched, *self.example)
            found.where = self.where
            self.add(found)


def padding_ids_start(x: torch.Tensor, batch_first: bool) -> torch.Tensor | None:
    """[B] where each row's padding ids start, where ``x`` is an Embedding's output with a
    ``padding_idx`` (``embedded_ids``), read off the ids its autograd node saved; else None."""
    ids, pad = embedded_ids(x) or (None, None)
    if ids is None or pad is None:
        return None
    return ids_start(ids, pad, batch_first)


def ids_start(ids: torch.Tensor, pad: int, batch_first: bool) -> torch.Tensor:
    """[B] on the host: where the run of ``pad`` at each row's end starts in ``ids`` ([B, T]
    batch first, else [T, B])."""
    ids = ids if batch_first else ids.t()
    return (ids.shape[1] - trailing(ids == pad)).cpu()


def embedded_ids(x: torch.Tensor) -> tuple[torch.Tensor, int | None] | None:
    """(the ids, laid out as ``x``'s first dims, and the ``padding_idx`` or None) where ``x``
    [B, T, F] (or [T, B, F]) was made from an Embedding's output by operations that keep each
    position where it was (dropout, a scale, a sum with a position signal, features joined by
    ``cat``, a Linear, an activation, a layer norm, a cast, a transpose, a convolution over
    time, a recurrent layer: see ``ALIGNED``), read off the ids its autograd node saved; else
    None. Of several such Embeddings, the nearest with a ``padding_idx``, else the nearest
    whose rows are not all alike (position ids)."""
    found: list[tuple[torch.Tensor, int | None]] = []
    queue: deque[Any] = deque([x.grad_fn])
    seen: set[Any] = set()
    while queue and len(seen) < NODES:
        node: Any = queue.popleft()
        if node is None or node in seen:
            continue
        seen.add(node)
        name = type(node).__name__
        if name == "EmbeddingBackward0":
            read = _saved_ids(node, x.shape[:-1])
            if read is not None and read[1] is not None:
                return read  # the nearest with a padding_idx
            if read is not None:
                found.append(read)
        elif name.startswith(ALIGNED) or any(n in name for n in RECURRENT):
            queue.extend(n for n, _ in node.next_functions)
    for ids, pad in found:
        if ids.shape[0] > 1 and not bool((ids == ids[:1]).all()):
            return ids, pad
    return None


NODES = 256
"""Autograd nodes looked through for the Embedding an input was made from, at most."""
ALIGNED = (
    "NativeDropout",
    "Mul",
    "Div",
    "Add",
    "Cat",
    "Sub",
    "View",
    "UnsafeView",
    "Addmm",
    "Mm",
    "Transpose",
    "Permute",
    "Relu",
    "Tanh",
    "Sigmoid",
    "Gelu",
    "Silu",
    "NativeLayerNorm",
    "ToCopy",
    "Clone",
    "Convolution",
)
"""Autograd nodes (their names' starts) of operations that keep each position of a sequence
where it was."""
RECURRENT = ("Rnn", "Lstm", "Gru")
"""Parts of the names of recurrent layers' autograd nodes (``MkldnnRnnLayerBackward0``,
``CudnnRnnBackward0``)."""


def _saved_ids(node: Any, shape: torch.Size) -> tuple[torch.Tensor, int | None] | None:
    """(ids, ``padding_idx`` or None) an Embedding's node saved, laid out as ``shape``."""
    try:
        ids, pad = node._saved_indices, int(node._saved_padding_idx)
    except (AttributeError, RuntimeError):  # freed, another torch's names
        return None
    if ids.shape != shape:
        if ids.dim() != 2 or ids.shape[::-1] != shape:
            return None
        ids = ids.t()  # made time first after the Embedding
    return ids, pad if 0 <= pad < 2**63 else None


def padding_starts(x: torch.Tensor, batch_first: bool, alone: bool = False) -> torch.Tensor | None:
    """[B] where each row of the padded batch ``x`` ([B, T, *] batch first, else [T, B, *])
    starts its padding, for the rows that end in the batch's padding vector (-1 for the
    others); None where no padding shows (see the module's text), and, with ``alone``, where
    that vector is found before a row's padding too (a value the data holds). Two host reads."""
    if x.dim() < 2:
        return None
    rows = x.detach() if batch_first else x.detach().transpose(0, 1)
    b, t = rows.shape[:2]
    if b < 2 or t < 3:
        return None
    rows = rows.reshape(b, t, -1)
    run, pad = padding_runs(rows)  # [B], [F]
    padded = run > 0
    inside = (rows == pad).all(-1) & (torch.arange(t, device=rows.device) < (t - run)[:, None])
    longest, count, found = torch.stack([run.max(), padded.sum(), inside.any().long()]).tolist()
    if longest < 2 or count < 2 or alone and found:
        return None
    return torch.where(padded, t - run, -1).cpu()


def padding_runs(rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The padding of ``rows`` [B, T, F]: the vector [F] the padded rows end in (the row with
    the longest run of one vector at its end gives it), and each row's run of it at its end,
    [B] (0 for rows that end in another). No host read."""
    last = rows[:, -1]  # [B, F]
    run = trailing((rows == last[:, None]).all(-1))  # [B]: the row's last vector, at its end
    pad = last[run.argmax()]  # [F]
    return torch.where((last == pad).all(-1), run, 0), pad


def trailing(mask: torch.Tensor) -> torch.Tensor:
    """[B]: how many of each row's last entries of ``mask`` [B, T] are True in a row."""
    return mask.flip(1).int().cumprod(1).sum(1)


def _lengths_off(
    given: torch.Tensor, starts: torch.Tensor, features: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """[B] bool each: the judged rows whose given length stops more than ``SLACK`` before their
    padding starts (cut short), and those whose length runs more than that past it (read past
    their padding; over ``FEATURES`` features or more)."""
    judged = starts >= 0
    cut = judged & (given < starts - SLACK)
    read = judged & (given > starts + SLACK) & (features >= FEATURES)
    return cut, read


def packed_lengths_mismatch(
    calls: int, judged: int, cut: int, read: int, rows: int, row: int, given: int, starts: int
) -> Finding:
    """``calls`` of ``judged`` sampled ``pack_padded_sequence`` calls had lengths that do not
    match their rows' padding; in the first, ``cut`` of its ``rows`` padded rows were cut short
    and ``read`` read past their padding (``row``, say: ``given`` where its padding starts at
    ``starts``)."""
    return Finding(
        "packed-lengths-mismatch",
        "warning",
        f"pack_padded_sequence was given lengths that do not match its rows on {calls} of "
        f"{judged} sampled calls: in the first, of the {rows} rows whose end could be read, {cut} "
        f"were cut short (their last words never reach the recurrent layer) and {read} read "
        f"past their padding as if it were words (row {row}: length {given} given, its "
        f"padding starts at {starts}); lengths sorted apart from the rows, or taken from "
        "another batch?",
        evidence={
            "calls": calls,
            "judged_calls": judged,
            "rows_cut": cut,
            "rows_read_past_padding": read,
            "padded_rows": rows,
            "row": row,
            "given_length": given,
            "padding_starts": starts,
        },
    )
