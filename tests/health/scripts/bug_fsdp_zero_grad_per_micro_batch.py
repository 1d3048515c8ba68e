"""Bug: FSDP2 (fully_shard on each Linear layer and the model, 2 CPU processes, gloo) with
gradient accumulation over 4 micro-batches and zero_grad inside the micro-batch loop: each
backward's reduced gradient replaces the last, so each step uses the last micro-batch only.
Run under torchrun."""

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.fsdp import fully_shard
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

dist.init_process_group("gloo")
torch.manual_seed(0)
accumulate = 4
x = torch.randn(1024, 16, generator=torch.Generator().manual_seed(0))
data = TensorDataset(x, (x[:, 0] > 0).long())
sampler = DistributedSampler(data, shuffle=True, seed=0)
loader = DataLoader(data, batch_size=8, sampler=sampler)
model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 2))
for layer in model:
    if isinstance(layer, nn.Linear):
        fully_shard(layer)
fully_shard(model)
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
for epoch in range(2):  # 32 optimiser steps
    sampler.set_epoch(epoch)
    for i, (xb, yb) in enumerate(loader):
        opt.zero_grad()  # the bug: inside the micro-batch loop
        (nn.functional.cross_entropy(model(xb), yb) / accumulate).backward()
        if i % accumulate == accumulate - 1:
            opt.step()
dist.barrier()  # every process here before the group goes (gloo aborted at exit without)
dist.destroy_process_group()
