"""Clean: FSDP2 over 2 CPU processes (gloo): each Linear layer and then the whole model sharded
with fully_shard (DTensor parameters, whole weights gathered for each forward and backward and
freed after), the optimiser built after sharding, each process its part of the data through a
DistributedSampler; the second epoch accumulates two micro-batches a step with gradient
reduction off for the first; an evaluation on every process over its share, the counts summed.
Run under torchrun."""

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.fsdp import fully_shard
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

dist.init_process_group("gloo")
torch.manual_seed(0)
x = torch.randn(1024, 16, generator=torch.Generator().manual_seed(0))
data = TensorDataset(x, (x[:, 0] > 0).long())
sampler = DistributedSampler(data, shuffle=True, seed=0)
loader = DataLoader(data, batch_size=16, sampler=sampler)
valid = TensorDataset(x[:256], data.tensors[1][:256])
valid_loader = DataLoader(valid, batch_size=64, sampler=DistributedSampler(valid, shuffle=False))
model = nn.Sequential(
    nn.Linear(16, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 2)
)
for layer in model:
    if isinstance(layer, nn.Linear):
        fully_shard(layer)
fully_shard(model)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
for epoch in range(3):
    sampler.set_epoch(epoch)
    accumulate = 2 if epoch == 1 else 1
    for i, (xb, yb) in enumerate(loader):
        last = (i + 1) % accumulate == 0
        model.set_requires_gradient_sync(last)
        loss = nn.functional.cross_entropy(model(xb), yb) / accumulate
        loss.backward()
        if last:
            opt.step()
            opt.zero_grad()
    model.eval()
    counts = torch.zeros(2)  # correct, total: this process's share of the set
    with torch.no_grad():
        for xb, yb in valid_loader:
            counts += torch.tensor([(model(xb).argmax(1) == yb).sum().item(), len(yb)])
    dist.all_reduce(counts)
    model.train()
dist.barrier()  # every process here before the group goes (gloo aborted at exit without)
dist.destroy_process_group()
