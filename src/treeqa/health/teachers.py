"""Frozen models run in train mode: a teacher that distils into a student, left as it was
built or loaded (``nn.Module``s start in train mode, and ``student.train()`` does not reach
it), so its dropout perturbs the targets it gives and its batch norm normalises with each
batch's statistics and moves its running ones (``frozen-in-train-mode``).

The same holds for frozen batch norm inside a model the clock trains: a backbone frozen with
``requires_grad_(False)`` and put in eval mode once, which ``model.train()`` (Lightning's
``fit``, each epoch of a loop) puts back in train mode, so each batch moves the running
statistics the frozen weights were trained with. Its layers are read on sampled steps: a
batch norm in train mode, its weights frozen, whose count of batches tracked changed since
the sampled step before (its version counter: no host sync), on ``STEPS`` sampled steps in a row, makes
the finding at the run's end, unless its weights' first values moved since (a momentum copy
inside the model: MoCo's key encoder, averaged through ``param_k.data = ...``). A frozen base with dropout alone (a language model's, with
only its head trained) is left: its dropout changes no state.

A model's forward on a sampled step is noted where the clock does not train it, it runs
without gradients (under ``no_grad`` or with ``requires_grad`` off) in train mode, and no
stepping optimiser holds its weights. Judged when the run ends: noted on ``STEPS`` sampled
steps in a row or more, its weights as they were all along (their version counters and
storage unchanged, and at the end the first ``SAMPLED`` values of its first weight as they were
first noted) and a dropout or batch-norm layer in train mode, it makes the finding. A model whose weights
ever move is let go for good: a momentum teacher (BYOL, DINO, MoCo: an average of the student,
often in train mode on purpose) or a target network copied from the policy now and then (a
DroQ-style one, with dropout, first copied at step 100, read as frozen at step 30 when judged
on the way).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable

import torch
from torch import nn

from treeqa.health import checks, sites, slips
from treeqa.health.findings import Finding

STEPS = 5
"""Sampled steps in a row on which a frozen model ran in train mode, at least."""
SAMPLED = 8
"""Values of a model's first weight kept, compared when the run ends (one host sync)."""


def _versions(model: nn.Module) -> int:
    """Its weights' version counters, and where their storage is: an update in place moves the
    first, ``p.data = m * p.data + (1 - m) * q.data`` (MoCo's momentum update) the second."""
    return sum(p._version + _address(p) for p in model.parameters())


def _address(p: torch.Tensor) -> int:
    try:
        return p.data_ptr()
    except RuntimeError:  # no storage of its own (a sparse tensor's)
        return 0


def _sample(tensors: Iterable[torch.Tensor]) -> torch.Tensor | None:
    """A copy of the first weight's first values, to tell at the end whether they moved where
    no counter does (``p.data.mul_(m).add_(q.data, alpha=1 - m)``)."""
    first = next(iter(tensors), None)
    return None if first is None else first.detach().reshape(-1)[:SAMPLED].clone()


def _moved(sample: torch.Tensor | None, tensors: Iterable[torch.Tensor]) -> bool:
    return _differ(sample, _sample(tensors))


def _differ(sample: torch.Tensor | None, now: torch.Tensor | None) -> bool:
    return sample is not None and now is not None and not torch.equal(sample, now)


