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
version counters of each of the average's batch norms' statistics (with ``use_buffers=False``,
for batch norms that track running statistics). From the first such call, the batch norms'
common ``forward`` is wrapped too, to compare them when one of those runs in eval mode, as
the average runs or as its ``.module`` does (``evaluate(swa_model.module)``): unchanged since
the average's last update (nothing recomputed them: ``update_bn``, a forward in train mode,
statistics set by hand), the evaluation is noted at the script's line that called the
outermost module; a later evaluation with the statistics recomputed clears it. One still noted
when the run ends makes the finding. Other scripts pay nothing; these, a set lookup per batch
norm's forward.
"""

from __future__ import annotations

import weakref
from typing import Any

import torch
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm
from torch.optim.swa_utils import AveragedModel

from treeqa.health import sites
from treeqa.health.findings import Finding
from treeqa.health.wrap import Watched, Wrappers, note_calls_of, note_function_results


class AveragedNorms:
    def __init__(self) -> None:
        self.wrappers: Wrappers | None = None
        self.forward_wrapped = False
        # the averages' batch norms, whose eval-mode forwards are noted
        self.watched = Watched()
        # by a batch norm's id: the norm and its average (weakly), and the version counters of
        # its statistics after the average's last update_parameters
        self.norms: dict[int, tuple[weakref.ref[nn.Module], weakref.ref[AveragedModel], int]] = {}
        # by the average's id (the script's objects are gone by the run's end): its last
        # evaluation, where it read statistics not recomputed since: the line, the batch
        # norms, the models averaged
        self.evaluated: dict[int, tuple[str, list[str], int]] = {}

    def install(self, wrappers: Wrappers) -> None:
        self.wrappers = wrappers
        wrappers.add(note_function_results(AveragedModel, "update_parameters", self._averaged))

    def _averaged(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any], _: Any) -> None:
        """``update_parameters`` has returned (``args[0]``: the average)."""
        model = args[0]
        if model.use_buffers:
            return
        average = weakref.ref(model)
        for m in model.module.modules():
            if isinstance(m, _BatchNorm) and m.track_running_stats:
                self.norms[id(m)] = (weakref.ref(m), average, _versions(m))
                self.watched.ids.add(id(m))
        if self.watched.ids and not self.forward_wrapped and self.wrappers is not None:
            self.forward_wrapped = True
            self.wrappers.add(note_calls_of(_BatchNorm, "forward", self._ran, self.watched))

    def _ran(self, norm: nn.Module, *args: Any) -> None:
        """A batch norm of an average's runs its forward."""
        norm_ref, average_ref, versions = self.norms.get(id(norm), (None, None, 0))
        model = average_ref() if average_ref is not None else None
        if norm.training or norm_ref is None or norm_ref() is not norm or model is None:
            return
        key = id(model)
        if _versions(norm) != versions:  # recomputed since the average's last update
            self.evaluated.pop(key, None)
        elif key not in self.evaluated:
            self.evaluated[key] = (sites.models_caller(), _norms(model), int(model.n_averaged))

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
        if isinstance(m, _BatchNorm) and m.track_running_stats
    ]


def _versions(norm: nn.Module) -> int:
    """The version counters of a batch norm's running mean and variance, added up."""
    return sum(
        b._version for b in (norm.running_mean, norm.running_var) if isinstance(b, torch.Tensor)
    )
