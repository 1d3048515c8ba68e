"""Bug: prompt tuning whose optimiser was built over the frozen model, not the soft prompt: the
prompt gets gradients at every step, the optimiser's parameters none, and nothing trains."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)


class Classifier(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(50, 16)
        self.mix = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Dropout(0.1), nn.Linear(32, 16))
        self.out = nn.Linear(16, 2)

    def forward(self, prompt: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        h = torch.cat([prompt.expand(ids.shape[0], -1, -1), self.embed(ids)], 1)
        return self.out(self.mix(h).mean(1))


model = Classifier().eval().requires_grad_(False)  # frozen, dropout off
prompt = nn.Parameter(torch.randn(1, 4, 16) * 0.1)
opt = torch.optim.Adam(model.parameters(), lr=1e-2)  # bug: should be Adam([prompt])
ids = torch.randint(0, 50, (1024, 12))
y = (ids[:, 0] < 25).long()
for _ in range(100):
    i = torch.randint(0, 1024, (32,))
    loss = F.cross_entropy(model(prompt, ids[i]), y[i])
    opt.zero_grad()
    loss.backward()
    opt.step()
print("done")
