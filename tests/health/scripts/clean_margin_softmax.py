"""Clean: a margin softmax head (CosFace: cosine logits scaled by s=30, a margin m=0.35 taken
off the target's), trained with cross_entropy, as face recognition does. The first loss is
far above log(C) by design (the target's logit starts near -s x m, below the others'), not an
output layer that starts too confident: no loss-at-init."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
C, D = 10, 16


class CosFace(nn.Module):
    def __init__(self, s: float = 30.0, m: float = 0.35) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(C, D) * 0.01)
        self.s, self.m = s, m

    def forward(self, embedding: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        cos = F.linear(F.normalize(embedding), F.normalize(self.weight))
        return self.s * (cos - self.m * F.one_hot(labels, C))


protos = torch.randn(C, 20)
backbone = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, D))
head = CosFace()
opt = torch.optim.SGD([*backbone.parameters(), *head.parameters()], lr=0.05, momentum=0.9)
for step in range(200):
    y = torch.randint(0, C, (64,))
    x = protos[y] + 0.5 * torch.randn(64, 20)
    loss = F.cross_entropy(head(backbone(x), y), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step % 50 == 0:
        print(step, round(loss.item(), 3))
