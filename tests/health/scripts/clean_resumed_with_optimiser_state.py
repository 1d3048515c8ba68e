"""Clean: a run resumed from its checkpoint loads the model's weights and then the optimiser's
state. The first run trains 150 steps with Adam and saves {"model", "optimizer", "step"}; the
second builds the model and optimiser anew and loads both, so Adam's moments and step count go
on where they were. A teacher loaded from a checkpoint of its own (with its optimiser's state)
guides the student, whose fresh optimiser is no resume either."""

import os
import tempfile

import torch
from torch import nn
from torch.nn import functional as F


def build(width: int = 64) -> tuple[nn.Module, torch.optim.Optimizer]:
    model = nn.Sequential(nn.Linear(20, width), nn.ReLU(), nn.Linear(width, 4))
    return model, torch.optim.Adam(model.parameters(), lr=3e-3)


def train(
    model: nn.Module, optimizer: torch.optim.Optimizer, first: int, last: int, teacher=None
) -> None:
    for step in range(first, last + 1):
        i = torch.randint(0, 4000, (64,))
        logits = model(x[i])
        loss = F.cross_entropy(logits, y[i])
        if teacher is not None:
            with torch.no_grad():
                soft = F.softmax(teacher(x[i]), -1)
            loss = loss + F.cross_entropy(logits, soft)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 25 == 0 or step == first:
            print(f"step {step} loss {loss.item():.4f}")


torch.manual_seed(0)
x = torch.randn(4000, 20)
y = (x[:, :4] + 0.3 * torch.randn(4000, 4)).argmax(1)
folder = tempfile.mkdtemp()
path = os.path.join(folder, "checkpoint.pt")

model, optimizer = build()
train(model, optimizer, 1, 150)
torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": 150}, path)

# The restart: everything built again, the checkpoint loaded, the optimiser's state too.
model, optimizer = build()
checkpoint = torch.load(path)
model.load_state_dict(checkpoint["model"])
optimizer.load_state_dict(checkpoint["optimizer"])
train(model, optimizer, checkpoint["step"] + 1, 300)

# A student of the same shape taught by the trained model, loaded from its checkpoint.
teacher, _ = build()
teacher.load_state_dict(torch.load(path)["model"])
teacher.eval()
student, student_optimizer = build()
train(student, student_optimizer, 1, 20, teacher)  # (a last quarter mostly the resumed run's)
os.remove(path)
