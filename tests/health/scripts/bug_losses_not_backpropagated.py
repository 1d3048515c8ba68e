"""Bug: the backward and the optimiser's step indented one level too little, after the loop
over batches: every batch's loss is computed, and only the last batch's of each epoch trains
the model (one step an epoch)."""

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
features = torch.randn(2400, 10)
labels = (features @ torch.randn(10, 4)).argmax(1)
loader = DataLoader(TensorDataset(features[:2000], labels[:2000]), batch_size=32, shuffle=True)
model = nn.Sequential(nn.Linear(10, 64), nn.ReLU(), nn.Linear(64, 4))
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
for epoch in range(15):
    for x, y in loader:
        loss = F.cross_entropy(model(x), y)
    opt.zero_grad()  # bug: these three lines belong inside the loop over batches
    loss.backward()
    opt.step()
    print(f"epoch {epoch}: loss {loss.item():.3f}")
with torch.no_grad():
    accuracy = (model(features[2000:]).argmax(1) == labels[2000:]).float().mean()
print(f"held-out accuracy {accuracy:.2f}")
