"""Bug: batch norm given Keras's momentum, 0.99. In PyTorch momentum is the weight of each new
batch in the running statistics, so they are mostly the last training batch's, and the last
batch of each epoch here holds 2 rows (6,002 examples in batches of 16): evaluation normalises
by those 2 rows' mean and variance. Held out after each of 3 epochs: 0.68, 0.53, 0.81, where
momentum=0.01 (Keras's 0.99, in PyTorch's terms) gives 0.99 each time."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
CLASSES, FEATURES, EXAMPLES = 10, 20, 6002
centres = torch.randn(CLASSES, FEATURES) * 2
scale, shift = torch.rand(FEATURES) * 5 + 0.5, torch.randn(FEATURES) * 10


def data(n, generator):
    y = torch.randint(0, CLASSES, (n,), generator=generator)
    x = centres[y] + torch.randn(n, FEATURES, generator=generator) * 1.5
    return x * scale + shift, y


generator = torch.Generator().manual_seed(1)
x_train, y_train = data(EXAMPLES, generator)
x_test, y_test = data(2000, generator)
model = nn.Sequential(
    nn.Linear(FEATURES, 64),
    nn.BatchNorm1d(64, momentum=0.99),  # bug: Keras's meaning
    nn.ReLU(),
    nn.Linear(64, 64),
    nn.BatchNorm1d(64, momentum=0.99),
    nn.ReLU(),
    nn.Linear(64, CLASSES),
)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
accuracies = []
for _epoch in range(3):
    model.train()
    order = torch.randperm(EXAMPLES)
    for start in range(0, EXAMPLES, 16):
        rows = order[start : start + 16]
        loss = F.cross_entropy(model(x_train[rows]), y_train[rows])
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    with torch.no_grad():
        accuracies.append((model(x_test).argmax(1) == y_test).float().mean().item())
print("held-out accuracy by epoch", [round(a, 2) for a in accuracies])
