"""Clean: soft targets written by hand, each normalised over the classes it sums: mixup's
soft-target cross-entropy (timm's SoftTargetCrossEntropy), label smoothing by hand over a
sequence's vocabulary ([B, T, V], log_softmax over the last dim), a distillation against a
teacher's softened probabilities, and a BCE with smoothed labels in [0.05, 0.95]."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
x = torch.randn(4096, 20)
y = (x[:, :5] @ torch.randn(5, 10)).argmax(1)
model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 10))
seq = nn.Sequential(nn.Embedding(50, 32), nn.Linear(32, 50))
teacher = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 10)).eval()
head = nn.Linear(20, 1)
params = [*model.parameters(), *seq.parameters(), *head.parameters()]
opt = torch.optim.SGD(params, lr=0.05, momentum=0.9)
for _step in range(80):
    i = torch.randint(0, 4096, (64,))
    lam = float(torch.distributions.Beta(0.4, 0.4).sample())
    j = torch.randperm(64)
    xb = lam * x[i] + (1 - lam) * x[i][j]
    target = lam * F.one_hot(y[i], 10).float() + (1 - lam) * F.one_hot(y[i][j], 10).float()
    mixup = torch.sum(-target * F.log_softmax(model(xb), dim=-1), dim=-1).mean()
    tokens = torch.randint(0, 50, (8, 12))
    logp = F.log_softmax(seq(tokens[:, :-1]), dim=-1)  # [8, 11, 50]
    smooth = torch.full_like(logp, 0.1 / 49).scatter_(-1, tokens[:, 1:, None], 0.9)
    smoothed = -(smooth * logp).sum(-1).mean()
    with torch.no_grad():
        soft = F.softmax(teacher(x[i]) / 4.0, dim=1)
    distill = -(soft * F.log_softmax(model(x[i]) / 4.0, dim=1)).sum(dim=1).mean() * 16.0
    labels = (x[i, 0] > 0).float() * 0.9 + 0.05
    bce = F.binary_cross_entropy_with_logits(head(x[i]).squeeze(1), labels)
    loss = mixup + smoothed + 0.1 * distill + bce
    opt.zero_grad()
    loss.backward()
    opt.step()
print("done")
