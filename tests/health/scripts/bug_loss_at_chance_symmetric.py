"""Bug: a CLIP-style dual encoder trained with the symmetric contrastive loss,
``(cross_entropy(logits, i) + cross_entropy(logits.T, i)) / 2``, whose image and text halves
are drawn by two separate permutations: no pair in a batch belongs together, and the loss
stays at log(batch size) = log(64), the chance level of either direction."""

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
        self.logit_scale = nn.Parameter(torch.tensor(math.log(1 / 0.07)))  # CLIP's start

    def forward(self, image, text):  # [B, 64], [B, 48] -> [B, B]
        i = F.normalize(self.image(image), dim=-1)
        t = F.normalize(self.text(text), dim=-1)
        return self.logit_scale.exp().clamp(max=100) * i @ t.T


model = DualEncoder()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1)
pairs = torch.arange(B)  # the i-th image goes with the i-th text
for _ in range(300):
    image = images[torch.randperm(N)[:B]]
    text = texts[torch.randperm(N)[:B]]  # bug: the image's permutation must pick its text
    logits = model(image, text)
    loss = (F.cross_entropy(logits, pairs) + F.cross_entropy(logits.T, pairs)) / 2
    opt.zero_grad()
    loss.backward()
    opt.step()
print(round(loss.item(), 3))
