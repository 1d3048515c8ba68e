"""Bug: an LSTM built without batch_first=True, given [batch, time, features] batches from a
DataLoader: it reads dim 0 (the 32 examples) as time, so its recurrence runs across the
examples of each batch, and out[:, -1] (meant as each example's last state) has the right
shape, so nothing fails."""

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
x = torch.randn(1024, 12, 8)  # [N, T, F]
y = (x[:, :, 0].sum(1) > 0).long()


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.rnn = nn.LSTM(8, 32)  # batch_first=True forgotten
        self.out = nn.Linear(32, 2)

    def forward(self, seq: torch.Tensor) -> torch.Tensor:
        out, _ = self.rnn(seq)  # read as [T=32, B=12, H]
        return self.out(out[:, -1])  # [32, 2]: "each example's last state"


model = Net()
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
for epoch in range(3):
    for seq, labels in DataLoader(TensorDataset(x, y), batch_size=32, shuffle=True):
        loss = F.cross_entropy(model(seq), labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(epoch, round(loss.item(), 3))
