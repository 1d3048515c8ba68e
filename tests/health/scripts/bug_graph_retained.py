"""Bug: each example caches its encoder output on itself without .detach(), keeping the graph."""

import torch
from torch import nn

torch.manual_seed(0)


class Example:
    def __init__(self, i):
        self.features = torch.randn(16)
        self.label = i % 3
        self.encoding = None


encoder = nn.Sequential(nn.Linear(16, 32), nn.Tanh())
head = nn.Linear(32, 3)
model = nn.ModuleDict({"encoder": encoder, "head": head})
opt = torch.optim.SGD(model.parameters(), lr=0.05)
data = [Example(i) for i in range(64)]
for _epoch in range(2):
    for ex in data:
        ex.encoding = encoder(ex.features)  # bug: cached with its graph; use .detach()
        loss = nn.functional.cross_entropy(head(ex.encoding)[None], torch.tensor([ex.label]))
        opt.zero_grad()
        loss.backward()
        opt.step()
print("done")
