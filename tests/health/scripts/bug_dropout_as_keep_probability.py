"""Bug: an MLP ported from TensorFlow 1, whose config gives dropout as keep_prob=0.8, built as
nn.Dropout(cfg["keep_prob"]). PyTorch's p is the share dropped: the port drops 80% of the
hidden units at every step and multiplies the rest by 5. Held-out accuracy 0.66 after 300
steps, where nn.Dropout(1 - cfg["keep_prob"]) gives 0.88."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
cfg = {"hidden": 64, "keep_prob": 0.8, "lr": 1e-3, "steps": 300, "batch": 64}
FEATURES, CLASSES = 20, 4
teacher = nn.Sequential(nn.Linear(FEATURES, 64), nn.Tanh(), nn.Linear(64, CLASSES))
x = torch.randn(3000, FEATURES)
with torch.no_grad():
    y = teacher(x).argmax(1)
x_train, y_train, x_test, y_test = x[:2000], y[:2000], x[2000:], y[2000:]


class MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.fc1 = nn.Linear(FEATURES, cfg["hidden"])
        self.fc2 = nn.Linear(cfg["hidden"], cfg["hidden"])
        self.drop = nn.Dropout(cfg["keep_prob"])  # bug: nn.Dropout(1 - cfg["keep_prob"])
        self.out = nn.Linear(cfg["hidden"], CLASSES)

    def forward(self, x):
        x = self.drop(F.relu(self.fc1(x)))
        x = self.drop(F.relu(self.fc2(x)))
        return self.out(x)


model = MLP(cfg)
opt = torch.optim.Adam(model.parameters(), lr=cfg["lr"])
for _step in range(cfg["steps"]):
    rows = torch.randint(0, len(x_train), (cfg["batch"],))
    loss = F.cross_entropy(model(x_train[rows]), y_train[rows])
    opt.zero_grad()
    loss.backward()
    opt.step()
model.eval()
with torch.no_grad():
    accuracy = (model(x_test).argmax(1) == y_test).float().mean().item()
print(f"held-out accuracy {accuracy:.2f}")
