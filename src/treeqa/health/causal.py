"""A language model whose attention shows each position the token it is to predict
(``causal-mask-missing``).

Next-token prediction trains position i on token i + 1 (the targets are the input ids shifted
by one). A decoder's self-attention must hide every later key; without the causal mask
(``nn.TransformerEncoder`` called without ``mask=``, ``scaled_dot_product_attention`` without
``is_causal=True``, scores never filled above the diagonal) or with a bidirectional RNN, each
position reads its answer: the loss falls near 0 within a few hundred steps, and generation,
one token at a time with no future to read, produces nothing sensible.

While ``masks.AttentionMasks`` has a trained model's forward on a sampled step wrapped, each
attention over as many keys as queries, T of them, the length of an id tensor the model was
given, is read for whether query i may see key i + 1, [B, T - 1]: from
``scaled_dot_product_attention``'s ``is_causal`` and ``attn_mask``, and from the scores given to a
softmax over their last dim (attention by hand, ``nn.MultiheadAttention`` asked for its
weights), where a masked key's score is at or below ``IGNORED``. The step's
``cross_entropy`` (or ``nll_loss``) target is then read against those ids: the language
model's form is ``SHIFTED`` of its targets (``-100`` and other negatives left out, and those at
the call's ``ignore_index``) equal to the next id. The forward leaks where every attention read lets most of those positions see their
target's key, and the model has no unidirectional RNN (a recurrent decoder attending over a
source of the same length is causal by its recurrence); with no attention read, where it has
a bidirectional RNN and no unidirectional one.

Where an Embedding's outputs for those ids have a gradient, the gradient decides instead
(``lookahead``): a position whose logits reach the next token's embedding sees it, whatever
layer lets it (a convolution padded on both sides, token mixing over time); one whose logits
reach no later token is causal, whatever the reads said (a mask applied after the softmax).

The same reads name two other forms of a causal model's targets (``targets-not-shifted``: the
ids themselves, unshifted, judged at the run's end where the model learned to copy them;
``targets-shifted-twice``: the ids two positions on, labels shifted before a loss that shifts
them again, judged where that loss is the step's, not a term of a sum), and, beside an
attention mask given to the forward, texts whose end token is masked out of the labels or
missing (``endings``).
"""

from __future__ import annotations

import re
import weakref
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from torch import nn

from treeqa.health import checks, endings, lookahead, loss_levels, sites
from treeqa.health.findings import Finding

IGNORED = -100.0
"""A score, or an additive mask's value, at or below which a key counts as masked out (-inf
from a boolean mask, ``finfo.min``, the -10000 of older code, -100: exp(-100) is 0 to a
softmax). A bias (ALiBi's, far below this for distant keys) leaves each key open to its own
query. ``masks`` reads masks by it too."""
GAP = 20.0
"""A score this far below its query's highest is masked too (exp(-20) is 2e-9): a mask's -inf
soft-capped afterwards (``cap * tanh(s / cap)``) is -cap."""
SHIFTED = 0.98
"""Share of a cross-entropy's targets equal to the next input id, for a language model's (a
masked language model's over runs of one id matched 94%)."""
SEEN = 0.5
"""Share of those positions whose query sees its target's key, for an attention read to leak."""
SUPERVISED = 8
"""Fewest positions a target must supervise to be judged."""
READS = 32
"""Attention calls read per forward: enough for a seq2seq model's encoder layers (their
attention over a source as long as the target sees it all) and its decoder's after them."""
STEPS = 2
"""Sampled steps whose language model's attention leaked, more than those where it did not."""
COPIED = 0.05
"""The most the median loss of a run's last quarter may be for targets that were the ids
themselves to be named: a model that learned to copy them (0.002-0.014 in the probes) rather
than one that shifts its ids itself after the lookup and predicts the next token, whose loss
stays at the text's uncertainty (0.6-1.6 there); a denoiser of 1.5% of its tokens that learned
to copy read 0.07."""

WALKED = 16
"""Autograd nodes walked back from a loss of targets two on, over one position fewer than the
ids, for the slice that kept the model's first positions (``_first_positions``)."""

REDUCTIONS = re.compile(r"(Mean|Sum|Mul|Div)Backward\d")
TERMS = re.compile(r"(Add|Sub)Backward\d")
REDUCING = 4
"""Nodes between a backward's loss and the cross-entropy it reduces (``_reduced``)."""

