"""Weight averages evaluated with stale batch-norm statistics (``averaged-norm-not-updated``).

``torch.optim.swa_utils.AveragedModel`` (SWA, or an EMA of the weights) averages the
parameters of the model that trains; by default (``use_buffers=False``) not its buffers, so
its batch norms keep the running statistics copied when it was made. Those belong to other
weights than the average's, and an evaluation of the average in eval mode normalises with
them: ``swa_utils.update_bn(loader, swa_model)`` recomputes them, and is the step PyTorch's
SWA recipe ends with. Forgotten, the average reads worse than the model it averages (a
probe's: accuracy 0.91 against 1.00 with ``update_bn``).

``AveragedModel.forward`` and ``swa_utils.update_bn`` are wrapped for the run. An average
evaluated in eval mode, holding batch norm that tracks running statistics, with
``use_buffers=False``, that ``update_parameters`` was called on, and whose statistics were
never recomputed in the run (by ``update_bn``, or by a forward in train mode, which moves
them), makes the finding when the run ends, at the line of its first evaluation.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.optim.swa_utils import AveragedModel

from treeqa.health import sites
from treeqa.health.findings import Finding
from treeqa.health.wrap import Wrappers, note_calls, note_function_calls


class AveragedNorms:
    def __init__(self) -> None:
        # Averages evaluated with statistics not yet recomputed, by id (the script's objects
        # are gone by the run's end): the first evaluation's line, the batch norms, the
        # models averaged, and the id of the model it wraps.
        self.evaluated: dict[int, tuple[str, list[str], int, int]] = {}
        self.recomputed: set[int] = set()  # ids of models given to update_bn or run in train mode

    def install(self, wrappers: Wrappers) -> None:
        wrappers.add(note_calls(AveragedModel, "forward", self._ran))
        wrappers.add(note_function_calls(torch.optim.swa_utils, "update_bn", self._update_bn))

    def _ran(self, model: AveragedModel) -> None:
        key = id(model)
        if model.training:  # batch norm in train mode moves its running statistics
            self.recomputed.add(key)
        elif key in self.evaluated or key in self.recomputed or id(model.module) in self.recomputed:
            return
        elif not model.use_buffers and int(model.n_averaged):
            norms = [
                name
                for name, m in model.module.named_modules()
                if isinstance(m, nn.modules.batchnorm._NormBase) and m.track_running_stats
            ]
            if norms:
                where = sites.user_site(2)
                self.evaluated[key] = (where, norms, int(model.n_averaged), id(model.module))

    def _update_bn(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        model = kwargs.get("model", args[1] if len(args) > 1 else None)
        if isinstance(model, nn.Module):
            self.recomputed.add(id(model))

    def finish(self) -> Finding | None:
        """The run ended: the first average evaluated with the statistics it was made with
        and never recomputed after."""
        for key, (where, norms, averaged, inner) in self.evaluated.items():
            if key in self.recomputed or inner in self.recomputed:
                continue
            return Finding(
                "averaged-norm-not-updated",
                "warning",
                f"an AveragedModel of {averaged} models' weights was evaluated with the "
                f"batch-norm statistics copied when it was made (batch norms {', '.join(norms[:3])}"
                f"{', ...' if len(norms) > 3 else ''}): they belong to other weights than the "
                "average's, and swa_utils.update_bn never recomputed them in the run",
                where=where,
                evidence={"norms": norms[:20], "n_averaged": averaged},
            )
        return None
