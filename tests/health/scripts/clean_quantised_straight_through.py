"""Clean: quantisation-aware training whose rounding passes the gradient straight through
(w + (round(w) - w).detach()), and a binarised layer whose sign does so through an
autograd.Function (BinaryConnect's clipped straight-through estimator): every weight trains.
The inputs are rounded too (data: no gradient)."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)


def fake_quant(x, bits=4):
    top = 2 ** (bits - 1) - 1
    scale = (x.detach().abs().max() / top).clamp(min=1e-8)
    q = torch.clamp(torch.round(x / scale), -top, top) * scale
    return x + (q - x).detach()  # forward: q; backward: the identity


class SignSTE(torch.autograd.Function):
    @staticmethod
    def forward(ctx, w):
        ctx.save_for_backward(w)
        return torch.sign(w)

    @staticmethod
    def backward(ctx, grad):
        (w,) = ctx.saved_tensors
        return grad * (w.abs() <= 1)


class QuantLinear(nn.Linear):
    def forward(self, x):
        return F.linear(x, fake_quant(self.weight), self.bias)


class BinaryLinear(nn.Linear):
    def forward(self, x):
        return F.linear(x, SignSTE.apply(self.weight), self.bias)


x = torch.round(torch.randn(2048, 16) * 4) / 4
y = (x[:, :4] @ torch.randn(4, 3)).argmax(1)
model = nn.Sequential(QuantLinear(16, 64), nn.ReLU(), BinaryLinear(64, 64), nn.ReLU())
model.append(QuantLinear(64, 3))
opt = torch.optim.Adam(model.parameters(), lr=3e-3)
for _step in range(80):
    i = torch.randint(0, 2048, (64,))
    loss = F.cross_entropy(model(x[i]), y[i])
    opt.zero_grad()
    loss.backward()
    opt.step()
print("done")
