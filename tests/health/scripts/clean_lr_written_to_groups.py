"""Clean: learning rates written where the optimisers read them, beside writes that read like
the slip: a step decay written into every param group, with the rate mirrored into an
attribute for the log; a per-group rate given beside a different default; a scheduler that
moves the groups beside an attribute set once; a default changed before add_param_group; a
state_dict edited and loaded back."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
w = torch.randn(10, 1)
x = torch.randn(3000, 10)
y = x @ w + 0.3 * torch.randn(3000, 1)

body, head = nn.Linear(10, 16), nn.Linear(16, 1)
opt = torch.optim.SGD([{"params": body.parameters(), "lr": 0.02}], lr=0.5, momentum=0.9)
opt.defaults["lr"] = 0.02  # before the head's group is added: it takes this rate
opt.add_param_group({"params": head.parameters()})
opt.current_lr = 0.02  # mirrors the groups' rate, for the log
second = nn.Linear(10, 1)
adam = torch.optim.Adam(second.parameters(), lr=1e-2)
adam.lr = 1e-2  # set once; the scheduler moves the groups
schedule = torch.optim.lr_scheduler.StepLR(adam, step_size=100, gamma=0.5)
for epoch in range(4):
    if epoch == 2:
        for g in opt.param_groups:
            g["lr"] *= 0.1
        opt.current_lr = opt.param_groups[0]["lr"]
    if epoch == 3:
        state = opt.state_dict()
        state["param_groups"][0]["lr"] = 1e-3
        state["param_groups"][1]["lr"] = 1e-3
        opt.load_state_dict(state)
        opt.current_lr = 1e-3
    for i in range(0, 2500, 50):
        xb, yb = x[i : i + 50], y[i : i + 50]
        loss = F.mse_loss(head(torch.relu(body(xb))), yb)
        opt.zero_grad()
        loss.backward()
        opt.step()
        other = F.mse_loss(second(xb), yb)
        adam.zero_grad()
        other.backward()
        adam.step()
        schedule.step()
with torch.no_grad():
    mse = F.mse_loss(head(torch.relu(body(x[2500:]))), y[2500:]).item()
    linear = F.mse_loss(second(x[2500:]), y[2500:]).item()
print(f"held-out MSE {mse:.3f} and {linear:.3f}, rates {[g['lr'] for g in opt.param_groups]}")
