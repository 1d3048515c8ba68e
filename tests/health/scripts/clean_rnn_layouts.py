"""Clean: recurrent layers given the layout they read: a time-first GRU given [T, B, F]
(transposed from the loader's batches), a batch-first LSTM given [B, T, F], and a time-first
GRU over packed sequences."""

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
        self.time_first = nn.GRU(8, 16)
        self.batch_first = nn.LSTM(8, 16, batch_first=True)
        self.packed = nn.GRU(8, 16)
        self.out = nn.Linear(48, 2)

    def forward(self, seq: torch.Tensor) -> torch.Tensor:  # seq [B, T, F]
        a, _ = self.time_first(seq.transpose(0, 1))  # [T, B, 16]
        b, _ = self.batch_first(seq)  # [B, T, 16]
        lengths = torch.full((seq.shape[0],), seq.shape[1])
        packed = nn.utils.rnn.pack_padded_sequence(seq, lengths, batch_first=True)
        _, h = self.packed(packed)  # h [1, B, 16]
        return self.out(torch.cat([a[-1], b[:, -1], h[0]], dim=1))


model = Net()
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
for epoch in range(3):
    for seq, labels in DataLoader(TensorDataset(x, y), batch_size=32, shuffle=True):
        loss = F.cross_entropy(model(seq), labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(epoch, round(loss.item(), 3))
