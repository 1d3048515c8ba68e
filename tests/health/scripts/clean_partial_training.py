"""Clean: a linear probe (backbone under no_grad inside forward, only the head given to the
optimiser) with an auxiliary head used every 5th step and a frozen teacher for distillation."""

import torch
from torch import nn
from torch.nn import functional as F


class Probe(nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone = nn.Sequential(nn.Linear(32, 64), nn.ReLU())
        self.head = nn.Linear(64, 5)
        self.aux = nn.Linear(64, 1)  # trained on some steps only

    def forward(self, x, with_aux=False):
        with torch.no_grad():
            feats = self.backbone(x)  # [B, 64]
        return self.head(feats), (self.aux(feats).squeeze(-1) if with_aux else None)


torch.manual_seed(0)
model = Probe()
teacher = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 5)).eval()
teacher.requires_grad_(False)
opt = torch.optim.SGD([*model.head.parameters(), *model.aux.parameters()], lr=0.05)
for step in range(100):
    x = torch.randn(32, 32)
    with torch.no_grad():
        soft = F.softmax(teacher(x) / 2.0, -1)
    logits, aux = model(x, with_aux=step % 5 == 4)
    loss = F.cross_entropy(logits, x[:, :5].argmax(1)) + F.kl_div(
        F.log_softmax(logits / 2.0, -1), soft, reduction="batchmean"
    )
    if aux is not None:
        loss = loss + F.mse_loss(aux, x[:, 0])
    opt.zero_grad()
    loss.backward()
    opt.step()
print("done")
