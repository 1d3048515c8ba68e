"""Bug: early stopping keeps the best epoch's weights as best = model.state_dict(), without a
copy: its tensors are the parameters' memory and follow them as training goes on, so the
restore at the end loads the last epoch's weights and changes nothing."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
x = torch.randn(600, 20)
y = (x[:, :2].sum(1) > 0).long()
noisy = torch.where(torch.rand(600) < 0.3, 1 - y, y)  # noisy labels: it overfits later
model = nn.Sequential(nn.Linear(20, 256), nn.ReLU(), nn.Linear(256, 2))
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
best_loss, best = float("inf"), None
for _epoch in range(20):
    for i in range(0, 400, 50):
        loss = F.cross_entropy(model(x[i : i + 50]), noisy[i : i + 50])
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    with torch.no_grad():
        val_loss = F.cross_entropy(model(x[400:]), y[400:]).item()
    model.train()
    if val_loss < best_loss:
        best_loss, best = val_loss, model.state_dict()  # bug: copy.deepcopy(model.state_dict())
model.load_state_dict(best)
model.eval()
with torch.no_grad():
    print(f"best {best_loss:.3f}, restored {F.cross_entropy(model(x[400:]), y[400:]).item():.3f}")
