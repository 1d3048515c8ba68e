"""Clean: forwards in eval mode with gradients on that need them: fine-tuning with the model
in eval mode throughout (dropout off, batch norm frozen) over 8 micro-batches a step, and
adversarial examples made in eval mode with 6 steps of torch.autograd.grad (PGD) before each
training step in train mode. (The phases' steps cost about the same: no step-time-regression.)"""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(20, 64), nn.BatchNorm1d(64), nn.ReLU(), nn.Linear(64, 5))
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
model.eval()  # fine-tuning with batch norm frozen, from the first step
for _step in range(60):
    opt.zero_grad()
    for _micro in range(8):
        x = torch.randn(32, 20)
        (F.cross_entropy(model(x), x[:, :5].argmax(1)) / 8).backward()
    opt.step()
for _step in range(40):
    x = torch.randn(32, 20)
    y = x[:, :5].argmax(1)
    model.eval()
    delta = torch.zeros_like(x, requires_grad=True)
    for _ in range(6):  # projected gradient descent on the input
        (grad,) = torch.autograd.grad(F.cross_entropy(model(x + delta), y), delta)
        delta = (delta + 0.01 * grad.sign()).clamp(-0.05, 0.05).detach().requires_grad_()
    model.train()
    loss = F.cross_entropy(model(x + delta.detach()), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
print("done")