class FrozenInTrainMode:
    def __init__(self, mode_dependent: Callable[[nn.Module], list[str]]) -> None:
        self.mode_dependent = mode_dependent  # a model's layers in train mode that matter
        # id -> (the model, weakly; its weights' versions; sampled steps in a row seen)
        self.models: dict[int, tuple[weakref.ref[nn.Module], int, int]] = {}
        self.samples: dict[int, torch.Tensor | None] = {}  # of the models and norms noted
        # Of each model noted: its class and layers that depend on the mode, and its sample at
        # the last sampled step it was seen on (no host read): judged by them when it is gone
        # by the run's end (a script's models are freed as it ends, before the report)
        self.kinds: dict[int, tuple[str, list[str]]] = {}
        self.latest: dict[int, torch.Tensor | None] = {}
        self.moved: set[int] = set()  # models whose weights moved: not frozen
        self.seen: set[int] = set()  # noted on this sampled step
        self.where: dict[int, str] = {}  # the line of the script that ran each one
        # a frozen batch norm of the trained models -> (its name, its count of batches' version,
        # sampled steps in a row it moved, the norm weakly)
        self.norms: dict[int, tuple[str, int, int, weakref.ref[nn.Module]]] = {}
        self.said = False

    def forward(self, model: nn.Module) -> None:
        """On a sampled step, a model the clock does not train starts a forward."""
        key = id(model)
        if self.said or key in self.moved or not model.training or key in self.seen:
            return
        if torch.is_grad_enabled() and any(p.requires_grad for p in model.parameters()):
            return
        first = next(model.parameters(), None)
        if first is not None and checks.untraceable(first):  # inside functional_call under vmap
            return  # (its weights are the transform's: no storage to read)
        self.seen.add(key)
        versions = _versions(model)
        ref, before, steps = self.models.get(key, (weakref.ref(model), versions, 0))
        if versions != before:
            self.moved.add(key)
            self.models.pop(key, None)
            self._forget(key)
            return
        self.models[key] = (ref, versions, steps)
        self.where[key] = sites.user_site()
        if key not in self.samples:
            self.samples[key] = _sample(model.parameters())
            self.kinds[key] = (type(model).__name__, self.mode_dependent(model))

    def end_sampled_step(self, held: set[int]) -> None:
        """After a sampled step: count the models noted on it (``held``: the stepping
        optimisers' parameters, by id); one not noted starts its count again, unless it has
        made it (a teacher used for the first part of a run)."""
        seen, self.seen = self.seen, set()
        for key, (ref, versions, steps) in list(self.models.items()):
            model = ref()
            if model is None or any(id(p) in held for p in model.parameters()):
                self.moved.add(key)
                del self.models[key]
                self._forget(key)
            elif key in seen:
                self.models[key] = (ref, versions, steps + 1)
                self.latest[key] = _sample(model.parameters())
            elif steps < STEPS:
                del self.models[key]
                self._forget(key)

    def _forget(self, key: int) -> None:
        for kept in (self.samples, self.kinds, self.latest):
            kept.pop(key, None)

    def frozen_norms(self, roots: list[nn.Module]) -> None:
        """On a sampled step: the trained models' frozen batch norms that moved their running
        statistics since the sampled step before."""
        if self.said:
            return
        seen = {}
        for i, root in enumerate(roots):
            for name, m in root.named_modules():
                if not (_frozen_norm(m) and m.training):
                    continue
                # (the kernel updates the running mean in place without a new version; the
                # count of batches it tracked is added to in Python: its version moves)
                version = m.num_batches_tracked._version
                label = (f"model{i}." if i else "") + (name or type(root).__name__)
                _, before, steps, _ = self.norms.get(id(m), (label, -1, 0, None))
                moving = steps + 1 if version != before >= 0 else 0
                seen[id(m)] = (label, version, moving, weakref.ref(m))
                if id(m) not in self.samples:
                    self.samples[id(m)] = _sample(m.parameters(recurse=False))
        for key in self.norms.keys() - seen.keys():
            self.samples.pop(key, None)
        self.norms = seen

    def finish(self) -> Finding | None:
        """The run ended: the first model noted on ``STEPS`` sampled steps in a row or more
        whose weights never moved."""
        for key, (ref, versions, steps) in self.models.items():
            model = ref()
            if steps < STEPS or (model is not None and _versions(model) != versions):
                continue
            now = _sample(model.parameters()) if model is not None else self.latest.get(key)
            if _differ(self.samples.get(key), now):
                continue  # a momentum teacher updated through .data
            # (the layers as they ran: a teacher put in eval mode for the final evaluation ran
            # the whole training in train mode all the same)
            name, layers = self.kinds[key]
            found = slips.frozen_in_train_mode(name, steps, layers)
            if found is not None:
                found.where = self.where.get(key, "")
                self.said = True
                self.models.clear()
                return found
        moved = [
            label
            for key, (label, _, steps, ref) in self.norms.items()
            if steps >= STEPS
            and (norm := ref()) is not None
            and not _moved(self.samples.get(key), norm.parameters(recurse=False))
        ]  # (a frozen norm whose weights moved: a momentum copy inside the model, MoCo's)
        if moved:
            self.said = True
            return slips.frozen_norm_in_train_mode(moved)
        return None


def _frozen_norm(m: nn.Module) -> bool:
    """A batch norm that keeps running statistics (with a momentum: ``update_bn``'s
    recalibration has none) and whose affine weights are frozen."""
    weights = [*m.parameters(recurse=False)]
    return (
        isinstance(m, nn.modules.batchnorm._BatchNorm)
        and m.track_running_stats
        and m.momentum is not None
        and m.num_batches_tracked is not None
        and bool(weights)
        and not any(p.requires_grad for p in weights)
    )
