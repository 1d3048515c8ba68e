"""Clean: layers in nn.ModuleList / nn.ModuleDict / nn.ParameterList, a plain list of handles
on layers the model registers anyway, and a frozen teacher kept in a plain list so that the
student's parameters(), state_dict() and optimiser leave it out (a common way to hide it)."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
teacher = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 3)).requires_grad_(False)


class Student(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(nn.Linear(16 if i == 0 else 32, 32) for i in range(2))
        self.heads = nn.ModuleDict({"main": nn.Linear(32, 3), "aux": nn.Linear(32, 3)})
        self.scales = nn.ParameterList(nn.Parameter(torch.ones(32)) for _ in range(2))
        self.handles = [self.blocks[0], self.heads["main"]]  # handles on registered layers
        self._teacher = [teacher]  # hidden on purpose: frozen, not the student's

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        h = x
        for block, scale in zip(self.blocks, self.scales, strict=True):
            h = torch.relu(block(h)) * scale
        with torch.no_grad():
            soft = self._teacher[0](x).softmax(-1)
        return self.heads["main"](h), self.heads["aux"](h), soft


x = torch.randn(1024, 16)
y = (x[:, :3].sum(1) > 0).long() + (x[:, 3] > 1).long()
model = Student()
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
for _ in range(100):
    i = torch.randint(0, 1024, (32,))
    main, aux, soft = model(x[i])
    loss = F.cross_entropy(main, y[i]) + 0.1 * F.cross_entropy(aux, soft)
    opt.zero_grad()
    loss.backward()
    opt.step()
print(round(loss.item(), 3))
