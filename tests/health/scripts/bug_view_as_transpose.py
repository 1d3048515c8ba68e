"""Bug: a text CNN turns its [B, T, E] embeddings into the [B, E, T] that Conv1d reads with
view instead of transpose: each "channel" row of the result holds pieces of several tokens'
embeddings, so the convolution slides over a scramble of features and positions."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
V, T, E, C = 100, 20, 8, 3  # vocabulary, tokens, embedding width, classes
tokens = torch.randint(C, V, (3000, T))
labels = torch.arange(3000) % C
tokens[torch.arange(3000), torch.randint(0, T, (3000,))] = labels  # a class's marker token


class TextCNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(V, E)
        self.conv = nn.Conv1d(E, 32, 3, padding=1)
        self.out = nn.Linear(32, C)

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        h = self.embed(t)  # [B, T, E]
        h = h.view(t.size(0), E, T)  # bug: h.transpose(1, 2) moves the dims
        return self.out(F.relu(self.conv(h)).amax(2))


model = TextCNN()
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
for _ in range(120):
    i = torch.randint(0, 3000, (64,))
    loss = F.cross_entropy(model(tokens[i]), labels[i])
    opt.zero_grad()
    loss.backward()
    opt.step()
print(round(loss.item(), 3))
