"""The QANet report's exploding activations: a positional-encoding helper scaling by sqrt(d) in
every block.

Seven encoder blocks (depthwise-separable conv + feed-forward, layernorm + residual). With
``--bug`` each block's position helper multiplies its input by sqrt(d) before adding the signal,
so activations grow ~sqrt(d)-fold per block (2.6e5-fold over the seven) and the logits with
them: the cross-entropy saturates (here at exactly 0 from the first step, the argmax right by
the input token's sheer size; where it is wrong, a huge loss) and every gradient is exactly
zero, so nothing trains. Without it the signal is added once, unscaled, as in the paper, and
the loss falls to 0 by learning the task.

    python examples/qanet_sqrt_d_scaling.py --bug
    treeqa doctor -- python examples/qanet_sqrt_d_scaling.py --bug
"""

from __future__ import annotations

import argparse
import math

import torch
from torch import nn

L, V, D, BLOCKS = 40, 50, 64, 7


def position_signal(length: int, dim: int) -> torch.Tensor:
    pos = torch.arange(length)[:, None]  # [L, 1]
    freq = torch.exp(torch.arange(0, dim, 2) * (-math.log(10_000.0) / dim))  # [D/2]
    signal = torch.zeros(length, dim)
    signal[:, 0::2], signal[:, 1::2] = torch.sin(pos * freq), torch.cos(pos * freq)
    return signal  # [L, D]


class EncoderBlock(nn.Module):
    def __init__(self, bug: bool):
        super().__init__()
        self.bug = bug
        self.norm1, self.norm2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.depthwise = nn.Conv1d(D, D, 5, padding=2, groups=D)
        self.pointwise = nn.Conv1d(D, D, 1)
        self.ffn = nn.Linear(D, D)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x [B, L, D]
        if self.bug:
            x = x * math.sqrt(D) + position_signal(x.shape[1], D)  # the bug: scaled in every block
        h = self.norm1(x).transpose(1, 2)  # [B, D, L]
        x = x + torch.relu(self.pointwise(self.depthwise(h))).transpose(1, 2)
        return x + self.ffn(self.norm2(x))


class Model(nn.Module):
    def __init__(self, bug: bool):
        super().__init__()
        self.bug = bug
        self.embed = nn.Embedding(V, D)
        self.blocks = nn.ModuleList(EncoderBlock(bug) for _ in range(BLOCKS))
        self.start = nn.Linear(D, 1)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)  # [B, L, D]
        if not self.bug:
            x = x + position_signal(x.shape[1], D)  # once, at the stack input
        for block in self.blocks:
            x = block(x)
        return self.start(x).squeeze(-1)  # [B, L] raw logits


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bug", action="store_true")
    parser.add_argument("--steps", type=int, default=200)
    args = parser.parse_args()
    torch.manual_seed(0)
    model = Model(args.bug)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, betas=(0.8, 0.999), eps=1e-7)
    for step in range(1, args.steps + 1):
        tokens = torch.randint(2, V, (16, L))
        start = torch.randint(0, L, (16,))
        tokens[torch.arange(16), start] = 1
        loss = nn.functional.cross_entropy(model(tokens), start)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 40 == 0 or step == 1:
            print(f"step {step}: loss {loss.item():.3f}")


if __name__ == "__main__":
    main()
