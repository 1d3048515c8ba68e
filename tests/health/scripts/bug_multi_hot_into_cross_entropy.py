"""Bug: a multi-label classifier (1 to 3 of 20 labels an example) trained with
nn.CrossEntropyLoss against its multi-hot targets. Since torch 1.10 a float target of the
logits' shape is read as class probabilities, so nothing fails: the softmax learns 1/k for
each of a row's k labels and leaves the logits' level where it likes, so sigmoid(logits) > 0.5
reads the labels back badly. Held-out micro-F1 0.70, where nn.BCEWithLogitsLoss gives 0.94."""

import torch
from torch import nn

torch.manual_seed(0)
CLASSES, FEATURES = 20, 32
prototypes = torch.randn(CLASSES, FEATURES)


def data(n):
    k = torch.randint(1, 4, (n,))  # 1 to 3 labels an example
    labels = torch.rand(n, CLASSES).argsort(1)[:, :3]
    keep = (torch.arange(3) < k[:, None]).float()
    y = torch.zeros(n, CLASSES).scatter(1, labels, keep)
    return y @ prototypes + torch.randn(n, FEATURES), y


x_train, y_train = data(4000)
x_test, y_test = data(1000)
model = nn.Sequential(nn.Linear(FEATURES, 64), nn.ReLU(), nn.Linear(64, CLASSES))
criterion = nn.CrossEntropyLoss()  # bug: nn.BCEWithLogitsLoss() for labels that come together
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
for _step in range(300):
    rows = torch.randint(0, len(x_train), (128,))
    loss = criterion(model(x_train[rows]), y_train[rows])
    opt.zero_grad()
    loss.backward()
    opt.step()
with torch.no_grad():
    predicted = (torch.sigmoid(model(x_test)) > 0.5).float()
f1 = 2 * (predicted * y_test).sum() / (predicted.sum() + y_test.sum())
print(f"held-out micro-F1 {f1.item():.2f}")
