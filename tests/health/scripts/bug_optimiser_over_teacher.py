"""Bug: distillation whose one optimiser was built over the teacher, not the student: the
teacher runs under no_grad, the student's backward fills gradients that no optimiser applies,
and every step changes nothing."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
teacher = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 5))
student = nn.Sequential(nn.Linear(20, 16), nn.ReLU(), nn.Linear(16, 5))
opt = torch.optim.Adam(teacher.parameters(), lr=1e-3)  # bug: student.parameters()
for _step in range(100):
    x = torch.randn(32, 20)
    with torch.no_grad():
        soft = (teacher(x) / 2).softmax(-1)
    loss = F.cross_entropy(student(x), soft)
    opt.zero_grad()
    loss.backward()
    opt.step()
print("done")
