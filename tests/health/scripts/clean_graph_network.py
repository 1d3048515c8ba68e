"""Clean (speed): a graph network's messages gathered along its edges by ``index_select`` and
summed by ``index_add_``, the forms with no cheaper rewrite on a CPU: indexing leads the step
(44-78% in four runs) as message passing does, which is the network's own work (info, no warning)."""

import torch
from torch import nn

torch.manual_seed(0)
N, E = 2000, 20000
src, dst = torch.randint(0, N, (E,)), torch.randint(0, N, (E,))
x = torch.randn(N, 32)
y = (x[:, 0] > 0).long() + 2 * (x[:, 1] > 0).long()
degree = torch.zeros(N).index_add_(0, dst, torch.ones(E)).clamp_min(1)


class Conv(nn.Module):
    def __init__(self, d_in, d_out):
        super().__init__()
        self.message, self.root = nn.Linear(d_in, d_out), nn.Linear(d_in, d_out)

    def forward(self, h):  # h [N, d_in]
        sent = self.message(h).index_select(0, src)  # [E, d_out]
        mean = torch.zeros(N, sent.shape[1]).index_add_(0, dst, sent) / degree[:, None]
        return mean + self.root(h)


model = nn.Sequential(Conv(32, 64), nn.ReLU(), Conv(64, 4))
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
for _step in range(100):
    loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
print(round(loss.item(), 3))
