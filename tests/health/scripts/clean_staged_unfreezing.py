"""Clean: staged fine-tuning. The head trains alone while the body is frozen (the body's
optimiser, all frozen, steps too); then the body's layers are unfrozen one by one and added to
the head's optimiser with add_param_group; then a soft prompt trains through the whole model,
frozen again and in eval mode, with an optimiser of its own."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
body = nn.ModuleList([nn.Linear(16, 32), nn.Linear(32, 32)])
head = nn.Linear(32, 3)
model = nn.Sequential(body[0], nn.ReLU(), body[1], nn.ReLU(), head)
body.requires_grad_(False)
opt = torch.optim.AdamW(head.parameters(), lr=2e-3)
opt_body = torch.optim.SGD(body.parameters(), lr=1e-3)  # steps, all frozen, until unfrozen
x = torch.randn(2048, 16)
y = x[:, :3].argmax(1)
for epoch in range(3):
    if epoch > 0:
        layer = body[2 - epoch]
        layer.requires_grad_(True)
        opt.add_param_group({"params": layer.parameters(), "lr": 5e-4})
    for _ in range(50):
        i = torch.randint(0, 2048, (32,))
        loss = F.cross_entropy(model(x[i]), y[i])
        opt.zero_grad()
        opt_body.zero_grad()
        loss.backward()
        opt.step()
        opt_body.step()
model.eval().requires_grad_(False)
prompt = nn.Parameter(torch.zeros(1, 16))
opt_prompt = torch.optim.Adam([prompt], lr=1e-2)
for _ in range(60):
    i = torch.randint(0, 2048, (32,))
    loss = F.cross_entropy(model(x[i] + prompt), (y[i] + 1) % 3)
    opt_prompt.zero_grad()
    loss.backward()
    opt_prompt.step()
print("done")
