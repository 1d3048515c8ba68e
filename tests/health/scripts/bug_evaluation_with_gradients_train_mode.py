"""Bug: a validation pass with neither ``model.eval()`` nor ``torch.no_grad()``: each epoch
the model runs 8 validation batches in train mode with gradients on. Autograd records graphs
no backward uses, dropout stays on and batch norm takes the validation batches into its
running statistics. Found at the next training step's backward, whose graph reaches none of
the validation forwards."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
x = torch.randn(3000, 20)
y = x[:, :4].argmax(1)
x_val = torch.randn(512, 20)
y_val = x_val[:, :4].argmax(1)
model = nn.Sequential(
    nn.Linear(20, 64), nn.BatchNorm1d(64), nn.ReLU(), nn.Dropout(0.3), nn.Linear(64, 4)
)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
for epoch in range(3):
    for i in range(0, 3000, 64):
        loss = F.cross_entropy(model(x[i : i + 64]), y[i : i + 64])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    correct = 0
    for i in range(0, 512, 64):  # bug: under torch.no_grad(), after model.eval()
        correct += (model(x_val[i : i + 64]).argmax(1) == y_val[i : i + 64]).sum().item()
    print(f"epoch {epoch} loss {loss.item():.4f} val acc {correct / 512:.3f}")
