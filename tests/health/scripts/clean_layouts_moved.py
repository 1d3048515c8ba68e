"""Clean: dims moved with transpose and permute before convolutions and a recurrent layer;
views that add or split dims (a channel of 1, heads), a [B, 1, T] tensor transposed (its
contiguous result looks like a view reordering dims, but moving a size-1 dim moves no value)
and a square [B, T, T] map viewed as itself."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
V, T, E, C = 100, 20, 8, 3  # vocabulary, tokens, embedding width, classes
tokens = torch.randint(C, V, (3000, T))
labels = torch.arange(3000) % C
tokens[torch.arange(3000), torch.randint(0, T, (3000,))] = labels  # a class's marker token


class Mixed(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(V, E)
        self.conv = nn.Conv1d(E, 16, 3, padding=1)
        self.gru = nn.GRU(16, 16, batch_first=True)
        self.score = nn.Conv1d(1, 4, 3, padding=1)
        self.pair = nn.Conv2d(1, 4, 3, padding=1)
        self.out = nn.Linear(16 + 4 + 4, C)

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        h = self.embed(t)  # [B, T, E]
        c = F.relu(self.conv(h.transpose(1, 2)))  # [B, 16, T]
        r, _ = self.gru(c.permute(0, 2, 1))  # [B, T, 16]
        s = r.mean(2)  # [B, T]
        g = self.score(s.view(-1, 1, T)).amax(2)  # [B, 4]; a channel of 1 added
        s1 = s.unsqueeze(2).transpose(1, 2)  # [B, 1, T] from [B, T, 1]: contiguous
        m = s1.transpose(1, 2) @ s1  # [B, T, T]
        p = self.pair(m.view(-1, 1, T, T)).amax((2, 3))  # [B, 4]
        return self.out(torch.cat([r[:, -1], g, p], 1))


model = Mixed()
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
for _ in range(120):
    i = torch.randint(0, 3000, (64,))
    loss = F.cross_entropy(model(tokens[i]), labels[i])
    opt.zero_grad()
    loss.backward()
    opt.step()
print(round(loss.item(), 3))
