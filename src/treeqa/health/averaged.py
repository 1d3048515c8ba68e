"""Weight averages evaluated with batch-norm statistics of other weights
(``averaged-norm-not-updated``).

``torch.optim.swa_utils.AveragedModel`` (SWA, or an EMA of the weights) averages the
parameters of the model that trains; by default (``use_buffers=False``) not its buffers, which
``update_parameters`` copies from that model as they are. Its batch norms then hold running
statistics of the model's current weights, not of the average's, and an evaluation of the
average in eval mode normalises with them: ``swa_utils.update_bn(loader, swa_model)``
recomputes them, the step PyTorch's SWA recipe ends with. Forgotten, the average reads worse
than it is (a probe's: accuracy 0.91 against 1.00 with ``update_bn``).

``AveragedModel.update_parameters`` is wrapped for the run to note, after each call, the
version counters of the average's batch-norm statistics, and ``AveragedModel.forward`` to
compare them when the average runs in eval mode: unchanged since its last update (nothing
recomputed them: ``update_bn``, a forward in train mode, statistics set by hand), with
``use_buffers=False`` and batch norm that tracks running statistics, the evaluation is noted
at its line; a later evaluation with the statistics recomputed clears it. One still noted when
the run ends makes the finding.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.optim.swa_utils import AveragedModel

from treeqa.health import sites
from treeqa.health.findings import Finding
from treeqa.health.wrap import Wrappers, note_calls, note_function_results


class AveragedNorms:
    def __init__(self) -> None:
        # by the average's id (the script's objects are gone by the run's end): the version
        # counters of its batch-norm statistics after its last update_parameters
        self.updated: dict[int, int] = {}
        # its last evaluation, where it read statistics not recomputed since: the line, the
        # batch norms, the models averaged
        self.evaluated: dict[int, tuple[str, list[str], int]] = {}

    def install(self, wrappers: Wrappers) -> None:
        wrappers.add(note_calls(AveragedModel, "forward", self._ran))
        wrappers.add(note_function_results(AveragedModel, "update_parameters", self._averaged))

    def _averaged(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any], _: Any) -> None:
        """``update_parameters`` has returned (``args[0]``: the average)."""
        model = args[0]
        if not model.use_buffers:
            self.updated[id(model)] = _versions(model)

    def _ran(self, model: AveragedModel) -> None:
        key = id(model)
        if model.training or key not in self.updated:
            return
        if _versions(model) != self.updated[key]:  # recomputed since its last update
            self.evaluated.pop(key, None)
            return
        norms = _norms(model)
        if norms and key not in self.evaluated:
            self.evaluated[key] = (sites.user_site(2), norms, int(model.n_averaged))

    def finish(self) -> Finding | None:
        """The run ended: an average whose last evaluation read statistics of other weights."""
        for where, norms, averaged in self.evaluated.values():
            return Finding(
                "averaged-norm-not-updated",
                "warning",
                f"an AveragedModel of {averaged} models' weights was evaluated with batch-norm "
                f"statistics not recomputed for its weights (batch norms {', '.join(norms[:3])}"
                f"{', ...' if len(norms) > 3 else ''}): update_parameters copies the trained "
                "model's, which belong to other weights than the average's, and nothing "
                "recomputed them after its last update",
                where=where,
                evidence={"norms": norms[:20], "n_averaged": averaged},
            )
        return None


def _norms(model: AveragedModel) -> list[str]:
    return [
        name
        for name, m in model.module.named_modules()
        if isinstance(m, nn.modules.batchnorm._NormBase) and m.track_running_stats
    ]


def _versions(model: AveragedModel) -> int:
    """The version counters of its batch norms' running means and variances, added up."""
    return sum(
        b._version
        for m in model.module.modules()
        if isinstance(m, nn.modules.batchnorm._NormBase) and m.track_running_stats
        for b in (m.running_mean, m.running_var)
        if isinstance(b, torch.Tensor)
    )
