"""Bug: probabilities into cross-entropy in the forked processes of a Hogwild run whose script
first trained the shared model itself (cleanly, 60 steps): the children's steps are numbered
after the parent's, and their first ones are still sampled. A third child trains a little,
then lingers (a thread still running), and terminate() must still end it."""

import threading
import time

import torch
import torch.multiprocessing as mp
from torch import nn


def train(rank: int, model: nn.Module, steps: int, bug: bool) -> None:
    torch.set_num_threads(1)
    torch.manual_seed(rank)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for _ in range(steps):
        x = torch.randn(16, 8)
        out = model(x)
        loss = nn.functional.cross_entropy(
            torch.softmax(out, -1) if bug else out, (x[:, 0] > 0).long()
        )
        opt.zero_grad()
        loss.backward()
        opt.step()


def linger(model: nn.Module) -> None:
    train(3, model, 5, False)
    threading.Thread(target=time.sleep, args=(600,)).start()  # keeps the process alive


if __name__ == "__main__":
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
    model.share_memory()
    train(0, model, 60, False)
    children = [mp.Process(target=train, args=(rank, model, 30, True)) for rank in (1, 2)]
    children.append(mp.Process(target=linger, args=(model,)))
    for p in children:
        p.start()
    for p in children[:2]:
        p.join()
    children[2].join(5)  # its target has returned by now; its thread has not
    children[2].terminate()
    children[2].join(10)
    print(f"lingering child ended: {not children[2].is_alive()}")
    if children[2].is_alive():
        children[2].kill()
