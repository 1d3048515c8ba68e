"""Loss values brought to the host without making it wait for the device.

``loss.item()`` on a GPU makes the host wait until the step's kernels have run, once per step,
so the next step cannot be queued while this one computes. Instead each loss is copied into
pinned host memory without blocking, with an event behind the copy, and read once the event
has passed: usually by the next step, and at the latest when the run ends. A loss on any other
device is read at once by the monitor (``item()``), without this queue.
"""

from __future__ import annotations

from collections import deque
from typing import Any

import torch


class LossReadings:
    """Queue of (step, loss) readings; ``ready()`` returns those whose values have arrived."""

    def __init__(self) -> None:
        self.pending: deque[tuple[int, torch.Tensor, Any]] = deque()

    def add(self, step: int, loss: torch.Tensor) -> None:
        value = loss.detach()
        if value.numel() != 1:
            value = value.float().mean()
        event = None
        if value.device.type == "cuda":
            host = torch.empty((), dtype=value.dtype, pin_memory=True)
            host.copy_(value.reshape(()), non_blocking=True)
            event = torch.cuda.Event()
            event.record()
            value = host
        self.pending.append((step, value, event))

    def ready(self, wait: bool = False) -> list[tuple[int, float]]:
        """(step, value) in step order for every reading that has arrived (all, if ``wait``)."""
        out: list[tuple[int, float]] = []
        while self.pending:
            step, value, event = self.pending[0]
            if event is not None:
                if not wait and not event.query():
                    break
                event.synchronize()
            out.append((step, float(value)))
            self.pending.popleft()
        return out
