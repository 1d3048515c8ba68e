"""Bug: a classifier cast to bfloat16 as a whole (``model.to(torch.bfloat16)``) and stepped by
AdamW at 1e-4. An update below half of bfloat16's spacing at a weight rounds back to it: the
LayerNorm's weights (1.0, spacing 0.0078) never move, nor do most of the Linear weights. After
150 steps its validation accuracy is 0.31, where the same model kept in float32 and run under
bfloat16 autocast reaches 0.46."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
w_true = torch.randn(32, 4)
x = torch.randn(2560, 32)
y = (x @ w_true).argmax(1)
train, val = slice(0, 2048), slice(2048, 2560)

model = nn.Sequential(nn.Linear(32, 64), nn.LayerNorm(64), nn.ReLU(), nn.Linear(64, 4))
model = model.to(torch.bfloat16)  # bug: weights in float32, the forward under autocast
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
for _step in range(150):
    i = torch.randint(0, 2048, (64,))
    loss = F.cross_entropy(model(x[train][i].bfloat16()).float(), y[train][i])
    opt.zero_grad()
    loss.backward()
    opt.step()
with torch.no_grad():
    accuracy = (model(x[val].bfloat16()).argmax(1) == y[val]).float().mean().item()
print(f"loss {loss.item():.3f} validation accuracy {accuracy:.2f}")
