"""SST metrics, one module for training, evaluation, benchmarks and serving.

Root and all-node accuracy, fine-grained (5-way) and binary. A 5-class model is also scored
on the binary task by comparing p(0)+p(1) with p(3)+p(4) on non-neutral gold nodes; a 3-class
(negative / neutral / positive, task binary3) model by comparing p(0) with p(2).
Shape letters: N nodes, C classes (5, 3 or 2).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from treeqa.data.sst import scored_as, targets


def binary_predictions(logits: torch.Tensor) -> torch.Tensor:
    """[N] 1 = positive, from [N, 5] fine, [N, 3] binary3 or [N, 2] binary logits."""
    if logits.shape[1] == 2:
        return logits.argmax(1)
    if logits.shape[1] == 3:  # Tai et al.: negative unless p(positive) is the larger
        return (logits[:, 2] > logits[:, 0]).long()
    p = logits.float().softmax(1)  # [N, 5]
    return (p[:, 3:].sum(1) > p[:, :2].sum(1)).long()


@dataclass
class SentimentMetrics:
    """Accumulates correct/total counts over batches; ``compute()`` gives accuracies in [0, 1]."""

    counts: dict[str, list[int]] = field(default_factory=dict)

    def _add(self, name: str, correct: torch.Tensor) -> None:
        c = self.counts.setdefault(name, [0, 0])
        c[0] += int(correct.sum())
        c[1] += int(correct.numel())

    def update(self, logits: torch.Tensor, labels: torch.Tensor, roots: torch.Tensor) -> None:
        """logits [N, C], labels [N] fine gold (-1 = unlabelled), roots [B] node indices."""
        logits, labels, roots = logits.detach().cpu(), labels.cpu(), roots.cpu()
        is_root = torch.zeros_like(labels, dtype=torch.bool)
        is_root[roots] = True
        labelled = labels >= 0
        if logits.shape[1] == 5:
            right = logits.argmax(1) == labels
            self._add("fine_root", right[is_root & labelled])
            self._add("fine_all", right[labelled])
        gold = torch.from_numpy(targets(labels.numpy(), "binary"))
        polar = gold >= 0
        right = binary_predictions(logits) == gold
        self._add("binary_root", right[is_root & polar])
        self._add("binary_all", right[polar])

    @staticmethod
    def names(classes: int) -> list[str]:
        """The keys ``compute`` gives for a model of ``classes`` outputs (5, 3 or 2)."""
        parts = (["fine_root", "fine_all"] if classes == 5 else []) + ["binary_root", "binary_all"]
        return [f"{p}_acc" for p in parts] + ["root_acc", "all_acc"]

    def compute(self, task: str) -> dict[str, float]:
        """Accuracies; ``root_acc``/``all_acc`` are those of ``task`` (fine or binary)."""
        out = {f"{k}_acc": c / n for k, (c, n) in self.counts.items() if n}
        scored = scored_as(task)
        out["root_acc"] = out.get(f"{scored}_root_acc", float("nan"))
        out["all_acc"] = out.get(f"{scored}_all_acc", float("nan"))
        return out
