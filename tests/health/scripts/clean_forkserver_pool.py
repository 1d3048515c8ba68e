"""Clean: jobs a ProcessPoolExecutor runs in processes started by ``forkserver`` (Python 3.14's
default start method), each training a model of its own from logits, zeroing its gradients
before each backward."""

import multiprocessing
from concurrent.futures import ProcessPoolExecutor

import torch
from torch import nn


def job(seed: int) -> float:
    torch.set_num_threads(1)
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for _ in range(100):
        x = torch.randn(32, 8)
        loss = nn.functional.cross_entropy(model(x), (x[:, 0] > 0).long())
        opt.zero_grad()
        loss.backward()
        opt.step()
    return round(loss.item(), 2)


if __name__ == "__main__":
    context = multiprocessing.get_context("forkserver")
    with ProcessPoolExecutor(2, mp_context=context) as pool:
        print("losses", list(pool.map(job, range(2))))
