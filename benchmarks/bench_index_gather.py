"""Rows gathered as ``x[idx]`` against ``x.index_select(0, idx)`` on a CPU, side by side.

The backward of ``x[idx]`` scatters the gradient back with an accumulating ``index_put_``; that
of ``index_select`` with ``index_add_``. Timed alone (forward and backward of 20,000 rows of 64
from 2,000) and in a two-layer graph network that gathers its messages along 20,000 edges
(``tests/health/scripts/bug_hot_op_index_gather.py``), the two ways alternated ``--repeats``
times. The doctor's ``hot-op`` advice for an indexing family led by ``index_put_`` cites it.

    python benchmarks/bench_index_gather.py --repeats 3
"""

from __future__ import annotations

import argparse
import time

import torch
from torch import nn

N, E = 2000, 20000


def gather(rows: torch.Tensor, index: torch.Tensor, select: bool) -> torch.Tensor:
    return rows.index_select(0, index) if select else rows[index]


class Conv(nn.Module):
    def __init__(
        self, d_in: int, d_out: int, edges: tuple[torch.Tensor, torch.Tensor], select: bool
    ):
        super().__init__()
        self.message, self.root = nn.Linear(d_in, d_out), nn.Linear(d_in, d_out)
        self.src, self.dst = edges
        self.degree = torch.zeros(N).index_add_(0, self.dst, torch.ones(E)).clamp_min(1)
        self.select = select

    def forward(self, h: torch.Tensor) -> torch.Tensor:  # h [N, d_in]
        sent = gather(self.message(h), self.src, self.select)  # [E, d_out]
        mean = torch.zeros(N, sent.shape[1]).index_add_(0, self.dst, sent) / self.degree[:, None]
        return mean + self.root(h)


def time_gather(select: bool, steps: int = 50) -> float:
    """Milliseconds for one forward and backward of the gather alone."""
    index = torch.randint(0, N, (E,), generator=torch.Generator().manual_seed(0))
    rows = torch.randn(N, 64, requires_grad=True)
    for _ in range(3):
        gather(rows, index, select).sum().backward()
    began = time.perf_counter()
    for _ in range(steps):
        gather(rows, index, select).sum().backward()
    return (time.perf_counter() - began) / steps * 1e3


def time_network(select: bool, steps: int = 50, warmup: int = 10) -> float:
    """Milliseconds per training step of the graph network."""
    g = torch.Generator().manual_seed(0)
    edges = torch.randint(0, N, (E,), generator=g), torch.randint(0, N, (E,), generator=g)
    x = torch.randn(N, 32, generator=g)
    y = (x[:, 0] > 0).long() + 2 * (x[:, 1] > 0).long()
    model = nn.Sequential(Conv(32, 64, edges, select), nn.ReLU(), Conv(64, 4, edges, select))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    for i in range(warmup + steps):
        if i == warmup:
            began = time.perf_counter()
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return (time.perf_counter() - began) / steps * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    print(
        "| repeat | gather x[idx] ms | index_select ms | ratio | network x[idx] ms/step | index_select ms/step | ratio |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for repeat in range(1, args.repeats + 1):
        alone = time_gather(False), time_gather(True)
        network = time_network(False), time_network(True)
        print(
            f"| {repeat} | {alone[0]:.2f} | {alone[1]:.2f} | {alone[0] / alone[1]:.2f}x "
            f"| {network[0]:.2f} | {network[1]:.2f} | {network[0] / network[1]:.2f}x |"
        )


if __name__ == "__main__":
    main()
