"""Clean: MAML on sine-wave regression written with torch.func (functorch's maml-regression
example): each task's inner step is ``grad`` of an ``mse_loss`` through ``functional_call``,
vmapped over a meta-batch of 8 tasks of 10 rows, and the mean query loss trains the model
second order. The mean squared errors inside the transforms hold vmapped targets, which are
not summed for the level of predicting the targets' mean (summed there, they once lost the
whole report at the run's end)."""

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, grad, vmap

torch.set_num_threads(1)
torch.manual_seed(0)

model = nn.Sequential(nn.Linear(1, 40), nn.ReLU(), nn.Linear(40, 40), nn.ReLU(), nn.Linear(40, 1))
meta_opt = torch.optim.Adam(model.parameters(), lr=1e-3)
inner_lr, n_tasks, K = 0.01, 8, 10


def sample_tasks():
    amp = torch.empty(n_tasks, 1, 1).uniform_(0.1, 5.0)
    phase = torch.empty(n_tasks, 1, 1).uniform_(0, math.pi)
    xs = torch.empty(n_tasks, K, 1).uniform_(-5, 5)
    xq = torch.empty(n_tasks, K, 1).uniform_(-5, 5)
    return xs, amp * torch.sin(xs + phase), xq, amp * torch.sin(xq + phase)


def inner_loss(params, x, y):
    return F.mse_loss(functional_call(model, params, (x,)), y)


def task_query_loss(params, xs, ys, xq, yq):
    g = grad(inner_loss)(params, xs, ys)
    adapted = {k: params[k] - inner_lr * g[k] for k in params}
    return inner_loss(adapted, xq, yq)


for step in range(200):
    xs, ys, xq, yq = sample_tasks()
    params = dict(model.named_parameters())
    losses = vmap(task_query_loss, in_dims=(None, 0, 0, 0, 0))(params, xs, ys, xq, yq)
    meta_loss = losses.mean()
    meta_opt.zero_grad()
    meta_loss.backward()
    meta_opt.step()
    if step % 20 == 0:
        print(f"step {step} loss {meta_loss.item():.4f}")
