"""Clean: an auxiliary head whose loss is switched on after a warm-up of 150 steps (one
optimiser for every parameter): its parameters get no gradient for the first 150 steps."""

import torch
from torch import nn
from torch.nn import functional as F


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(20, 64), nn.ReLU())
        self.main = nn.Linear(64, 4)
        self.aux = nn.Linear(64, 2)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.body(x)  # [B, 64]
        return self.main(h), self.aux(h)


torch.manual_seed(0)
model = Net()
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
for step in range(200):
    x = torch.randn(32, 20)
    out, aux = model(x)
    loss = F.cross_entropy(out, x[:, :4].argmax(1))
    if step >= 150:
        loss = loss + 0.3 * F.cross_entropy(aux, (x[:, 0] > 0).long())
    opt.zero_grad()
    loss.backward()
    opt.step()
print("done")
