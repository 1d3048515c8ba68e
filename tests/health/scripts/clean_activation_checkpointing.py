"""Clean: activation checkpointing, torch.utils.checkpoint. A transformer-like stack whose
blocks are recomputed in the backward: non-reentrant (the default torch recommends) for the
first half of the run, reentrant (use_reentrant=True, older code's) for the second, and
checkpoint_sequential over an MLP; dropout in the blocks, their RNG state restored on
recomputation. Each block's forward thus runs twice a step, once inside the backward."""

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint, checkpoint_sequential

torch.manual_seed(0)


class Block(nn.Module):
    def __init__(self, dim=64):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.ff = nn.Sequential(
            nn.Linear(dim, 4 * dim), nn.GELU(), nn.Dropout(0.1), nn.Linear(4 * dim, dim)
        )

    def forward(self, x):
        return x + self.ff(self.norm(x))


class Model(nn.Module):
    def __init__(self, vocab=100, dim=64, classes=4):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.blocks = nn.ModuleList(Block(dim) for _ in range(4))
        self.head = nn.Sequential(nn.Linear(dim, dim), nn.ReLU(), nn.Linear(dim, dim), nn.ReLU())
        self.out = nn.Linear(dim, classes)
        self.reentrant = False

    def forward(self, tokens):  # tokens [B, T]
        x = self.embed(tokens)  # [B, T, D]
        if not self.training:  # (as transformers' models do: checkpoints in training only)
            return self.out(self.head(nn.Sequential(*self.blocks)(x)[:, 0]))
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=self.reentrant)
        x = checkpoint_sequential(self.head, 2, x[:, 0], use_reentrant=self.reentrant)
        return self.out(x)


model = Model()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
losses = []
for step in range(200):
    model.reentrant = step >= 100
    tokens = torch.randint(0, 100, (32, 24))
    labels = tokens[:, 0] % 4  # the first token's class
    loss = nn.functional.cross_entropy(model(tokens), labels)
    losses.append(round(loss.item(), 4))
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step % 50 == 49:
        model.eval()
        with torch.no_grad():
            tokens = torch.randint(0, 100, (64, 24))
            acc = (model(tokens).argmax(1) == tokens[:, 0] % 4).float().mean()
        model.train()
print(f"accuracy {acc.item():.2f}")
print("losses", *losses)
