"""Clean: five loops that update their parameters by hand, with no torch.optim optimiser, as
pytorch/examples' word_language_model (``p.data.add_(p.grad, alpha=-lr)`` after clipping, the
learning rate cut by hand), PyTorch's tutorial (``p -= lr * p.grad`` under no_grad), a
character model of raw tensors (``p.data += -lr * p.grad``), a loop over
``torch.autograd.grad``'s gradients and SGD with momentum written out do; an attack on the
trained model that takes gradients of its input, which trains nothing; and an image ascended by
hand to excite a frozen model's unit (its pixels move along their gradient, on purpose)."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
x = torch.randn(1024, 16)
y = (x[:, :3].sum(1) > 0).long() + (x[:, 3] > 1).long()

# word_language_model: zero_grad first, clip, then the update; the rate quartered midway.
model = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 3))
lr = 0.5
for step in range(60):
    i = torch.randint(0, 1024, (32,))
    model.zero_grad()
    loss = F.cross_entropy(model(x[i]), y[i])
    loss.backward()
    nn.utils.clip_grad_norm_(model.parameters(), 0.25)
    for p in model.parameters():
        p.data.add_(p.grad, alpha=-lr)
    if step == 30:
        lr /= 4
print("word_language_model style:", round(loss.item(), 3))

# The tutorial: the update and the zeroing under no_grad.
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 3))
for _ in range(60):
    i = torch.randint(0, 1024, (32,))
    loss = F.cross_entropy(model(x[i]), y[i])
    loss.backward()
    with torch.no_grad():
        for p in model.parameters():
            p -= 0.1 * p.grad
            p.grad.zero_()
print("tutorial style:", round(loss.item(), 3))

# Raw tensors, gradients set to None before each backward.
g = torch.Generator().manual_seed(1)
w1 = (torch.randn(16, 32, generator=g) / 4).requires_grad_()
b1 = torch.zeros(32, requires_grad=True)
w2 = (torch.randn(32, 3, generator=g) / 6).requires_grad_()
params = [w1, b1, w2]
for step in range(60):
    i = torch.randint(0, 1024, (32,))
    logits = torch.tanh(x[i] @ w1 + b1) @ w2
    loss = F.cross_entropy(logits, y[i])
    for p in params:
        p.grad = None
    loss.backward()
    rate = 0.1 if step < 40 else 0.01
    for p in params:
        p.data += -rate * p.grad
print("raw tensors:", round(loss.item(), 3))

# Gradients from torch.autograd.grad, never in .grad.
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 3))
params = list(model.parameters())
for _ in range(60):
    i = torch.randint(0, 1024, (32,))
    loss = F.cross_entropy(model(x[i]), y[i])
    grads = torch.autograd.grad(loss, params)
    with torch.no_grad():
        for p, grad in zip(params, grads, strict=True):
            p.sub_(0.1 * grad)
print("autograd.grad:", round(loss.item(), 3))

# SGD with momentum by hand: each update is not proportional to its gradient.
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 3))
velocity = [torch.zeros_like(p) for p in model.parameters()]
for _ in range(60):
    i = torch.randint(0, 1024, (32,))
    model.zero_grad()
    loss = F.cross_entropy(model(x[i]), y[i])
    loss.backward()
    with torch.no_grad():
        for p, v in zip(model.parameters(), velocity, strict=True):
            v.mul_(0.9).add_(p.grad)
            p -= 0.05 * v
print("momentum by hand:", round(loss.item(), 3))

# An attack on the model: gradients of the input, none of the weights change.
model.eval()
for p in model.parameters():
    p.requires_grad_(False)
for _ in range(10):
    xa = x[:32].clone().requires_grad_()
    F.cross_entropy(model(xa), y[:32]).backward()
    xa.data += 0.01 * xa.grad.sign()
print("attacked")

# An image ascended by hand to excite one output of the frozen model.
image = torch.zeros(1, 16, requires_grad=True)
for _ in range(40):
    excitation = model(image)[0, 1]
    image.grad = None
    excitation.backward()
    image.data += 0.1 * image.grad
print("excited:", round(excitation.item(), 3))
