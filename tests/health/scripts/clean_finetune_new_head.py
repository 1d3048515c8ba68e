"""Clean: pretrain, save the weights; build the model again with a head for another task, load
the body from that checkpoint (its optimiser's state beside) with strict=False (the head left
out, as the new task needs), and fine-tune it all with a new optimiser. (The monitor's note of the parameters a load left out failed on the
head's, comparing tensors of several values, and watched nothing of the fine-tuning.)"""

import tempfile
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
x, w = torch.randn(3000, 20), torch.randn(20, 8)
first_task, second_task = (
    torch.tanh(x @ w).argmax(1),
    ((x @ w)[:, :3] + 0.3 * x[:, :3] ** 2).argmax(1),
)


class Net(nn.Module):
    def __init__(self, classes: int):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU())
        self.head = nn.Linear(64, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x))


def train(model: nn.Module, labels: torch.Tensor, lr: float) -> torch.optim.Optimizer:
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    for _step in range(80):
        batch = torch.randint(0, 3000, (64,))
        loss = F.cross_entropy(model(x[batch]), labels[batch])
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(f"loss {loss.item():.3f}")
    return opt


pretrained = Net(8)
opt = train(pretrained, first_task, 3e-3)
with tempfile.TemporaryDirectory() as folder:  # a checkpoint of the first task's training
    torch.save({"model": pretrained.state_dict(), "opt": opt.state_dict()}, Path(folder) / "a.pt")
    weights = torch.load(Path(folder) / "a.pt")["model"]
finetuned = Net(3)
print(
    finetuned.load_state_dict(
        {k: v for k, v in weights.items() if not k.startswith("head.")}, strict=False
    )
)
train(finetuned, second_task, 1e-3)
