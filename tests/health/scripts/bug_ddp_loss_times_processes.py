"""Bug: DistributedDataParallel over 2 processes (gloo, CPU), each its share of the data, whose
mean cross-entropy is multiplied by the number of processes before its backward, "to undo
DDP's average": the average of the processes' doubled means is twice the whole batch's mean
gradient (the factor is right only for a sum divided by every process's targets). Run under
torchrun."""

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

dist.init_process_group("gloo")
torch.manual_seed(0)
x = torch.randn(1024, 16)
data = TensorDataset(x, (x[:, 0] > 0).long())
sampler = DistributedSampler(data, shuffle=True, seed=0)
loader = DataLoader(data, batch_size=16, sampler=sampler)
model = DistributedDataParallel(nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 2)))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
for epoch in range(2):
    sampler.set_epoch(epoch)
    for xb, yb in loader:
        loss = nn.functional.cross_entropy(model(xb), yb) * dist.get_world_size()  # bug
        opt.zero_grad()
        loss.backward()
        opt.step()
dist.barrier()  # every process here before the group goes (gloo aborted at exit without)
dist.destroy_process_group()
