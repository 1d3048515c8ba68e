"""The QANet report's "loss that won't go down": softmax applied before CrossEntropyLoss.

A tiny QANet-like span model (embeddings, a depthwise-separable conv encoder, start/end pointer
heads) learns to point at a marker token. With ``--bug`` the pointer heads emit softmax
probabilities into ``CrossEntropyLoss`` (which applies log-softmax again): gradients shrink and
the loss stalls near log(L). Without it they emit raw logits, as the paper's model does.

    python examples/qanet_softmax_into_ce.py --bug
    treeqa doctor -- python examples/qanet_softmax_into_ce.py --bug
"""

from __future__ import annotations

import argparse

import torch
from torch import nn

L, V, D = 40, 50, 32  # context length, vocabulary, hidden size
MARK = 1


class SpanModel(nn.Module):
    def __init__(self, bug: bool):
        super().__init__()
        self.bug = bug
        self.embed = nn.Embedding(V, D)
        self.depthwise = nn.Conv1d(D, D, 7, padding=3, groups=D)
        self.pointwise = nn.Conv1d(D, D, 1)
        self.start, self.end = nn.Linear(D, 1), nn.Linear(D, 1)

    def forward(self, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = self.embed(tokens).transpose(1, 2)  # [B, D, L]
        x = torch.relu(self.pointwise(self.depthwise(x))).transpose(1, 2)  # [B, L, D]
        p1, p2 = self.start(x).squeeze(-1), self.end(x).squeeze(-1)  # [B, L]
        if self.bug:
            return p1.softmax(-1), p2.softmax(-1)  # the bug: probabilities, not logits
        return p1, p2


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bug", action="store_true")
    parser.add_argument("--steps", type=int, default=300)
    args = parser.parse_args()
    torch.manual_seed(0)
    model = SpanModel(args.bug)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, betas=(0.8, 0.999), eps=1e-7)
    criterion = nn.CrossEntropyLoss()
    for step in range(1, args.steps + 1):
        tokens = torch.randint(2, V, (32, L))
        start = torch.randint(0, L - 3, (32,))
        tokens[torch.arange(32), start] = MARK
        p1, p2 = model(tokens)
        loss = criterion(p1, start) + criterion(p2, start + 2)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 50 == 0:
            print(f"step {step}: loss {loss.item():.3f}")


if __name__ == "__main__":
    main()
