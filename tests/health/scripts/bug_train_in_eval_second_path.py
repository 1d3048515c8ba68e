"""Bug: two evaluation paths. The validation puts the model back in train mode after itself;
a prediction preview added later calls model.eval() and forgets model.train(), so every epoch
after the first preview trains with dropout off and batch norm frozen."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
model = nn.Sequential(
    nn.Linear(20, 64), nn.BatchNorm1d(64), nn.ReLU(), nn.Dropout(0.3), nn.Linear(64, 5)
)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
x_val = torch.randn(256, 20)


def validate() -> float:
    model.eval()
    with torch.no_grad():
        accuracy = (model(x_val).argmax(1) == x_val[:, :5].argmax(1)).float().mean().item()
    model.train()
    return accuracy


def preview() -> list[int]:
    model.eval()  # model.train() forgotten at the end
    with torch.no_grad():
        return model(x_val[:4]).argmax(1).tolist()


for epoch in range(4):
    for _step in range(40):
        x = torch.randn(32, 20)
        loss = F.cross_entropy(model(x), x[:, :5].argmax(1))
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(epoch, round(validate(), 3))
    if epoch >= 1:
        print("preview", preview())