SOFTMAXES = ("softmax",)
ENDINGS = {
    "end-token-masked": endings.end_token_masked,
    "end-token-missing": endings.end_token_missing,
}
LOOKUPS = 4
"""An id tensor's Embedding outputs kept a forward, for the gradient."""
MASKS = 6
"""Tensors of the ids' shape given beside them read as their attention mask (``endings``; the
labels, position ids and token type ids, given too, read as none: a mask given fourth was
missed at 3)."""


class CausalReads:
    """``add``: where the finding goes. ``forward`` starts a sampled forward's reads,
    ``called`` reads one attention call, ``target`` judges the step's loss target."""

    def __init__(self, add: Callable[[Finding], None], active: Callable[[], bool]):
        self.add, self.active = add, active
        self.ids: list[torch.Tensor] = []  # the forward's id tensors, [B, T] (time first: [T, B])
        self.reads: list[tuple[str, torch.Tensor]] = []  # (call, [B, T - 1] query sees next)
        self.recurrent = ""  # "bidirectional": the model's RNNs read both ways, and none one way
        self.embedded: set[int] = set()  # the id tensors an Embedding looked up as given
        self.leaked = {"next": 0, "here": 0, "twice": 0}  # sampled steps that leaked, by form
        # the step's reading of targets two on, and its loss's autograd node, until its backward
        self.pending: tuple[dict[str, Any], Any, str] | None = None
        self.judged = 0  # sampled steps judged
        self.examples: dict[str, tuple[dict[str, Any], str]] = {}  # form: (reading, call site)
        self.site = ""  # this forward's
        self.said = False
        self.rnns: dict[int, str] = {}  # per model: its recurrent layers' directions
        self.model: weakref.ref[nn.Module] | None = None  # this forward's
        # this forward's Embedding outputs of each id tensor (by its memory), and whether each
        # is laid out as the ids were given (else transposed), for the gradient
        self.looked_up: dict[int, list[tuple[torch.Tensor, bool]]] = {}
        self.verdicts = lookahead.Verdicts()  # the gradient's, per model
        # next-token steps read beside an attention mask (``endings``), those whose texts' end
        # token was never a target, the first such reading
        self.ends = {code: [0, 0] for code in ENDINGS}  # per code: steps judged, found
        self.endings_found: dict[str, dict[str, Any]] = {}  # per code: the first reading
        self.ends_said = False  # (either code, said: one cause of a model that never stops)
        self.ending_pending: tuple[dict[str, Any], Any] | None = None  # until the backward
        self.beside: list[torch.Tensor] = []  # this forward's tensors that may be its mask

    def forward(
        self, model: nn.Module, ids: list[torch.Tensor], beside: Sequence[torch.Tensor] = ()
    ) -> None:
        """A trained model's sampled forward starts, given these id tensors ([B, T], or
        [T, B]: both are tried) and ``beside`` them these, which may be an attention mask
        (boolean or floating [B, T], [B, 1, 1, T])."""
        done = self.said and self.ends_said
        self.ids = [] if done else [x for x in ids if min(x.shape) >= 2]
        self.beside = [*self.ids, *beside] if self.ids else []
        self.reads, self.site, self.embedded, self.looked_up = [], "", set(), {}
        self.recurrent = self._directions(model) if self.ids else ""
        self.model = weakref.ref(model)

    def _directions(self, model: nn.Module) -> str:
        found = self.rnns.get(id(model))
        if found is None:
            # A cell (``nn.LSTMCell``) steps one way: a seq2seq's decoder beside a
            # bidirectional encoder of its source (which reads no id the targets are of).
            rnns = [m for m in model.modules() if isinstance(m, (nn.RNNBase, nn.RNNCellBase))]
            one_way = any(not getattr(m, "bidirectional", False) for m in rnns)
            found = "one-way" if one_way else "bidirectional" if rnns else ""
            self.rnns[id(model)] = found
        return found

    def looked(self, args: tuple[Any, ...], kwargs: dict[str, Any], result: Any) -> None:
        """An Embedding's lookup of the forward, ``F.embedding(*args, **kwargs)``, returned
        ``result``: the ids it embeds as given, and its output where it has a gradient."""
        looked_up = args[0] if args else kwargs.get("input")
        if not isinstance(looked_up, torch.Tensor):
            return
        for x in self.ids:
            if not _as_given(looked_up, x):
                continue
            self.embedded.add(x.data_ptr())
            kept = self.looked_up.setdefault(x.data_ptr(), [])
            if isinstance(result, torch.Tensor) and result.requires_grad and len(kept) < LOOKUPS:
                same = looked_up.shape == x.shape and (
                    x.shape[0] != x.shape[1] or looked_up.stride() == x.stride()
                )
                kept.append((result, same))

    def called(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """An attention call of the forward (the name ``masks`` wrapped it by)."""
        if not self.ids or len(self.reads) >= READS:
            return
        if name == "scaled_dot_product_attention":
            nxt = _sdpa_sees_next(args, kwargs)
        elif name in SOFTMAXES:
            nxt = _scores_see_next(args, kwargs)
        else:
            return
        if nxt is None:
            return
        shapes = {(b, t) for x in self.ids for b, t in (x.shape, x.shape[::-1])}
        rows = [_per_row(nxt, b) for b, t in shapes if t - 1 == nxt.shape[-1]]
        if not any(r is not None for r in rows):
            return
        for seen in rows:
            if seen is not None:
                self.reads.append((name, seen))
        self.site = self.site or sites.user_site()

    def target(
        self, target: Any, loss: torch.Tensor, ignore_index: Any = -100, logits: Any = None
    ) -> None:
        """A ``cross_entropy``/``nll_loss`` target, after the forward, the ``loss`` it made,
        the ``ignore_index`` it was given (a pad id, left out of the targets read as -100 is)
        and its input, ``logits``: judge the step."""
        if not self.ids or not isinstance(target, torch.Tensor) or not self.active():
            return
        if checks.untraceable(target) or target.is_floating_point() or not checks.dense(target):
            return
        if not (self.reads or self.recurrent or self.looked_up or self._masks()):
            self.ids = []  # (nothing to read the target against)
            return
        # Not the target itself, given to a model that computes its own loss from it and
        # embeds other ids (T5's labels=, a tagger's gold tags); a model that embeds the very
        # tensor its targets are (``model(idx)``, ``model(ids, labels=ids)``) is read.
        ids = [x for x in self.ids if not _same(x, target) or x.data_ptr() in self.embedded]
        judged = None  # the first language model's reading (read no further), else the first
        if isinstance(ignore_index, int) and ignore_index >= 0:  # (negative ones are left out)
            target = target.masked_fill(target == ignore_index, -1)
        for j in (self._judge(x, target, t, loss, logits) for t in (False, True) for x in ids):
            judged = judged or j
            if j is not None and "positions" in j:
                judged = j
                break
        self.ids, self.looked_up, self.beside = [], {}, []  # one target a step
        if judged is not None and judged.get("ending") is not None:
            self.ending_pending = (judged["ending"], loss.grad_fn)  # counted if the step's loss
        if self.said or judged is None or not judged.get("read", True):
            return  # (a language model that no read, RNN or gradient has decided yet)
        self.judged += 1  # (not leaked: causal, or targets of another form, a masked LM's)
        if judged["leaked"] and (not self.site or judged["call"] == "gradient"):
            self.site = sites.user_site()  # (no attention read named it: the loss's line)
        if judged["leaked"] and judged["form"] == "twice":  # counted if it is the step's loss
            self.pending = (judged, loss.grad_fn, self.site)
        elif judged["leaked"]:
            form = judged["form"]
            self.leaked[form] += 1
            self.examples.setdefault(form, (judged, self.site))
        steps = self.leaked["next"]
        if "next" in self.examples and steps >= STEPS and steps > self.judged - steps:
            self.said = True
            example, where = self.examples["next"]
            finding = causal_mask_missing(steps, self.judged, example)
            finding.where = where
            self.add(finding)

    def _ended(self, reading: dict[str, Any]) -> None:
        """A next-token step's reading of its texts' end token (``endings``), its loss the
        step's (not a language model's term beside a classifier's, nor beside a loss that
        trains the end token another way)."""
        code = reading["code"]
        tally = self.ends[code]
        tally[0] += 1
        if not reading["found"]:
            return
        tally[1] += 1
        example = self.endings_found.setdefault(code, {**reading, "where": sites.user_site()})
        judged, steps = tally
        if not self.ends_said and steps >= STEPS and steps > judged - steps:
            self.ends_said = True
            finding = ENDINGS[code](steps, judged, example)
            finding.where = example["where"]
            self.add(finding)

    def backward(self, node: Any) -> None:
        """A sampled step's backward, of a loss whose autograd node (constant factors walked
        back) is ``node``: targets of the ids two on count where they are that loss's, not a
        term of a sum (a multi-token model's heads for the tokens after the next). The
        forward's lookups are let go here where no target took them (a loss of another kind:
        kept until the next sampled forward, they held its graph, which ``graph-retained``
        then named)."""
        self.ids, self.looked_up, self.beside = [], {}, []
        ending, self.ending_pending = self.ending_pending, None
        if ending is not None and not self.ends_said and _reduced(node, ending[1]):
            self._ended(ending[0])
        pending, self.pending = self.pending, None
        if pending is None or self.said or not _reduced(node, pending[1]):
            return
        example, _, where = pending
        self.leaked["twice"] += 1
        steps = self.leaked["twice"]
        if steps >= STEPS and steps > self.judged - steps:
            self.said = True
            finding = targets_shifted_twice(steps, self.judged, example)
            finding.where = where
            self.add(finding)

    def finish(self, steps: Sequence[float], losses: Sequence[float]) -> None:
        """The run ended, its steps' losses ``losses`` (at ``steps``): targets that were the ids themselves
        are named where the model learned to copy them, the loss of its last quarter's steps
        near 0 (a model that shifts its ids itself, after the lookup, predicts the next token
        and stays at the text's own uncertainty)."""
        leaked = self.leaked["here"]
        if (
            self.said
            or "here" not in self.examples
            or leaked < STEPS
            or leaked <= self.judged - leaked
            or not steps
        ):
            return
        last = loss_levels.typical_late_loss(steps, losses, 0.75 * steps[-1])  # (NaN: none)
        if last <= COPIED:
            self.said = True
            example, where = self.examples["here"]
            finding = targets_not_shifted(leaked, self.judged, example, last)
            finding.where = where
            self.add(finding)

    def _masks(self) -> bool:
        """Whether two of the forward's tensors have one shape (ids and an attention mask)."""
        shapes = [x.shape for x in self.ids]
        return len(set(shapes)) < len(shapes)

    def _sees(
        self,
        logits: Any,
        given: torch.Tensor,
        supervised: torch.Tensor,
        time_first: bool,
        like: Any,
    ) -> tuple[bool, float] | None:
        """The gradient's verdict (``lookahead.Verdicts``) for this forward's model on steps
        ``like`` this one, where its Embedding's outputs for ``given`` were kept."""
        model = self.model() if self.model is not None else None
        looked_up = self.looked_up.get(given.data_ptr())
        if model is None or self.said:
            return None
        batch_first = [(out, same != time_first) for out, same in looked_up or []]
        return self.verdicts.of(model, like, logits, batch_first, supervised, time_first)

    def _judge(
        self,
        given: torch.Tensor,
        target: torch.Tensor,
        time_first: bool,
        loss: torch.Tensor,
        logits: Any,
    ) -> dict[str, Any] | None:
        """Whether ``target`` is ``given`` ids ([B, T], or [T, B] ``time_first``, the target
        flattened the same way) shifted by one and, if so, whether the forward's reads (or the
        gradient of its ``logits``) let its positions see their targets; or the ids
        themselves, unshifted, read by a causal forward (``form`` "here"); one host read, and
        the gradient's where it is read."""
        ids = given.t() if time_first else given
        b, t = ids.shape
        if target.numel() == b * t:
            rows = _rows(target, b, t, time_first)[:, :-1]
        elif target.numel() == b * (t - 1):
            rows = _rows(target, b, t - 1, time_first)
        else:
            return None
        rows = rows.to(ids.device)  # [B, T - 1]: the targets of queries 0 .. T - 2
        here, nxt = ids[:, :-1], ids[:, 1:]  # [B, T - 1]
        supervised = rows >= 0
        repeats = supervised & (nxt == here)  # a copy of the input matches too
        # [B, T - 2]: the targets of queries 0 .. T - 3 against the id two on
        two, after = supervised[:, :-1], ids[:, 2:]
        reads = [seen for _, seen in self.reads if seen.shape == nxt.shape]
        seen = [(s.to(ids.device) & supervised).sum() for s in reads]
        masks = [
            m.reshape(given.shape)
            for m in self.beside
            if m is not given
            and m.numel() == given.numel()
            and m.shape[0] == given.shape[0]
            and m.shape[-1] == given.shape[-1]
        ][:MASKS]
        ending = [
            count
            for m in ([] if self.ends_said or ids.is_floating_point() else masks)
            for way in endings.ways(m)
            for count in endings.counts(
                ids, (way.t() if time_first else way).to(ids.device), supervised
            )
        ]
        matches = [
            supervised & (rows == nxt),
            supervised & (rows == here),
            two & (rows[:, :-1] == after),
        ]
        counts = torch.stack(
            [
                supervised.sum(),
                *(m.sum() for m in matches),
                repeats.sum(),
                two.sum(),
                (two & (ids[:, 1:-1] == after)).sum(),  # the next id repeated, which matches too
                *ending,
                *seen,
            ]
        )
        n, shifted, unshifted, twice, repeated, n_two, repeated_two, *rest = counts.tolist()
        ended, sees = rest[: len(ending)], rest[len(ending) :]
        if n < SUPERVISED:
            return None
        call = self.reads[0][0] if sees else "rnn" if self.recurrent else "gradient"
        like = (bool(sees) and all(k >= SEEN * n for k in sees), t)  # (the gradient's verdicts')
        if (
            max(shifted, unshifted) < SHIFTED * n
            and n_two >= SUPERVISED
            and twice >= SHIFTED * n_two
            and repeated_two <= n_two / 2
        ):  # the ids two on: leaked where a causal forward (its attention masked, or a
            # one-way RNN's) embedded them as given, and the loss's rows are its positions
            ahead = self._sees(logits, given, supervised, time_first, like)
            if ahead is not None:
                causal = not ahead[0]
            else:
                causal = all(k < SEEN * n for k in sees) if sees else self.recurrent == "one-way"
            leaked = (
                causal
                and self.recurrent != "bidirectional"
                and ids.data_ptr() in self.embedded
                and (target.numel() == b * t or _first_positions(loss, t, time_first))
            )
            return {
                "leaked": leaked,
                "form": "twice",
                "positions": n_two,
                "twice": twice,
                "call": call,
            }
        if repeated > n / 2 or max(shifted, unshifted) < SHIFTED * n:  # no language model's
            return {"leaked": False}
        ahead = self._sees(logits, given, supervised, time_first, like)
        if shifted < SHIFTED * n:  # each position's own id: leaked where no read (nor the
            # gradient) sees ahead, embedded as given (a model may shift its ids itself, a BOS
            # put before them), and no RNN (an encoder's, say, that read the ids) unless the
            # gradient shows the model causal
            if ahead is None and not sees:
                return {"leaked": False}  # (the other layout may have the reads)
            causal = not ahead[0] if ahead is not None else all(k < SEEN * n for k in sees)
            leaked = (
                causal
                and ids.data_ptr() in self.embedded
                and (not self.recurrent or ahead is not None)
            )
            return {
                "leaked": leaked,
                "form": "here",
                "positions": n,
                "same": unshifted,
                "call": call,
            }
        if sees:  # (a recurrent decoder is causal, whatever its attention over a source)
            read = all(k >= SEEN * n for k in sees) and self.recurrent != "one-way"
        else:
            read = self.recurrent == "bidirectional"
        leaked = read if ahead is None else ahead[0]  # (the gradient decides where it can)
        return {
            "read": ahead is not None or bool(sees) or bool(self.recurrent),
            "leaked": leaked,
            "form": "next",
            "positions": n,
            "shifted": shifted,
            "call": call if ahead is None or read else "gradient",
            "share": ahead[1] if ahead is not None else None,
            "ending": endings.first_reading(ended, b),
        }


def _same(ids: torch.Tensor, target: torch.Tensor) -> bool:
    """Whether ``target`` is ``ids``, or a view of all of them (``ids.view(-1)``)."""
    return ids.data_ptr() == target.data_ptr() and ids.numel() == target.numel()


def _as_given(looked_up: Any, ids: torch.Tensor) -> bool:
    """Whether an Embedding looked up ``ids`` themselves, or a view of them of one shape
    (``ids.view(-1, T)``, ``ids.t()``): the same memory from the same place; or a copy in
    another integer type (``ids.long()`` of int32 ids), read by value (one host read)."""
    if not isinstance(looked_up, torch.Tensor):
        return False
    if looked_up.shape == ids.shape and looked_up.dtype != ids.dtype:
        return looked_up.device == ids.device and torch.equal(looked_up, ids.to(looked_up.dtype))
    return (
        looked_up.shape in (ids.shape, ids.shape[::-1]) and looked_up.data_ptr() == ids.data_ptr()
    )


def _reduced(node: Any, loss: Any, depth: int = 0) -> bool:
    """Whether ``node`` is the loss's node ``loss``, or its mean or sum, times a mask or over a
    count (a loss of ``reduction="none"`` masked and averaged), or it plus terms that are no
    other classification loss (a z-loss, a mixture of experts' balance term, a penalty):
    through at most ``REDUCING`` nodes. A sum with another cross-entropy (a multi-token model's
    head for the token after the next beside its next-token loss) is not."""
    if node is loss:
        return True
    if node is None or depth >= REDUCING:
        return False
    name = type(node).__name__
    inputs = [n for n, _ in node.next_functions if n is not None]
    if REDUCTIONS.fullmatch(name):
        return len(inputs) == 1 and _reduced(inputs[0], loss, depth + 1)
    if TERMS.fullmatch(name) and len(inputs) == 2:
        ours = [n for n in inputs if _reduced(n, loss, depth + 1)]
        return len(ours) == 1 and not _classifies(next(n for n in inputs if n is not ours[0]))
    return False


CLASSIFIES = ("NllLoss", "BinaryCrossEntropy")


def _classifies(node: Any) -> bool:
    """Whether a cross-entropy, NLL or binary cross-entropy loss is among the ``4 * REDUCING``
    autograd nodes nearest ``node``, walking back."""
    return any(type(n).__name__.startswith(CLASSIFIES) for n in _nearest(node, 4 * REDUCING))


def _first_positions(loss: torch.Tensor, length: int, time_first: bool) -> bool:
    """Whether the ``length - 1`` logit rows of ``loss`` are the model's first positions: a
    slice of the time dim (1 or, ``time_first``, 0) from 0 up to the last of ``length``
    (``logits[:, :-1]``, a loss that shifts), within ``WALKED`` autograd nodes of the loss. A
    model that read a conditioning token and left its position out (``h[:, 1:]``, a boolean
    mask, ``index_select``, ``split``), trained on ids shifted once in the data, has rows one
    position on from its ids', and its targets two on from the ids are the next tokens."""
    for node in _nearest(loss.grad_fn, WALKED):
        if type(node).__name__ == "SliceBackward0" and node._saved_dim == int(not time_first):
            size, end = node._saved_self_sym_sizes[node._saved_dim], node._saved_end
            end = end - 2**64 if end >= 2**63 else end  # (-1 is saved as an unsigned number)
            end = min(end + size if end < 0 else end, size)
            if size == length and node._saved_start == 0 and end == length - 1:
                return True
    return False


def _nearest(node: Any, most: int) -> Iterator[Any]:
    """The autograd nodes nearest ``node`` (itself first), breadth first, at most ``most``."""
    todo = [] if node is None else [node]
    for _ in range(most):
        if not todo:
            return
        node = todo.pop(0)
        yield node
        todo.extend(n for n, _ in node.next_functions if n is not None)


def _rows(target: torch.Tensor, b: int, t: int, time_first: bool) -> torch.Tensor:
    """``target`` as [B, t] rows, flattened from [B, t] or, ``time_first``, from [t, B]."""
    return target.reshape(t, b).t() if time_first else target.reshape(b, t)


def _sdpa_sees_next(args: tuple[Any, ...], kwargs: dict[str, Any]) -> torch.Tensor | None:
    """[..., L - 1] (the mask's leading dims): whether query i of
    ``scaled_dot_product_attention(q, k, v, attn_mask, dropout_p, is_causal)`` may see key
    i + 1, where there are as many keys as queries; else None."""
    query = args[0] if args else kwargs.get("query")
    key = args[1] if len(args) > 1 else kwargs.get("key")
    mask = args[3] if len(args) > 3 else kwargs.get("attn_mask")
    causal = args[5] if len(args) > 5 else kwargs.get("is_causal", False)
    if not isinstance(query, torch.Tensor) or not isinstance(key, torch.Tensor):
        return None
    if not checks.dense(query) or not checks.dense(key):  # (a nested tensor's sizes raise)
        return None
    if query.dim() < 3 or query.shape[-2] != key.shape[-2] or checks.untraceable(query):
        return None
    length = query.shape[-2]
    if causal or mask is None:
        return torch.full((length - 1,), not causal, device=query.device)
    if not isinstance(mask, torch.Tensor) or mask.dim() < 2 or mask.shape[-1] != length:
        return None
    if mask.shape[-2] not in (1, length) or checks.untraceable(mask) or not checks.dense(mask):
        return None
    open_ = mask if mask.dtype == torch.bool else mask > IGNORED
    open_ = open_.expand(*open_.shape[:-2], length, length)  # (a key padding mask: [.., 1, L])
    return open_.diagonal(offset=1, dim1=-2, dim2=-1)  # [..., L - 1]


def _scores_see_next(args: tuple[Any, ...], kwargs: dict[str, Any]) -> torch.Tensor | None:
    """[N, ..., L - 1]: whether query i may see key i + 1 in scores [N, ..., L, L] given to
    a softmax over their last dim (a score above ``IGNORED`` and within ``GAP`` of the
    query's highest); else None."""
    scores = args[0] if args else kwargs.get("input")
    dim = args[1] if len(args) > 1 else kwargs.get("dim")
    if not isinstance(scores, torch.Tensor) or not isinstance(dim, int):
        return None
    if not checks.dense(scores):  # (a nested tensor's sizes raise)
        return None
    if scores.dim() < 3 or dim not in (-1, scores.dim() - 1) or not scores.is_floating_point():
        return None
    if scores.shape[-1] != scores.shape[-2] or checks.untraceable(scores):
        return None
    if not _from_queries_and_keys(scores.grad_fn):
        return None
    scores = scores.detach()
    nxt = scores.diagonal(offset=1, dim1=-2, dim2=-1)  # [N, ..., L - 1]
    top = scores[..., :-1, :].amax(-1)  # [N, ..., L - 1]: each query's highest score
    return (nxt > IGNORED) & (nxt > top - GAP)


VIEWS = re.compile(r"(T|Transpose|View|UnsafeView|Permute|Expand|Squeeze|Unsqueeze)Backward\d")
MATMULS = ("BmmBackward0", "MmBackward0", "AddmmBackward0", "BaddbmmBackward0")
PASSED = 12
"""Autograd nodes looked through, from a softmax's input back to the product that made it."""


def _from_queries_and_keys(node: Any) -> bool:
    """Whether scores were made (through views, scaling, masks, biases, a soft cap) by a
    product of two computed tensors, queries and keys, rather than by a layer's weight (a
    vocabulary's logits, from a Linear: a softmax over them as long as the sequence is no
    attention). Walks at most ``PASSED`` nodes, stopping at each path's first product."""
    todo, seen = [node], 0
    while todo and seen < PASSED:
        node = todo.pop(0)
        seen += 1
        if node is None:
            continue
        name = type(node).__name__
        if name in MATMULS:
            inputs = [n for n, _ in node.next_functions if n is not None]
            if name.startswith(("Addmm", "Baddbmm")):
                inputs = inputs[1:]  # (the added term)
            if len(inputs) == 2 and not any(_weight(n) for n in inputs):
                return True
            continue
        todo.extend(n for n, _ in node.next_functions if n is not None)
    return False


def _weight(node: Any) -> bool:
    """A parameter, or a view of one (``weight.t()``): a leaf's gradient accumulated."""
    for _ in range(3):
        name = type(node).__name__
        if name == "AccumulateGrad":
            return True
        inputs = [n for n, _ in node.next_functions if n is not None]
        if len(inputs) != 1 or not VIEWS.fullmatch(name):
            return False
        node = inputs[0]
    return False


def _per_row(nxt: torch.Tensor, b: int) -> torch.Tensor | None:
    """[B, L - 1] of ``nxt`` [..., L - 1] (any head sees): a mask without a batch dim holds
    for every row; a first dim of B x H (``nn.MultiheadAttention``'s) is split by B."""
    if nxt.dim() == 1:
        return nxt.expand(b, -1)
    rows = nxt.reshape(nxt.shape[0], -1, nxt.shape[-1])  # [N, *, L - 1]
    n = rows.shape[0]
    if n == b:
        return rows.any(1)
    if n == 1:
        return rows.any(1).expand(b, -1)
    if n % b == 0:
        return rows.reshape(b, -1, rows.shape[-1]).any(1)
    return None


def targets_not_shifted(steps: int, judged: int, example: dict[str, Any], loss: float) -> Finding:
    """``steps`` of ``judged`` sampled steps trained a causal model (no attention read let a
    position see the next) on targets that are its own input ids (``example``: the first
    step's reading); ``loss``: the median of the run's last quarter."""
    return Finding(
        "targets-not-shifted",
        "error",
        f"the targets are the input ids themselves, not shifted by one ({example['same']} of "
        f"{example['positions']} targets are the id at their own position) while the model's "
        f"attention is causal, on {steps} of {judged} sampled steps, and the loss fell to "
        f"{loss:.3g}: each position is trained to repeat the token it reads, and the model "
        "never learns to predict the next token",
        evidence={
            "steps": steps,
            "judged_steps": judged,
            "read_by": example["call"],
            "positions": example["positions"],
            "targets_own_id": example["same"],
            "last_quarter_loss": loss,
        },
    )


def targets_shifted_twice(steps: int, judged: int, example: dict[str, Any]) -> Finding:
    """``steps`` of ``judged`` sampled steps trained a causal model on the ids two positions on
    (``example``: the first step's reading): the step's loss, embedded ids as given."""
    return Finding(
        "targets-shifted-twice",
        "warning",
        f"each position is trained on the token two places on, not the next ({example['twice']} "
        f"of {example['positions']} targets are the input id two positions after their own), "
        f"on {steps} of {judged} sampled steps: labels shifted by one and then again by the loss "
        "(a transformers causal LM shifts labels= itself) teach the model to skip a token, and "
        "generation, which asks it for the next one, goes wrong; unless the token after the "
        "next is what this model is for (a draft head, a forecast two steps ahead)",
        evidence={
            "steps": steps,
            "judged_steps": judged,
            "read_by": example["call"],
            "positions": example["positions"],
            "targets_two_on": example["twice"],
        },
    )


def causal_mask_missing(steps: int, judged: int, example: dict[str, Any]) -> Finding:
    """``steps`` of ``judged`` sampled steps trained a language model whose attention (or
    RNN, or another layer, read by the gradient) let each position see the token it predicts
    (``example``: the first step's reading)."""
    share = example.get("share")
    how = {
        "scaled_dot_product_attention": "scaled_dot_product_attention runs without is_causal=True "
        "or a mask hiding later keys",
        "softmax": "the attention scores given to the softmax are not masked above the diagonal",
        "rnn": "its RNN is bidirectional: each position's state has read the rest of the sequence",
        "gradient": f"the gradient of a position's logits reaches the embedding of the next token "
        f"at {share or 0:.2g} of the most it reaches at its own or an earlier one, so a layer "
        "reads later tokens (a convolution padded on both sides, padding=k // 2 or 'same', or "
        "a dilated one without the trim of its right end; a mixing over time without a "
        "triangular mask; an attention layer left unmasked)",
    }[example["call"]]
    gradient = {} if share is None else {"next_token_gradient_share": round(share, 4)}
    return Finding(
        "causal-mask-missing",
        "error",
        f"the model is trained to predict each next token ({example['shifted']} of "
        f"{example['positions']} targets are the input id one position on) while each position "
        f"can see the token it is to predict, on {steps} of {judged} sampled steps: {how}; "
        "the model learns to copy, its loss falls near 0, and generation, one token at a time, "
        "has no later token to copy",
        evidence={
            "steps": steps,
            "judged_steps": judged,
            "read_by": example["call"],
            "positions": example["positions"],
            "targets_next_id": example["shifted"],
            **gradient,
        },
    )
