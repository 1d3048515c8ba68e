"""Bug: a loss scaled by a GradScaler, its gradients stepped without it. The loop scales the
loss (scaler.scale(loss).backward()) but calls optimizer.step() itself, so SGD with momentum
applies gradients 65,536 times too large and nothing skips the steps that overflow: the
weights are NaN within a few steps and the held-out accuracy is chance (0.49); stepped through
scaler.step(optimizer), 0.98."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
w = torch.randn(20)
x, x_test = torch.randn(4000, 20), torch.randn(2000, 20)
y, y_test = (x @ w > 0).long(), (x_test @ w > 0).long()
model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 2))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
scaler = torch.amp.GradScaler("cpu")
for _epoch in range(4):
    for i in range(0, len(x), 50):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = F.cross_entropy(model(x[i : i + 50]), y[i : i + 50])
        optimizer.zero_grad()
        scaler.scale(loss).backward()
        optimizer.step()  # bug: scaler.step(optimizer); scaler.update()

model.eval()
with torch.no_grad():
    accuracy = (model(x_test).argmax(1) == y_test).float().mean().item()
print(f"held-out accuracy {accuracy:.2f}")
