"""Bug: the best epoch's model kept as a copy made before training, replaced when
`val_loss > best_loss`, a comparison written the wrong way round that never holds from
infinity: the copy scored on the test set is the untrained model (0.16; the trained model
scores 0.97, and `<` keeps a copy that scores 0.97)."""

import copy

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

torch.manual_seed(6)


class BlobDataset(Dataset):
    def __init__(self, n, centers, seed):
        g = torch.Generator().manual_seed(seed)
        self.y = torch.randint(0, len(centers), (n,), generator=g)
        self.x = centers[self.y] + 1.2 * torch.randn(n, centers.shape[1], generator=g)

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        return {"x": self.x[i], "y": self.y[i]}


centers = torch.randn(8, 24) * 1.0
train_dl = DataLoader(BlobDataset(5000, centers, 1), batch_size=64, shuffle=True)
val_dl = DataLoader(BlobDataset(1000, centers, 2), batch_size=256)
test_dl = DataLoader(BlobDataset(2000, centers, 3), batch_size=256)

model = nn.Sequential(nn.Linear(24, 96), nn.ReLU(), nn.Dropout(0.2), nn.Linear(96, 8))
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)


def run_eval(net, loader):
    net.eval()
    loss_sum, correct, n = 0.0, 0, 0
    with torch.no_grad():
        for batch in loader:
            logits = net(batch["x"])
            loss_sum += F.cross_entropy(logits, batch["y"], reduction="sum").item()
            correct += (logits.argmax(1) == batch["y"]).sum().item()
            n += len(batch["y"])
    return loss_sum / n, correct / n


best_model = copy.deepcopy(model)
best_loss = float("inf")
for epoch in range(5):
    model.train()
    for batch in train_dl:
        loss = F.cross_entropy(model(batch["x"]), batch["y"])
        opt.zero_grad()
        loss.backward()
        opt.step()
    val_loss, val_acc = run_eval(model, val_dl)
    if val_loss > best_loss:
        best_loss = val_loss
        best_model = copy.deepcopy(model)
    print(f"epoch {epoch} val_loss {val_loss:.4f} val_acc {val_acc:.4f}")

_, test_acc = run_eval(best_model, test_dl)
print(f"HELDOUT best_model_acc {test_acc:.4f}")
