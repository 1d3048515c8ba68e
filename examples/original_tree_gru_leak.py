"""The original report's Tree-GRU trainer style, with its leak: "training gets slower every epoch".

One sentence per step, node by node in recursive Python, hidden states kept on the tree objects.
Each node starts from the state it cached on the previous visit (``tree.state``), which still
carries that visit's autograd graph. The first reuse raises "Trying to backward through the
graph a second time", and ``retain_graph=True`` makes the error go away -- so every backward
now also runs through the graphs of all earlier epochs, and step time grows epoch after epoch.
``original_tree_gru_fixed.py`` is the same trainer with the two-line fix.

    python examples/original_tree_gru_leak.py --epochs 6
    treeqa doctor -- python examples/original_tree_gru_leak.py --epochs 6
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import time

import torch
from torch import nn

FIXED = False  # the fixed example flips this


def rss_mb() -> float:
    """Resident memory now (peak where /proc is missing)."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class Tree:
    """A dependency-tree node: word id, children, sentiment label, and the cached hidden state."""

    def __init__(self, word: int, children: list[Tree], label: int):
        self.word, self.children, self.label = word, children, label
        self.state: torch.Tensor | None = None


def random_tree(rng: random.Random, size: int, vocab: int) -> Tree:
    if size == 1:
        return Tree(rng.randrange(vocab), [], rng.randrange(2))
    sizes, left = [], size - 1
    while left:
        k = rng.randint(1, left)
        sizes.append(k)
        left -= k
    children = [random_tree(rng, k, vocab) for k in sizes]
    label = int(sum(c.label for c in children) * 2 >= len(children))
    return Tree(rng.randrange(vocab), children, label)


class DataAdagrad(torch.optim.Optimizer):
    """Adagrad written in the PyTorch 0.3 style of the original code: it updates ``p.data``.

    ``.data`` writes are invisible to autograd's version counter, so backward through a stale
    graph (saved weights from earlier steps) raises no error -- it silently runs, and grows.
    """

    def __init__(self, params, lr: float, weight_decay: float = 0.0):
        super().__init__(params, {"lr": lr, "weight_decay": weight_decay})

    def step(self, closure=None):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                grad = p.grad.data + group["weight_decay"] * p.data
                state = self.state.setdefault(p, {"sum": torch.zeros_like(p.data)})
                state["sum"].addcmul_(grad, grad)
                p.data.addcdiv_(grad, state["sum"].sqrt().add_(1e-10), value=-group["lr"])


class TreeGRU(nn.Module):
    def __init__(self, vocab: int = 500, dim: int = 32):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.cell = nn.GRUCell(2 * dim, dim)
        self.out = nn.Linear(dim, 2)
        self.dim = dim

    def node(self, tree: Tree) -> torch.Tensor:
        w = self.embed.weight[tree.word]  # [D]
        h = (
            tree.state if tree.state is not None else torch.zeros(self.dim)
        )  # warm start from the last visit
        for child in tree.children:
            k = self.node(child)
            h = self.cell(torch.cat([w, k])[None], h[None])[0]
        if not tree.children:
            h = self.cell(torch.cat([w, torch.zeros(self.dim)])[None], h[None])[0]
        tree.state = h.detach() if FIXED else h  # the leak: the cached state keeps its graph
        return h

    def forward(self, tree: Tree) -> torch.Tensor:
        return self.out(self.node(tree))[None]  # [1, 2]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--sentences", type=int, default=40)
    args = parser.parse_args()
    torch.manual_seed(0)
    rng = random.Random(0)
    trees = [random_tree(rng, rng.randint(5, 9), 500) for _ in range(args.sentences)]
    model = TreeGRU()
    optimizer = DataAdagrad(model.parameters(), lr=0.05, weight_decay=1e-4)
    for epoch in range(args.epochs):
        started, steps = time.perf_counter(), []
        for tree in trees:
            t0 = time.perf_counter()
            loss = nn.functional.cross_entropy(model(tree), torch.tensor([tree.label]))
            optimizer.zero_grad()
            loss.backward(retain_graph=not FIXED)  # added to silence "backward a second time"
            optimizer.step()
            steps.append(time.perf_counter() - t0)
        steps.sort()
        print(
            f"epoch {epoch + 1}: {time.perf_counter() - started:.2f} s, "
            f"median step {steps[len(steps) // 2] * 1e3:.2f} ms, RSS {rss_mb():.0f} MB"
        )


if __name__ == "__main__":
    main()
