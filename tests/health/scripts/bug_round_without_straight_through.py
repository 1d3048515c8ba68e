"""Bug: quantisation-aware training by hand whose fake quantisation rounds with torch.round and
no straight-through estimator: round's derivative is zero everywhere, so every weight under it
gets exactly zero gradients and never trains (only the last layer's bias does)."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)


def fake_quant(x, bits=4):
    top = 2 ** (bits - 1) - 1
    scale = (x.detach().abs().max() / top).clamp(min=1e-8)
    return torch.clamp(torch.round(x / scale), -top, top) * scale  # bug: no straight-through


class QuantLinear(nn.Linear):
    def forward(self, x):
        return F.linear(x, fake_quant(self.weight), self.bias)


x = torch.randn(2048, 16)
y = (x[:, :4] @ torch.randn(4, 3)).argmax(1)
model = nn.Sequential(QuantLinear(16, 64), nn.ReLU(), QuantLinear(64, 3))
opt = torch.optim.Adam(model.parameters(), lr=3e-3)
for _step in range(80):
    i = torch.randint(0, 2048, (64,))
    loss = F.cross_entropy(model(x[i]), y[i])
    opt.zero_grad()
    loss.backward()
    opt.step()
print("done")
