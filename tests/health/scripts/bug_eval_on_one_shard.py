"""Bug: DistributedDataParallel over 2 processes (gloo, CPU) whose validation loader shards the
validation set with a DistributedSampler, like the training one, while only process 0 evaluates
(through the module inside the wrapper): its accuracy is that of half the set. Run under
torchrun."""

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

dist.init_process_group("gloo")
x = torch.randn(1280, 16, generator=torch.Generator().manual_seed(0))
data = TensorDataset(x[:1024], (x[:1024, 0] > 0).long())
valid = TensorDataset(x[1024:], (x[1024:, 0] > 0).long())
sampler = DistributedSampler(data, seed=0)
loader = DataLoader(data, batch_size=16, sampler=sampler)
valid_loader = DataLoader(valid, batch_size=64, sampler=DistributedSampler(valid, shuffle=False))
model = DistributedDataParallel(nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 2)))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
for epoch in range(3):
    sampler.set_epoch(epoch)
    for xb, yb in loader:
        loss = nn.functional.cross_entropy(model(xb), yb)
        opt.zero_grad()
        loss.backward()
        opt.step()
    if dist.get_rank() == 0:
        model.eval()
        correct = total = 0
        with torch.no_grad():
            for xb, yb in valid_loader:
                correct += (model.module(xb).argmax(1) == yb).sum().item()
                total += len(yb)
        print(f"epoch {epoch}: accuracy {correct / total:.3f} on {total} examples")
        model.train()
dist.barrier()  # every process here before the group goes (gloo aborted at exit without)
dist.destroy_process_group()
