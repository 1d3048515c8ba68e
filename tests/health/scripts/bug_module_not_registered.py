"""Bug: the hidden layers are kept in a plain list, not an nn.ModuleList, so the model does not
register them: model.parameters() skips them, the optimiser never updates them (they get
gradients all the same), and state_dict() would save the model without them."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inp = nn.Linear(16, 32)
        self.blocks = [nn.Linear(32, 32) for _ in range(3)]  # bug: nn.ModuleList(...)
        self.out = nn.Linear(32, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.inp(x))
        for block in self.blocks:
            h = torch.relu(block(h))
        return self.out(h)


x = torch.randn(1024, 16)
y = (x[:, :3].sum(1) > 0).long() + (x[:, 3] > 1).long()
model = Net()
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
for _ in range(100):
    i = torch.randint(0, 1024, (32,))
    loss = F.cross_entropy(model(x[i]), y[i])
    opt.zero_grad()
    loss.backward()
    opt.step()
print(round(loss.item(), 3), len(model.state_dict()), "tensors saved")
