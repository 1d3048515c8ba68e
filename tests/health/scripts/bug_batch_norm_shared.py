"""Bug: the batch norm that standardises the raw features (lab values around 40, spread 15)
called again after the first hidden layer: in training each call normalises by its own batch,
but the running statistics blend the raw features' and the layer's, and the model evaluated
in eval mode normalises both places by that blend."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
centres = torch.randn(4, 24) * 0.7
y = torch.randint(0, 4, (3000,))
x = (centres[y] + torch.randn(3000, 24)) * 15 + 40  # raw measurements


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.BatchNorm1d(24)
        self.hidden = nn.Linear(24, 24)
        self.head = nn.Sequential(nn.Linear(24, 64), nn.ReLU(), nn.Linear(64, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.norm(x)
        x = F.relu(self.norm(self.hidden(x)))  # bug: the same norm again
        return self.head(x)


model = Net()
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
for epoch in range(6):
    model.train()
    order = torch.randperm(2000)
    for i in range(0, 2000, 64):
        rows = order[i : i + 64]
        loss = F.cross_entropy(model(x[rows]), y[rows])
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    with torch.no_grad():
        accuracy = (model(x[2000:]).argmax(1) == y[2000:]).float().mean().item()
    print(f"epoch {epoch}: held-out accuracy {accuracy:.3f} (eval mode)")
model.train()
with torch.no_grad():
    batch_stats = (model(x[2000:]).argmax(1) == y[2000:]).float().mean().item()
print(f"the same examples in train mode: {batch_stats:.3f}")
