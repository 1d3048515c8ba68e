"""Bug: the test-set score computed once, after training, with neither ``model.eval()`` nor
``torch.no_grad()``: 8 test batches run in train mode with gradients on. Dropout is on and
batch norm takes the test batches into its running statistics, so the score is not the
model's; autograd records a graph for each batch. No training step follows, so no backward can
show their graphs unused: the script's last forwards are judged when it ends."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
x = torch.randn(3000, 20)
y = x[:, :4].argmax(1)
x_test = torch.randn(512, 20)
y_test = x_test[:, :4].argmax(1)
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
    print(f"epoch {epoch} loss {loss.item():.4f}")
correct = 0
for i in range(0, 512, 64):  # bug: under torch.no_grad(), after model.eval()
    correct += (model(x_test[i : i + 64]).argmax(1) == y_test[i : i + 64]).sum().item()
print(f"test acc {correct / 512:.3f}")
