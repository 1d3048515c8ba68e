"""The slow QANet of the failure report, for ``benchmarks/bench_qanet.py`` only.

Same parameters and maths as ``qanet.QANet`` except two pieces written the obvious way: a
dense 2-D character CNN (Conv2d with a 1 x k kernel over [B, C, L, W]) and a trilinear
similarity that materialises the [B, L, J, 3D] tensor [c; q; c*q].
Shape letters: B batch, L context tokens, J question tokens, W characters, D width, C char width.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from treeqa.models.qanet import ContextQueryAttention, QANet, QANetConfig


class CharCNN2d(nn.Module):
    """Character embeddings [B, L, W, C] -> [B, L, C] through a dense Conv2d (C*C*k weights)."""

    def __init__(self, dim: int, kernel: int):
        super().__init__()
        self.conv = nn.Conv2d(dim, dim, (1, kernel), padding=(0, kernel // 2))

    def forward(self, chars: torch.Tensor) -> torch.Tensor:
        h = F.relu(self.conv(chars.permute(0, 3, 1, 2)))  # [B, C, L, W]
        return h.max(3).values.transpose(1, 2)  # [B, L, C]


class MaterialisedCQAttention(ContextQueryAttention):
    """S = [c; q; c*q] . w + b with the [B, L, J, 3D] tensor built in memory."""

    def similarity(self, c: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
        length, qlength = c.size(1), q.size(1)
        cc = c[:, :, None, :].expand(-1, -1, qlength, -1)  # [B, L, J, D]
        qq = q[:, None, :, :].expand(-1, length, -1, -1)  # [B, L, J, D]
        return torch.cat([cc, qq, cc * qq], 3) @ self.w + self.bias  # [B, L, J, 3D] -> [B, L, J]


class NaiveQANet(QANet):
    def __init__(
        self,
        config: QANetConfig,
        vocab_size: int,
        num_chars: int,
        vectors: np.ndarray | torch.Tensor | None = None,
    ):
        super().__init__(config, vocab_size, num_chars, vectors)
        self.embedding.char_cnn = CharCNN2d(config.char_dim, config.char_kernel)
        self.cq_attention = MaterialisedCQAttention(config.d_model, config.dropout)
