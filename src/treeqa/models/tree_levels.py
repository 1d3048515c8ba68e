"""Level-wise evaluation of tree models: node states written and read by index.

A tree model runs the forest one height at a time (``TreeBatch.levels``): it reads the states
of a level's children, computes the level, and writes its states. Doing this with out-of-place
``index_copy`` makes every level copy the whole [N, S] state table forward and backward, which
costs more than the level's own arithmetic on a CPU. ``LevelStates`` keeps one buffer per
forward pass and one gradient buffer, and tells autograd about each write and read through two
small functions, so each level costs O(L) memory traffic instead of O(N).

Gradient bookkeeping: a read adds its incoming gradient into the gradient buffer at the rows it
read; a write hands back the gradient buffer's rows it wrote (then clears them, so a second
backward through a retained graph starts clean). Writes and reads are chained by a scalar token,
so autograd runs a level's write backward only after every later read has run its own.

Shape letters: N nodes in the forest, L rows in one write or read, S state width.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.autograd.function import FunctionCtx, once_differentiable

from treeqa.data.batching import TreeBatch


class _Buffers:
    """The value and gradient buffers that the autograd functions share."""

    def __init__(self, n: int, width: int, like: torch.Tensor):
        self.value = like.new_zeros(n + 1, width)  # [N + 1, S], never tracked by autograd itself
        self.grad: torch.Tensor | None = None  # [N + 1, S], allocated by the first backward read


class LevelStates:
    """Node states of one forward pass: rows 0..N-1, plus row N, the zero state of "no child"."""

    def __init__(self, n: int, width: int, like: torch.Tensor):
        # The graph (through each function's ctx) holds the buffers, never this object: it holds
        # the token, whose grad_fn holds a ctx, and that cycle would keep every step's graph alive.
        self.buffers = _Buffers(n, width, like)
        self.token = like.new_zeros(())  # orders the writes and reads for autograd

    def write(self, rows: torch.Tensor, states: torch.Tensor) -> None:
        """Store states [L, S] at node rows [L] (each row written once)."""
        # Under autocast a level may come out in another precision than the leaves did.
        states = states.to(self.buffers.value.dtype)
        self.token = _Write.apply(self.token, states, rows, self.buffers)

    def read(self, rows: torch.Tensor) -> torch.Tensor:
        """[L, S] the states at rows [L] (N = zero state); rows may repeat."""
        return _Read.apply(self.token, rows, self.buffers)


class _Write(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx: FunctionCtx,
        token: torch.Tensor,
        states: torch.Tensor,
        rows: torch.Tensor,
        store: _Buffers,
    ) -> torch.Tensor:
        store.value.index_copy_(0, rows, states.detach())
        ctx.store, ctx.rows = store, rows  # type: ignore[attr-defined]
        return token.detach().clone()

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad_token: torch.Tensor) -> tuple[Any, ...]:
        store: _Buffers = ctx.store
        if store.grad is None:  # nothing read these rows with a gradient
            width = store.value.shape[1]
            return grad_token, store.value.new_zeros(ctx.rows.shape[0], width), None, None
        grad = store.grad.index_select(0, ctx.rows)  # [L, S]
        store.grad.index_fill_(0, ctx.rows, 0)
        return grad_token, grad, None, None


class _Read(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx: FunctionCtx, token: torch.Tensor, rows: torch.Tensor, store: _Buffers
    ) -> torch.Tensor:
        ctx.store, ctx.rows = store, rows  # type: ignore[attr-defined]
        return store.value.index_select(0, rows)

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        store: _Buffers = ctx.store
        if store.grad is None:
            store.grad = torch.zeros_like(store.value)
        store.grad.index_add_(0, ctx.rows, grad)
        return grad.new_zeros(()), None, None


def child_slots(batch: TreeBatch, arity: int | None = None) -> torch.Tensor:
    """[N, K] child indices with "no child" (-1) pointing at row N, the zero-state row.

    With ``arity``, K is padded to it (a batch of single leaves has K = 1) and wider nodes
    are an error.
    """
    n = batch.words.shape[0]
    kids = batch.children.masked_fill(batch.children < 0, n)  # [N, K]
    if arity is not None:
        if kids.shape[1] > arity:
            raise ValueError(
                f"this model takes trees with at most {arity} children per node, got "
                f"{kids.shape[1]}; use the Child-Sum Tree-LSTM (--model childsum) for any fan-out"
            )
        if kids.shape[1] < arity:
            kids = torch.cat([kids, kids.new_full((n, arity - kids.shape[1]), n)], 1)
    return kids


def level_children(batch: TreeBatch, kids: torch.Tensor) -> list[torch.Tensor]:
    """For each level above the leaves: [L, K] child slots of its nodes."""
    return [kids.index_select(0, level) for level in batch.levels[1:]]
