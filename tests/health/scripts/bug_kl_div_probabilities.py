"""Bug: a distillation loss given softmax probabilities where kl_div wants log-probabilities
as its input: the 'divergence' is meaningless (it goes below zero) and the student learns
little from the teacher."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
teacher = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 5)).eval()
student = nn.Sequential(nn.Linear(20, 16), nn.ReLU(), nn.Linear(16, 5))
opt = torch.optim.Adam(student.parameters(), lr=1e-3)
for _step in range(60):
    x = torch.randn(32, 20)
    with torch.no_grad():
        soft = F.softmax(teacher(x) / 2.0, dim=-1)  # [32, 5]
    loss = F.kl_div(F.softmax(student(x) / 2.0, dim=-1), soft, reduction="batchmean")  # bug
    opt.zero_grad()
    loss.backward()
    opt.step()
print("done")
