"""Bug: processes started with torch.multiprocessing.spawn, as in PyTorch's DDP tutorial, each
with its part of the data, and the model never wrapped in DistributedDataParallel: each process
trains its own. Run as a plain script (python bug_spawn_not_wrapped.py)."""

import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def train(rank: int, world: int, port: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.set_num_threads(1)
    torch.manual_seed(0)  # the same initial weights on each process
    x = torch.randn(1024, 16, generator=torch.Generator().manual_seed(0))
    data = TensorDataset(x, (x[:, 0] > 0).long())
    sampler = DistributedSampler(data, num_replicas=world, rank=rank, seed=0)
    loader = DataLoader(data, batch_size=16, sampler=sampler)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 2))  # the bug: no DDP
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for epoch in range(3):
        sampler.set_epoch(epoch)
        for xb, yb in loader:
            loss = nn.functional.cross_entropy(model(xb), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
    dist.barrier()  # every process here before the group goes (gloo aborted at exit without)
    dist.destroy_process_group()


if __name__ == "__main__":
    import socket

    with socket.socket() as s:  # a free port for the rendezvous
        s.bind(("127.0.0.1", 0))
        port = str(s.getsockname()[1])
    mp.spawn(train, args=(2, port), nprocs=2)
