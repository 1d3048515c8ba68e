"""Clean: fine-tuning with a frozen backbone beside the head, unfrozen at step 40 and given to
the optimiser with add_param_group at a lower rate; a frozen teacher beside them, never
unfrozen, gives soft targets throughout."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
x = torch.randn(1024, 12)
y = (torch.tanh(x @ torch.randn(12, 8)) @ torch.randn(8, 4)).argmax(1)
backbone = nn.Sequential(nn.Linear(12, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU())
head = nn.Linear(64, 4)
teacher = nn.Sequential(nn.Linear(12, 32), nn.ReLU(), nn.Linear(32, 4)).eval()
teacher.requires_grad_(False)
backbone.requires_grad_(False)
opt = torch.optim.Adam(head.parameters(), lr=3e-3)
for step in range(150):
    if step == 40:
        backbone.requires_grad_(True)
        opt.add_param_group({"params": backbone.parameters(), "lr": 1e-3})
    i = torch.randint(0, 1024, (64,))
    logits = head(backbone(x[i]))
    soft = F.softmax(teacher(x[i]) / 2, -1)
    loss = F.cross_entropy(logits, y[i]) + 0.1 * F.cross_entropy(logits, soft)
    opt.zero_grad()
    loss.backward()
    opt.step()
print(f"loss {loss.item():.3f}")
