"""Clean: parameters a loss uses kept beside the model in the script, each trained: a learned
temperature given to the optimiser with the model's parameters, and the log-variances that
weigh two tasks' losses (Kendall et al., 2018) stepped by hand; the inputs' gradient taken for
an adversarial perturbation is a plain tensor's, never meant to be stepped."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
x = torch.randn(2048, 16)
y = (x[:, 0] > 0).long()
target = x[:, :2].sum(1, keepdim=True)
model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 3))  # 2 logits, 1 regression
temperature = nn.Parameter(torch.ones(()))
log_vars = nn.Parameter(torch.zeros(2))  # one per task
opt = torch.optim.Adam([*model.parameters(), temperature], lr=1e-2)
for _ in range(100):
    pick = torch.randint(0, 2048, (64,))
    xb = x[pick].requires_grad_()  # for the perturbation below
    out = model(xb)
    classify = F.cross_entropy(out[:, :2] / temperature, y[pick])
    regress = F.mse_loss(out[:, 2:], target[pick])
    losses = torch.stack([classify, regress])
    loss = (losses * torch.exp(-log_vars) + log_vars).sum()
    opt.zero_grad()
    log_vars.grad = None
    loss.backward()
    opt.step()
    with torch.no_grad():
        log_vars -= 1e-2 * log_vars.grad
        perturbed = xb + 0.01 * xb.grad.sign()  # what an adversarial step would train on next
print(round(loss.item(), 3), [round(v, 3) for v in log_vars.tolist()])
