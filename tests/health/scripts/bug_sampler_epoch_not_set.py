"""Bug: a DistributedSampler that shuffles, and no sampler.set_epoch(epoch): its shuffle is
seeded by the epoch, so every epoch visits the data in the same order (one process here:
num_replicas=1 needs no process group)."""

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

torch.manual_seed(0)
x = torch.randn(512, 20)
data = TensorDataset(x, x[:, :5].argmax(1))
sampler = DistributedSampler(data, num_replicas=1, rank=0, shuffle=True)
loader = DataLoader(data, batch_size=32, sampler=sampler)
model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 5))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
for _epoch in range(4):  # sampler.set_epoch(epoch) forgotten
    for inputs, labels in loader:
        loss = F.cross_entropy(model(inputs), labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
print("done")
