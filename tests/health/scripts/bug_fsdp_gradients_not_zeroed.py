"""Bug: FSDP2 (fully_shard on each Linear layer and the model, 2 CPU processes, gloo) and
optimizer.zero_grad() never called: each backward adds its reduced gradient into the sharded
gradient already there, so every step uses the sum of the run's gradients. Run under
torchrun."""

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
model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 2))
for layer in model:
    if isinstance(layer, nn.Linear):
        fully_shard(layer)
fully_shard(model)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for xb, yb in loader:  # 32 steps, and no opt.zero_grad() anywhere
    loss = nn.functional.cross_entropy(model(xb), yb)
    loss.backward()
    opt.step()
dist.barrier()  # every process here before the group goes (gloo aborted at exit without)
dist.destroy_process_group()
