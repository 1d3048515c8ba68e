"""Bug: early stopping on a torchmetrics Accuracy that is never reset. The validation loop
feeds it every epoch and reads compute(), so each value is the accuracy over all the epochs so
far: it goes on "improving" long after the model began to overfit its noisy labels. Stopped at
epoch 33 with the weights of epoch 27: test accuracy 0.786; with accuracy.reset() after each
read, stopped at epoch 13 with those of epoch 7: 0.832.
"""

import copy

import torch
import torchmetrics
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(7)
D, C = 8, 4
proj = torch.randn(D, C)


def dataset(n, label_noise):
    x = torch.randn(n, D)
    y = (x @ proj).argmax(1)
    m = torch.rand(n) < label_noise
    y[m] = torch.randint(0, C, (int(m.sum()),))
    return TensorDataset(x, y)


train_loader = DataLoader(dataset(400, 0.4), batch_size=32, shuffle=True)
val_loader = DataLoader(dataset(1000, 0.0), batch_size=500)
test_set = dataset(4000, 0.0)


class EarlyStopper:
    def __init__(self, patience):
        self.patience, self.best, self.bad, self.best_state, self.best_epoch = (
            patience,
            None,
            0,
            None,
            -1,
        )

    def step(self, score, model, epoch):
        if self.best is None or score > self.best:
            self.best, self.bad, self.best_epoch = score, 0, epoch
            self.best_state = copy.deepcopy(model.state_dict())
            return False
        self.bad += 1
        return self.bad >= self.patience


model = nn.Sequential(
    nn.Linear(D, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, C)
)
optimizer = torch.optim.SGD(model.parameters(), lr=5e-3, momentum=0.9)
accuracy = torchmetrics.Accuracy(task="multiclass", num_classes=C)
stopper = EarlyStopper(patience=6)

for epoch in range(80):
    model.train()
    for x, y in train_loader:
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()

    model.eval()
    right = total = 0
    with torch.no_grad():
        for x, y in val_loader:
            out = model(x)
            accuracy(out, y)
            right += (out.argmax(-1) == y).sum().item()
            total += len(y)
    val_acc = accuracy.compute().item()
    print(f"[{epoch:02d}] val_acc={val_acc:.4f}")
    if stopper.step(val_acc, model, epoch):
        print(f"early stop at epoch {epoch}, best epoch {stopper.best_epoch}")
        break

true_val_acc = right / total
model.load_state_dict(stopper.best_state)
model.eval()
with torch.no_grad():
    x, y = test_set.tensors
    test_acc = (model(x).argmax(-1) == y).float().mean().item()
print(f"validation accuracy reported {val_acc:.4f}, this epoch's {true_val_acc:.4f}")
print(f"stopped at epoch {epoch}, best epoch {stopper.best_epoch}, test accuracy {test_acc:.4f}")
