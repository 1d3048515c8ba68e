"""Clean: a classifier whose Linear weights are bfloat16 and whose LayerNorm is kept in float32
(the norm's weights at 1.0 would round its updates away), stepped by AdamW at 1e-2, a rate above
half of bfloat16's spacing at the Linear weights, decayed to 0 by a cosine schedule; half of
the first layer's weights pruned and held at 0 by a mask. Every weight that trains moves."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
w_true = torch.randn(32, 4)
x = torch.randn(2560, 32)
y = (x @ w_true).argmax(1)
train, val = slice(0, 2048), slice(2048, 2560)


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.first = nn.Linear(32, 64).to(torch.bfloat16)
        self.norm = nn.LayerNorm(64)  # float32
        self.last = nn.Linear(64, 4).to(torch.bfloat16)

    def forward(self, x):  # [B, 32] bfloat16
        h = self.norm(self.first(x).float()).relu()
        return self.last(h.bfloat16()).float()


model = Classifier()
mask = (torch.rand(64, 32) < 0.5).to(torch.bfloat16)
opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
schedule = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=150)
for _step in range(150):
    i = torch.randint(0, 2048, (64,))
    loss = F.cross_entropy(model(x[train][i].bfloat16()), y[train][i])
    opt.zero_grad()
    loss.backward()
    opt.step()
    schedule.step()
    with torch.no_grad():
        model.first.weight.mul_(mask)  # pruned weights stay 0
with torch.no_grad():
    accuracy = (model(x[val].bfloat16()).argmax(1) == y[val]).float().mean().item()
print(f"loss {loss.item():.3f} validation accuracy {accuracy:.2f}")
