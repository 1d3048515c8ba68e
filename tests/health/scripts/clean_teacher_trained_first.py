"""Clean: a teacher trained first, then distilled into a student with an optimiser of its own,
run under no_grad; the teacher keeps the gradients of its last step, which no optimiser steps
any more."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
teacher = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 5))
student = nn.Sequential(nn.Linear(20, 16), nn.ReLU(), nn.Linear(16, 5))
x = torch.randn(2048, 20)
y = x[:, :5].argmax(1)
teacher_opt = torch.optim.SGD(teacher.parameters(), lr=0.05, momentum=0.9)
for _step in range(60):
    i = torch.randint(0, 2048, (32,))
    loss = F.cross_entropy(teacher(x[i]), y[i])
    teacher_opt.zero_grad()
    loss.backward()
    teacher_opt.step()
teacher.eval()
opt = torch.optim.Adam(student.parameters(), lr=1e-3)
for _step in range(100):
    i = torch.randint(0, 2048, (32,))
    with torch.no_grad():
        soft = (teacher(x[i]) / 2).softmax(-1)
    loss = F.cross_entropy(student(x[i]), soft)
    opt.zero_grad()
    loss.backward()
    opt.step()
print("done")
