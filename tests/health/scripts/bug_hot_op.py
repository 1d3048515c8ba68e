"""Bug: a 2-D convolution over [chars x char-embedding] dominates step time (the QANet report)."""

import torch
from torch import nn

torch.manual_seed(0)


class CharCNN(nn.Module):
    def __init__(self, chars=60, dim=32, out=256):
        super().__init__()
        self.embed = nn.Embedding(chars, dim)
        self.conv = nn.Conv2d(1, out, (7, dim), padding=(3, 0))  # slow: use Conv1d over chars

    def forward(self, chars):  # chars [B, L, W]
        b, length, width = chars.shape
        x = self.embed(chars.view(b * length, width)).unsqueeze(1)  # [B*L, 1, W, dim]
        return self.conv(x).amax(dim=(2, 3)).view(b, length, -1)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.chars = CharCNN()
        self.out = nn.Linear(256, 2)

    def forward(self, chars):
        return self.out(self.chars(chars).mean(1))


model = Model()
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
for _step in range(40):
    chars = torch.randint(0, 60, (8, 40, 16))
    loss = nn.functional.cross_entropy(model(chars), chars[:, 0, 0] % 2)
    opt.zero_grad()
    loss.backward()
    opt.step()
print("done")
