"""Data-parallel training over several processes, launched by ``torchrun``.

``torchrun --nproc-per-node P -m treeqa train ...`` starts P copies of the command and gives each
RANK, LOCAL_RANK and WORLD_SIZE. ``fit()`` then joins them into one process group (NCCL on GPUs,
gloo on CPUs), wraps the model in ``DistributedDataParallel`` (which averages the gradients of
every step across processes) and gives each process every P-th batch of the same epoch order
(each process collates only its own): ``batch_size`` is per process, the global batch is P
times it. Process 0 evaluates, writes the run directory and runs the health monitor; the others
train only. Without torchrun nothing here runs and fit() trains in one process as before.

A step's gradient is the mean of the P processes' batch-mean gradients, not one mean over every
loss term of the global batch: a tree node in a batch with few labelled nodes weighs more than
one in a batch with many, as it would in one process that accumulated P batches of
``batch_size``, each its own mean. That is left so on purpose: one process already weighs
its steps this way (every step is one batch's mean, whatever its node count); on SST (batch
25, 2 processes) a node's weight differs from the pooled mean's by 4.7% at the median, 14% at
the 95th percentile (``benchmarks/ddp_node_weights.py``); QANet's loss is a mean over the batch's questions, so batches of equal size
weigh each question alike and only the smaller last batch of a pass differs. Pooling would need
each model's count of loss terms in ``fit()``'s contract and one more collective every step.
The logged training loss is process 0's batch means.
"""

from __future__ import annotations

import atexit
import itertools
import os
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

T = TypeVar("T")


@dataclass(frozen=True)
class World:
    """This process's place among the processes torchrun started (one process: rank 0 of 1)."""

    rank: int = 0
    size: int = 1
    local_rank: int = 0

    @classmethod
    def from_env(cls) -> World:
        """torchrun's variables; one set by hand (a WORLD_SIZE left in a job's environment)
        that does not fit is a ValueError naming it."""
        size = env_int("WORLD_SIZE", "1")
        if size <= 1:
            return cls()
        if "RANK" not in os.environ:
            raise ValueError(
                f"WORLD_SIZE={size} without RANK: torchrun sets both; unset WORLD_SIZE to run "
                "one process"
            )
        return cls(env_int("RANK"), size, env_int("LOCAL_RANK", "0"))

    @property
    def main(self) -> bool:
        """The process that evaluates and writes (rank 0)."""
        return self.rank == 0


def env_int(name: str, default: str = "") -> int:
    """The whole number in environment variable ``name`` (``default`` when it is not set)."""
    text = os.environ.get(name, default)
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"{name}={text!r}: expected a whole number") from None


class PeerLost(ConnectionError):
    """Another process of the run stopped (killed, out of memory, failed), so this one cannot
    go on: its collectives fail where they waited for that process."""


def peer_lost(err: RuntimeError, world: World) -> PeerLost | None:
    """``err`` as a PeerLost when it is a failed collective (gloo's "Connection reset by peer",
    an aborted NCCL communicator) in a run of several processes; otherwise None."""
    text = str(err)
    if world.size <= 1 or not (isinstance(err, dist.DistError) or "gloo" in text or "NCCL" in text):
        return None
    reason = text.split(". ")[0].split("] ", 1)[-1]  # gloo's source location and advice cut
    return PeerLost(
        f"process {world.rank} of {world.size}: another process of this run stopped (killed, "
        f"out of memory or failed: its own output says which), so this one cannot go on "
        f"({reason}). The run directory keeps its last checkpoint: once the cause is fixed, "
        "the same torchrun command with --resume RUN_DIR goes on from there"
    )


_control: Any = None
"""A gloo group for the loop's own messages (stop flags, dev metrics): on the host, so that
agreeing to go on after a step never waits for the GPU to finish its queued work."""


def join(world: World, device: torch.device) -> torch.device:
    """Join the process group (once) and return this process's device: its own GPU on CUDA."""
    global _control
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", world.local_rank)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
        _control = dist.new_group(backend="gloo") if device.type == "cuda" else None
        # Leave the group before interpreter shutdown (torch's advice), not during it.
        atexit.register(_leave)
    return device


LEAVE_WAIT_S = 0.1
"""Seconds the GIL is left free before the group is destroyed at exit. torch before 2.8 holds
the GIL while it destroys a gloo group, which joins the group's worker threads; one of them
that still holds the last collective's tensor needs the GIL to free it, so the two wait on
each other for ever (on torch 2.4.1, a process hung at exit in 2 of 8 runs of 2 processes
without the wait)."""


def _leave() -> None:
    if dist.is_initialized():
        time.sleep(LEAVE_WAIT_S)
        dist.destroy_process_group()


def wrap(model: nn.Module, device: torch.device) -> nn.Module:
    """``model`` under DistributedDataParallel; its weights are rank 0's from here on."""
    sparse = [
        name
        for name, m in model.named_modules()
        if isinstance(m, nn.Embedding) and m.sparse and m.weight.requires_grad
    ]
    if sparse and device.type == "cuda":
        raise ValueError(
            f"{', '.join(sparse)}: NCCL cannot average sparse gradients; train with "
            "--model.sparse_embedding=false on several GPUs"
        )
    ids = [device.index] if device.type == "cuda" else None
    # A model whose steps leave some weights unused (QANet's stochastic depth) says so; DDP
    # then looks for them after every forward (a graph walk, and a warning where none are).
    unused = bool(getattr(model, "skips_weights", False))
    return DistributedDataParallel(model, device_ids=ids, find_unused_parameters=unused)


def shard(batches: Iterable[T], world: World, start: int = 0) -> Iterator[T]:
    """This process's batches from its ``start``-th on (a run resumed part-way through an
    epoch): the rank-th of every ``world.size`` in a row. A last, incomplete round is dropped,
    so every process takes the same number of steps (a process with one step more would wait
    forever for the others to average its gradients). An epoch given as a sequence
    (``data.collated.Collated``, a list) is read at this process's positions from ``start``
    only, so each batch is collated by the one process that trains on it, and none that a
    resumed run skips."""
    if isinstance(batches, Sequence):
        rounds = len(batches) // world.size
        return (batches[r * world.size + world.rank] for r in range(start, rounds))
    return itertools.islice(_every_nth(batches, world), start, None)


def _every_nth(batches: Iterable[T], world: World) -> Iterator[T]:
    round_: list[T] = []
    for batch in batches:
        round_.append(batch)
        if len(round_) == world.size:
            yield round_[world.rank]
            round_ = []


def largest(value: int) -> int:
    """The largest of the processes' ``value``s, on every process."""
    box = torch.tensor([value], dtype=torch.int64)
    dist.all_reduce(box, op=dist.ReduceOp.MAX, group=_control)
    return int(box.item())


def any_stop(stop: bool) -> bool:
    """True on every process when any of them wants to stop (a time budget, a health error)."""
    return bool(largest(int(stop)))


def from_main(value: Any, world: World) -> Any:
    """Process 0's ``value`` on every process (e.g. the dev metrics only it computed)."""
    box = [value if world.main else None]
    dist.broadcast_object_list(box, src=0, group=_control)
    return box[0]
