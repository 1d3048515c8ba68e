"""Bug: probabilities into cross-entropy, in tasks a multiprocessing Pool's forked workers run
on a shared model; the pool ends with the ``with`` block, which terminates its workers (a SIGTERM
that may reach a worker while it writes its report)."""

import torch
import torch.multiprocessing as mp
from torch import nn

MODEL = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))


def job(seed: int) -> float:
    torch.set_num_threads(1)
    torch.manual_seed(seed)
    opt = torch.optim.SGD(MODEL.parameters(), lr=0.05)
    for _ in range(60):
        x = torch.randn(16, 8)
        loss = nn.functional.cross_entropy(torch.softmax(MODEL(x), -1), (x[:, 0] > 0).long())
        opt.zero_grad()
        loss.backward()
        opt.step()
    return loss.item()


if __name__ == "__main__":
    MODEL.share_memory()
    with mp.Pool(2) as pool:
        print(pool.map(job, range(4)))
