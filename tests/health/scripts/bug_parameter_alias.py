"""Bug: the reset gate reuses the update gate's layer (the original Tree-GRU's `self.Ur = self.Uz`)."""

import torch
from torch import nn

torch.manual_seed(0)


class GRUCell(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.Wz, self.Wr, self.Wh = nn.Linear(dim, dim), nn.Linear(dim, dim), nn.Linear(dim, dim)
        self.Uz = nn.Linear(dim, dim, bias=False)
        self.Ur = self.Uz  # bug: meant a layer of its own
        self.Uh = nn.Linear(dim, dim, bias=False)

    def forward(self, x, h):
        z = torch.sigmoid(self.Wz(x) + self.Uz(h))
        r = torch.sigmoid(self.Wr(x) + self.Ur(h))
        return z * h + (1 - z) * torch.tanh(self.Wh(x) + self.Uh(r * h))


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.cell = GRUCell(16)
        self.out = nn.Linear(16, 2)

    def forward(self, xs):
        h = torch.zeros(xs.shape[1], 16)
        for x in xs:
            h = self.cell(x, h)
        return self.out(h)


model = Model()
opt = torch.optim.Adagrad(model.parameters(), lr=0.05)
for _step in range(20):
    xs = torch.randn(6, 8, 16)
    loss = nn.functional.cross_entropy(model(xs), (xs[0, :, 0] > 0).long())
    opt.zero_grad()
    loss.backward()
    opt.step()
print("done")
