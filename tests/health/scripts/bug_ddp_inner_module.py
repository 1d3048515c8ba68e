"""Bug: the model is wrapped in DistributedDataParallel, but the loop calls the module inside
the wrapper: no gradient is averaged, and each of the 2 processes (gloo, CPU) trains a model of
its own on its half of the data. Run under torchrun."""

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

dist.init_process_group("gloo")
x = torch.randn(1024, 16, generator=torch.Generator().manual_seed(0))
data = TensorDataset(x, (x[:, 0] > 0).long())
sampler = DistributedSampler(data, shuffle=True, seed=0)
loader = DataLoader(data, batch_size=16, sampler=sampler)
net = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 2))
model = DistributedDataParallel(net)  # broadcasts process 0's weights: all start the same
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
for epoch in range(3):
    sampler.set_epoch(epoch)
    for xb, yb in loader:
        loss = nn.functional.cross_entropy(net(xb), yb)  # the bug: net, not model
        opt.zero_grad()
        loss.backward()
        opt.step()
dist.barrier()  # every process here before the group goes (gloo aborted at exit without)
dist.destroy_process_group()
