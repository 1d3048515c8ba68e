"""Bug: Hogwild training with processes started by ``spawn`` (each a fresh interpreter, as CUDA
needs and as Python 3.14's default ``forkserver`` does too), probabilities fed into
cross-entropy. The started processes train, the script itself does not: their reports make the
script's."""

import torch
import torch.multiprocessing as mp
from torch import nn


def train(rank: int, model: nn.Module, steps: int) -> None:
    torch.set_num_threads(1)
    torch.manual_seed(1 + rank)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for _ in range(steps):
        x = torch.randn(16, 16)
        probs = torch.softmax(model(x), dim=-1)
        loss = nn.functional.cross_entropy(probs, (x[:, 0] > 0).long())  # the bug: probabilities
        opt.zero_grad()
        loss.backward()
        opt.step()


if __name__ == "__main__":
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 2))
    model.share_memory()
    context = mp.get_context("spawn")
    processes = [
        context.Process(target=train, args=(r, model), kwargs={"steps": 50}) for r in range(2)
    ]
    for p in processes:
        p.start()
    for p in processes:
        p.join()
    print("exit codes", [p.exitcode for p in processes])
