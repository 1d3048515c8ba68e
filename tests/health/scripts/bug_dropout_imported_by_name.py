"""Bug: dropout imported by name and called without training=self.training: its training
defaults to True, so dropout stays on when the model is evaluated in eval mode. The name is the
script's own, so a check that wraps torch.nn.functional.dropout alone does not see the call."""

import torch
from torch import nn
from torch.nn.functional import cross_entropy, dropout, relu


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.hidden = nn.Linear(20, 64)
        self.out = nn.Linear(64, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(dropout(relu(self.hidden(x)), 0.5))  # [B, 5]


torch.manual_seed(0)
model = Net()
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
x_val = torch.randn(256, 20)
for epoch in range(2):
    model.train()
    for _step in range(40):
        x = torch.randn(32, 20)
        loss = cross_entropy(model(x), x[:, :5].argmax(1))
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    with torch.no_grad():
        accuracy = (model(x_val).argmax(1) == x_val[:, :5].argmax(1)).float().mean()
    print(epoch, round(accuracy.item(), 3))
