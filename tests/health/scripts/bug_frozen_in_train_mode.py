"""Bug: a student distilled from a teacher loaded from a checkpoint and frozen with
``requires_grad_(False)``, but left in train mode (modules start in it, and
``student.train()`` does not reach the teacher): its dropout perturbs every target it gives.
The final evaluation puts it in eval mode, after the whole training ran in train mode."""

import io

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)


def mlp(width: int, dropout: float) -> nn.Sequential:
    return nn.Sequential(nn.Linear(20, width), nn.ReLU(), nn.Dropout(dropout), nn.Linear(width, 5))


saved = io.BytesIO()
torch.save(mlp(256, 0.3).state_dict(), saved)  # (a teacher trained elsewhere)
saved.seek(0)
teacher = mlp(256, 0.3)
teacher.load_state_dict(torch.load(saved))
teacher.requires_grad_(False)  # bug: and .eval()
student = mlp(32, 0.1)
opt = torch.optim.Adam(student.parameters(), lr=1e-3)
T = 2.0  # the softening temperature
for _ in range(100):
    x = torch.randn(64, 20)
    student.train()
    with torch.no_grad():
        soft = F.softmax(teacher(x) / T, dim=-1)
    loss = F.kl_div(F.log_softmax(student(x) / T, dim=-1), soft, reduction="batchmean") * T * T
    opt.zero_grad()
    loss.backward()
    opt.step()
student.eval()
teacher.eval()  # for the final evaluation only: it trained the student in train mode
with torch.no_grad():
    x = torch.randn(256, 20)
    agreement = (student(x).argmax(1) == teacher(x).argmax(1)).float().mean().item()
print(f"loss {loss.item():.4f}, agreement with the teacher {agreement:.3f}")
