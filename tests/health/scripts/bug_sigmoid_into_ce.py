"""Bug: a multi-class model ending in Sigmoid, its output given to CrossEntropyLoss: every
score is squashed into (0, 1), so the softmax inside the loss sees nearly equal logits, the
loss cannot fall far below log(C) and the gradients are small. The rows do not sum to 1, so
they do not look like a softmax's probabilities."""

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 5), nn.Sigmoid())
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
criterion = nn.CrossEntropyLoss()
for _step in range(100):
    x = torch.randn(32, 20)
    loss = criterion(model(x), x[:, :5].argmax(1))
    opt.zero_grad()
    loss.backward()
    opt.step()
print("done")
