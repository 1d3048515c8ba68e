"""Clean: loads that training starts from. The model is initialised and then loaded; a new
head replaces the checkpoint's and is initialised after the load; a teacher of the same shapes
is loaded and runs beside a student trained from scratch; a baseline loaded from the same
checkpoint is scored after training."""

import os
import tempfile

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
direction = torch.randn(20, 1)


def data(n):
    x = torch.randn(n, 20)
    return x, (x @ direction).squeeze(1).gt(0).long()


def make_model(classes=2):
    return nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, classes))


def init_weights(m):
    if isinstance(m, nn.Linear):
        nn.init.xavier_uniform_(m.weight)
        nn.init.zeros_(m.bias)


def fit(model, x, y, steps, teacher=None):
    opt = torch.optim.SGD(model.parameters(), lr=5e-2)
    for _ in range(steps):
        i = torch.randint(0, len(x), (32,))
        target = y[i]
        if teacher is not None:
            with torch.no_grad():
                target = teacher(x[i]).softmax(1)
        loss = F.cross_entropy(model(x[i]), target)
        opt.zero_grad()
        loss.backward()
        opt.step()


x, y = data(2000)
pretrained = make_model()
fit(pretrained, x, y, 100)
path = os.path.join(tempfile.mkdtemp(), "pretrained.pt")
torch.save(pretrained.state_dict(), path)

model = make_model()
model.apply(init_weights)  # initialised, then loaded
model.load_state_dict(torch.load(path))
fit(model, x[:64], y[:64], 40)

body = make_model()
body.load_state_dict(torch.load(path))
body[2] = nn.Linear(64, 2)  # a new head, initialised after the load
body[2].apply(init_weights)
fit(body, x[:64], y[:64], 40)

teacher = make_model()
teacher.load_state_dict(torch.load(path))
student = make_model()  # trained from scratch on the teacher's outputs
fit(student, x, y, 40, teacher=teacher)

baseline = make_model()
baseline.load_state_dict(torch.load(path))
scratch = make_model()
fit(scratch, x[:64], y[:64], 40)
with torch.no_grad():
    for name, m in [("loaded", baseline), ("scratch", scratch), ("student", student)]:
        print(f"{name} accuracy {(m(x[1000:]).argmax(1) == y[1000:]).float().mean():.2f}")
