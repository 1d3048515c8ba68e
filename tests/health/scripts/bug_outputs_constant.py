"""Bug: Adam at lr=1.0 on a ReLU classifier. Its first steps push every unit of a hidden layer
where no input turns it on: the layer is all zeros for every example, gets no gradient, and
the model's logits are the last layer's bias, the same whatever it is given. Held-out accuracy
0.51 (the commonest class's share) after 300 steps, where lr=1e-3 gives 0.94."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
x = torch.rand(3000, 20)  # pixel-like features in [0, 1]
y = torch.cdist(x, torch.rand(4, 20)).argmin(1)  # the nearest of 4 prototypes
x_train, y_train, x_test, y_test = x[:2000], y[:2000], x[2000:], y[2000:]
model = nn.Sequential(
    nn.Linear(20, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 4)
)
opt = torch.optim.Adam(model.parameters(), lr=1.0)  # bug: far too high; 1e-3
for _step in range(300):
    rows = torch.randint(0, 2000, (64,))
    loss = F.cross_entropy(model(x_train[rows]), y_train[rows])
    opt.zero_grad()
    loss.backward()
    opt.step()
model.eval()
with torch.no_grad():
    accuracy = (model(x_test).argmax(1) == y_test).float().mean().item()
print(f"held-out accuracy {accuracy:.2f}")
