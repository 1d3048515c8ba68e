"""Bug: one optimiser over a teacher and a student; the teacher is trained first, then run under
no_grad as the student's teacher, while only the student's gradients are cleared
(``student.zero_grad()``): the teacher's last gradients stay, and every step of the optimiser
applies them again, so the teacher drifts away from what it learnt."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
teacher = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 5))
student = nn.Sequential(nn.Linear(20, 16), nn.ReLU(), nn.Linear(16, 5))
opt = torch.optim.SGD([*teacher.parameters(), *student.parameters()], lr=0.05, momentum=0.9)
x = torch.randn(2048, 20)
y = x[:, :5].argmax(1)
for _step in range(60):
    i = torch.randint(0, 2048, (32,))
    loss = F.cross_entropy(teacher(x[i]), y[i])
    opt.zero_grad()
    loss.backward()
    opt.step()
teacher.eval()
for _step in range(100):
    i = torch.randint(0, 2048, (32,))
    with torch.no_grad():
        soft = (teacher(x[i]) / 2).softmax(-1)
    loss = F.cross_entropy(student(x[i]), soft)
    student.zero_grad()  # bug: opt.zero_grad(), or the teacher's p.grad = None
    loss.backward()
    opt.step()
print("done")
