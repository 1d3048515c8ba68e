"""Bug: weights that never get a gradient, shrunk by weight decay into subnormal floats, which
the CPU computes many times slower. A Child-Sum-style tree cell's forget gate reads each node's
input through its own weights (``x_f``), but every node it meets is an inner one with no word
(its input zero), as on constituency trees; only the first 150 of the ``h`` layer's 600 outputs
are used. Adagrad's weight decay is those weights' whole gradient: they shrink geometrically
and, within ~50 steps, below float32's smallest normal value (1.2e-38). Steps then slow several-
fold; treeqa's Child-Sum Tree-LSTM ran one SST epoch 1.7x slower this way."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
D = 150


class Cell(nn.Module):
    def __init__(self):
        super().__init__()
        self.x_iou = nn.Linear(D, 3 * D)
        self.x_f = nn.Linear(D, D)
        self.h = nn.Linear(D, 4 * D)
        self.out = nn.Linear(D, 5)

    def forward(self, leaves, inner):  # [B, D] each
        i, o, u = self.x_iou(leaves).chunk(3, -1)
        h = torch.sigmoid(o) * torch.tanh(torch.sigmoid(i) * torch.tanh(u))
        f = torch.sigmoid(self.x_f(inner) + self.h(h)[:, :D])  # inner nodes: no word
        return self.out(f * h)


model = Cell()
opt = torch.optim.Adagrad(model.parameters(), lr=0.1, weight_decay=1e-4)
for _step in range(200):
    x = torch.randn(256, D)
    loss = F.cross_entropy(model(x, torch.zeros_like(x)), x[:, :5].argmax(1))
    opt.zero_grad()
    loss.backward()
    opt.step()
print("done")
