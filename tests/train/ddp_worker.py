"""One process of the data-parallel test (started by torchrun, or as torchrun starts it, from
``test_distributed.py``).

Trains a small Tree-LSTM (no dropout, sparse word-vector gradients) through ``fit()`` on
fixed batches of the demo treebank and saves this process's final weights, the batches it
took and the batches it collated as ``OUT/rank{R}.safetensors``. With ``--sigterm-at S``, process 1 sends itself SIGTERM
at step S and each process saves only the step it stopped at, as ``OUT/rank{R}.stop``. With
``--kill-at S``, process 1 kills itself with SIGKILL at step S and process 0 saves the error
its next step raises, as ``OUT/rank0.lost``.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import save_file

from treeqa.data.batching import TreeBatch, collate, encode
from treeqa.data.collated import Collated
from treeqa.data.demo import demo_splits
from treeqa.data.vocab import Vocab
from treeqa.models.tree_lstm import TreeLSTM, TreeLSTMConfig
from treeqa.train.callbacks import StopOnSignal
from treeqa.train.distributed import PeerLost, World
from treeqa.train.loop import Callback, Interrupted, TrainConfig, TrainState, fit
from treeqa.train.optim import build_optimizer

BATCHES, BATCH_SIZE = 9, 4  # the ninth batch is an incomplete round for two processes
CONFIG = TrainConfig(epochs=1, lr=0.05, emb_lr=0.5, emb_optim="sgd", weight_decay=1e-4)


def setup() -> tuple[TreeLSTM, torch.optim.Optimizer, Collated[TreeBatch]]:
    """The same model, optimiser and batches (collated when read) in every process and in the
    test."""
    trees = demo_splits()["train"][: BATCHES * BATCH_SIZE]
    vocab = Vocab.build(w for t in trees for w in t.leaves)
    encoded = [encode(t, vocab, "fine") for t in trees]
    groups = [np.arange(s, s + BATCH_SIZE) for s in range(0, len(encoded), BATCH_SIZE)]
    batches = Collated(groups, lambda group: collate([encoded[i] for i in group]))
    torch.manual_seed(0)
    config = TreeLSTMConfig(embed_dim=6, hidden_dim=5, dropout=0.0, sparse_embedding=True)
    model = TreeLSTM(config, len(vocab))
    return model, build_optimizer(model, CONFIG), batches


class Taken(Callback):
    def __init__(self, batches: list[TreeBatch]):
        self.batches, self.taken = batches, []

    def on_batch_start(self, state: TrainState, batch: TreeBatch) -> None:
        same = [
            b.words.shape == batch.words.shape and torch.equal(b.words, batch.words)
            for b in self.batches
        ]  # fit() moved it to the device: a copy
        self.taken.append(same.index(True))


class SignalAt(Callback):
    """Process 1 sends itself ``signum`` at the end of step ``step``."""

    def __init__(self, step: int, signum: int = signal.SIGTERM):
        self.step, self.signum = step, signum

    def on_step_end(self, state: TrainState, output: object, batch: object) -> None:
        if World.from_env().rank == 1 and state.step == self.step:
            os.kill(os.getpid(), self.signum)


def main(out: Path, sigterm_at: int = 0, kill_at: int = 0) -> None:
    model, optimizer, batches = setup()
    taken = Taken(list(batches))
    if kill_at:
        try:
            fit(
                model,
                optimizer,
                lambda epoch: batches,
                CONFIG,
                callbacks=[SignalAt(kill_at, signal.SIGKILL)],
            )
        except PeerLost as lost:
            (out / "rank0.lost").write_text(str(lost))
        return
    if sigterm_at:
        stopper = [SignalAt(sigterm_at), StopOnSignal()]  # stops after the step it was sent in
        try:
            fit(model, optimizer, lambda epoch: batches, CONFIG, callbacks=stopper)
        except Interrupted as stop:
            (out / f"rank{World.from_env().rank}.stop").write_text(f"{stop.signum} {stop.step}")
        return
    collated: list[int] = []

    def collate_counted(group: np.ndarray) -> TreeBatch:
        collated.append(int(group[0]) // BATCH_SIZE)
        return batches.collate(group)

    counted = Collated(batches.groups, collate_counted)
    fit(model, optimizer, lambda epoch: counted, CONFIG, callbacks=[taken])
    tensors = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    tensors["taken"] = torch.tensor(taken.taken)
    tensors["collated"] = torch.tensor(collated)
    save_file(tensors, str(out / f"rank{World.from_env().rank}.safetensors"))


if __name__ == "__main__":
    option = dict(zip(sys.argv[2::2], map(int, sys.argv[3::2]), strict=True))
    main(Path(sys.argv[1]), option.get("--sigterm-at", 0), option.get("--kill-at", 0))
