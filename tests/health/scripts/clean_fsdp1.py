"""Clean: FullyShardedDataParallel (FSDP1) over 2 CPU processes (gloo), each Linear layer
wrapped by an auto-wrap policy and the whole model by the outer wrapper: one flat parameter
per wrapper, the layers' weights set as views of it for each forward; the optimiser built
after wrapping, each process its part of the data through a DistributedSampler; the second
epoch accumulates two micro-batches a step under no_sync. Run under torchrun."""

import contextlib

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.fsdp import FullyShardedDataParallel
from torch.distributed.fsdp.wrap import ModuleWrapPolicy
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

dist.init_process_group("gloo")
torch.manual_seed(0)
x = torch.randn(1024, 16, generator=torch.Generator().manual_seed(0))
data = TensorDataset(x, (x[:, 0] > 0).long())
sampler = DistributedSampler(data, shuffle=True, seed=0)
loader = DataLoader(data, batch_size=16, sampler=sampler)
layers = [nn.Linear(16, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 2)]
policy = ModuleWrapPolicy({nn.Linear})
model = FullyShardedDataParallel(
    nn.Sequential(*layers), auto_wrap_policy=policy, device_id=torch.device("cpu")
)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
for epoch in range(3):
    sampler.set_epoch(epoch)
    accumulate = 2 if epoch == 1 else 1
    for i, (xb, yb) in enumerate(loader):
        last = (i + 1) % accumulate == 0
        with contextlib.nullcontext() if last else model.no_sync():
            loss = nn.functional.cross_entropy(model(xb), yb) / accumulate
            loss.backward()
        if last:
            opt.step()
            opt.zero_grad()
dist.barrier()  # every process here before the group goes (gloo aborted at exit without)
dist.destroy_process_group()
