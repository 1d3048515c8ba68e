"""Clean: AdamW with weight decay over a whole model, LayerNorm and biases included (a choice,
not a slip), whose first layer is frozen from the start while the optimiser keeps it. Its
gradients are zeroed in place (zero_grad(set_to_none=False)), but a parameter frozen before
any backward never gets a gradient to zero, so the optimiser skips it on every step."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
x = torch.randn(3000, 16)
y = torch.arange(3000) % 3
x[torch.arange(3000), y] += 2.0
model = nn.Sequential(
    nn.Linear(16, 32), nn.LayerNorm(32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 3)
)
model[0].requires_grad_(False)  # a fixed random projection (pretrained, in a real run)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1)
start = model[0].weight.clone()
for _ in range(120):
    i = torch.randint(0, 3000, (64,))
    loss = F.cross_entropy(model(x[i]), y[i])
    opt.zero_grad(set_to_none=False)
    loss.backward()
    opt.step()
assert torch.equal(model[0].weight, start)
print(round(loss.item(), 3))
