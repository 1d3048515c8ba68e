"""A batch of SQuAD examples as padded index tensors.

Shape letters: B examples, L context tokens, J question tokens, W characters per token.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch


@dataclass(frozen=True)
class QABatch:
    context_words: torch.Tensor  # [B, L] int64, 0 = padding, 1 = out of vocabulary
    context_chars: torch.Tensor  # [B, L, W] int64, 0 = padding
    question_words: torch.Tensor  # [B, J] int64
    question_chars: torch.Tensor  # [B, J, W] int64
    starts: torch.Tensor  # [B] int64 first answer token; -1 = no answer (SQuAD 2.0)
    ends: torch.Tensor  # [B] int64 last answer token (inclusive); -1 = no answer
    index: torch.Tensor  # [B] int64 row of each example in its prepared split

    @property
    def num_examples(self) -> int:
        return int(self.index.numel())

    def to(self, device: torch.device | str) -> QABatch:
        return QABatch(
            **{f.name: getattr(self, f.name).to(device, non_blocking=True) for f in fields(self)}
        )
