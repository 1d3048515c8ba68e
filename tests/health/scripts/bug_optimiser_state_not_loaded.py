"""Bug: a run resumed from its checkpoint loads the model's weights and not the optimiser's
state, though the checkpoint holds it. The first run trains 150 steps with Adam and saves
{"model", "optimizer", "step"}; the second (as the script would run after a restart) builds the
model and optimiser anew and loads only ``checkpoint["model"]``: Adam's moments and step count
start at zero again, and its first updates are as large as at the start of training."""

import os
import tempfile

import torch
from torch import nn
from torch.nn import functional as F


def build() -> tuple[nn.Module, torch.optim.Optimizer]:
    model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 4))
    return model, torch.optim.Adam(model.parameters(), lr=3e-3)


def train(model: nn.Module, optimizer: torch.optim.Optimizer, first: int, last: int) -> None:
    for step in range(first, last + 1):
        i = torch.randint(0, 4000, (64,))
        loss = F.cross_entropy(model(x[i]), y[i])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 25 == 0 or step == first:
            print(f"step {step} loss {loss.item():.4f}")


torch.manual_seed(0)
x = torch.randn(4000, 20)
y = (x[:, :4] + 0.3 * torch.randn(4000, 4)).argmax(1)
path = os.path.join(tempfile.mkdtemp(), "checkpoint.pt")

model, optimizer = build()
train(model, optimizer, 1, 150)
torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": 150}, path)

# The restart: everything built again, the checkpoint loaded.
model, optimizer = build()
checkpoint = torch.load(path)
model.load_state_dict(
    checkpoint["model"]
)  # bug: optimizer.load_state_dict(checkpoint["optimizer"])
train(model, optimizer, checkpoint["step"] + 1, 300)
os.remove(path)
