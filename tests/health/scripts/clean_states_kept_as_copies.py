"""Clean: early stopping that keeps the best epoch's weights as a copy
(copy.deepcopy(model.state_dict())), saves them to a file after training and loads that file;
beside it a checkpoint saved each epoch as it is taken (torch.save(model.state_dict(), path)),
and a second model synced from the trained one with load_state_dict(model.state_dict()) each
epoch (a target network's sync). Each state is loaded or saved as it was taken, or copied.
"""

import copy
import os
import tempfile

import torch
from torch import nn
from torch.nn import functional as F


def main():
    torch.manual_seed(0)
    x = torch.randn(600, 20)
    y = (x[:, :2].sum(1) > 0).long()
    noisy = torch.where(torch.rand(600) < 0.3, 1 - y, y)  # noisy labels: it overfits later
    model = nn.Sequential(nn.Linear(20, 256), nn.ReLU(), nn.Linear(256, 2))
    target = copy.deepcopy(model)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    folder = tempfile.mkdtemp()
    best_loss, best = float("inf"), None
    for _epoch in range(20):
        for i in range(0, 400, 50):
            loss = F.cross_entropy(model(x[i : i + 50]), noisy[i : i + 50])
            opt.zero_grad()
            loss.backward()
            opt.step()
        torch.save(model.state_dict(), os.path.join(folder, "last.pt"))
        target.load_state_dict(model.state_dict())
        model.eval()
        with torch.no_grad():
            val_loss = F.cross_entropy(model(x[400:]), y[400:]).item()
        model.train()
        if val_loss < best_loss:
            best_loss, best = val_loss, copy.deepcopy(model.state_dict())
    torch.save(best, os.path.join(folder, "best.pt"))
    model.load_state_dict(torch.load(os.path.join(folder, "best.pt")))
    model.eval()
    with torch.no_grad():
        restored = F.cross_entropy(model(x[400:]), y[400:]).item()
    print(f"HELDOUT best={best_loss:.3f} restored={restored:.3f}")


if __name__ == "__main__":
    main()
