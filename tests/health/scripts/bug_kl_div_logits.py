"""Bug: a distillation loss given the student's temperature-scaled logits where kl_div wants
log-probabilities as its input (log_softmax forgotten): kl_div computes sum q (log q - s),
which falls without bound as the student's logit of the teacher's likely class grows."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
T = 4.0
teacher = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 5)).eval()
student = nn.Sequential(nn.Linear(20, 16), nn.ReLU(), nn.Linear(16, 5))
opt = torch.optim.Adam(student.parameters(), lr=1e-3)
for _step in range(60):
    x = torch.randn(32, 20)
    y = teacher(x).argmax(1).detach()
    with torch.no_grad():
        soft = F.softmax(teacher(x) / T, dim=-1)  # [32, 5]
    logits = student(x)
    distill = F.kl_div(logits / T, soft, reduction="batchmean") * T * T  # bug: no log_softmax
    loss = 0.9 * distill + 0.1 * F.cross_entropy(logits, y)
    opt.zero_grad()
    loss.backward()
    opt.step()
print("done")
