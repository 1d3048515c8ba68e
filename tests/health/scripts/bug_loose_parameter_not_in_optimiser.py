"""Bug: a CLIP-style dual encoder whose learned temperature, ``logit_scale``, is kept beside
the model in the script: ``model.parameters()`` does not hold it, so the optimiser built from
them leaves it at its start (1/0.07), though it gets a gradient at every step."""

import math

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
N, B = 4096, 64
z = torch.randn(N, 16)  # what an image and its caption share
images = torch.tanh(z @ torch.randn(16, 64)) + 0.3 * torch.randn(N, 64)
texts = torch.tanh(z @ torch.randn(16, 48)) + 0.3 * torch.randn(N, 48)


class DualEncoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.image = nn.Sequential(nn.Linear(64, 128), nn.GELU(), nn.Linear(128, 32))
        self.text = nn.Sequential(nn.Linear(48, 128), nn.GELU(), nn.Linear(128, 32))

    def forward(self, image, text):  # [B, 64], [B, 48] -> [B, B] cosine similarities
        return F.normalize(self.image(image), dim=-1) @ F.normalize(self.text(text), dim=-1).T


model = DualEncoder()
logit_scale = nn.Parameter(torch.tensor(math.log(1 / 0.07)))  # CLIP's start
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)  # bug: [*model.parameters(), logit_scale]
pairs = torch.arange(B)
for _ in range(100):
    pick = torch.randperm(N)[:B]
    logits = logit_scale.exp().clamp(max=100) * model(images[pick], texts[pick])
    loss = (F.cross_entropy(logits, pairs) + F.cross_entropy(logits.T, pairs)) / 2
    opt.zero_grad()
    loss.backward()
    opt.step()
print(round(loss.item(), 3), round(logit_scale.exp().item(), 2))
