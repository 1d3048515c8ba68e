"""Layers a model holds in plain Python containers (``self.blocks = [nn.Linear(...), ...]``,
a dict of heads) instead of ``nn.ModuleList``/``nn.ModuleDict``: the model does not register
them, so ``model.parameters()`` skips their weights (the optimiser built from it never updates
them, though they get gradients), and ``state_dict()``, ``.to()`` and ``.cuda()`` skip them
too: a checkpoint loses them, and on a GPU the forward fails, but on a CPU training runs on
with those layers stuck at their initial weights (``module-not-registered``). So is a plain tensor
made with ``requires_grad=True`` (``self.cls_token = torch.zeros(1, 1, d, requires_grad=True)``)
instead of an ``nn.Parameter``: it gets gradients, and no optimiser built from the model's
parameters holds it."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

import torch
from torch import nn

from treeqa.health import sites
from treeqa.health.findings import Finding

MODULE_STATE = frozenset(vars(nn.Module()))
"""Attributes every module has (its registries and flags): none of them is the model's own."""


def held(value: object, path: str, depth: int = 2) -> Iterator[tuple[str, nn.Parameter]]:
    """The parameters of the modules (and the parameters) in a list, tuple or dict
    ``value``, nested ``depth`` deep, each with its path (``blocks[0].weight``)."""
    if isinstance(value, list | tuple):
        items = [(f"{path}[{i}]", v) for i, v in enumerate(value)]
    elif isinstance(value, dict):
        items = [(f"{path}[{k!r}]", v) for k, v in value.items()]
    else:
        return
    for where, item in items:
        if isinstance(item, nn.Parameter):
            yield where, item
        elif isinstance(item, nn.Module):
            for name, p in item.named_parameters():
                yield f"{where}.{name}", p
        elif depth > 1:
            yield from held(item, where, depth - 1)


def unregistered(roots: Sequence[nn.Module]) -> list[tuple[nn.Module, str, str, torch.Tensor]]:
    """Parameters the models hold in plain containers and do not register anywhere else, and
    plain tensors they hold that require gradients (leaves: weights made by hand):
    ``(module, attribute, path, parameter)``. A list of the model's own registered layers (a
    convenience handle) is no such thing."""
    registered = {id(p) for root in roots for p in root.parameters()}
    found, seen = [], set()
    for i, root in enumerate(roots):
        prefix = f"model{i}." if i else ""
        for name, module in root.named_modules():
            for attr, value in vars(module).items():
                if attr in MODULE_STATE or not isinstance(
                    value, list | tuple | dict | torch.Tensor
                ):
                    continue
                at = f"{prefix}{name}.{attr}" if name else f"{prefix}{attr}"
                tensors: Iterable[tuple[str, torch.Tensor]] = (
                    [(at, value)] if isinstance(value, torch.Tensor) else held(value, at)
                )
                for path, p in tensors:
                    if not _trained_leaf(p):  # frozen, or computed: not trained
                        continue
                    if id(p) not in registered and id(p) not in seen:
                        seen.add(id(p))
                        found.append((module, attr, path, p))
    return found


def _trained_leaf(p: torch.Tensor) -> bool:
    """A tensor that requires gradients and is no view or result of an op. FSDP1 keeps its
    layers' weights as plain views of its flat parameter, which torch refuses to read once the
    flat parameter has changed in place: those are views, not weights made by hand."""
    try:
        return p.requires_grad and p.is_leaf
    except RuntimeError:
        return False


def module_not_registered(
    found: Sequence[tuple[nn.Module, str, str, torch.Tensor]], trained: bool
) -> Finding:
    """``found``: the unregistered parameters that get gradients; ``trained``: some
    optimiser holds them all (the script added them by hand), so only saving and moving the
    model miss them."""
    module, attr = found[0][0], found[0][1]
    holders = sorted({path.split("[")[0] for _, _, path, _ in found})
    values = sum(p.numel() for *_, p in found)
    kept = type(getattr(module, attr))
    if issubclass(kept, torch.Tensor):  # weights made by hand, not as nn.Parameter
        one = len(found) == 1
        held_in = (
            f"{', '.join(holders[:3])} {'is a plain tensor' if one else 'are plain tensors'} "
            f"with requires_grad=True ({values} values), not "
            f"{'an nn.Parameter' if one else 'nn.Parameters'}, which the model does not register"
        )
    else:
        held_in = (
            f"{len(found)} parameter tensors ({values} values) are held in a plain "
            f"{kept.__name__} ({', '.join(holders[:3])}), which the model does not register"
        )
    fate = (
        "an optimiser holds them, but state_dict(), .to() and .cuda() skip them: a saved "
        "model loses them"
        if trained
        else "the optimiser built from model.parameters() never updates them, though they get "
        "gradients, and state_dict(), .to() and .cuda() skip them too"
    )
    if len(found) == 1:
        fate = fate.replace("them", "it").replace("they get", "it gets")
    return Finding(
        "module-not-registered",
        "warning",
        f"{held_in}: {fate}",
        where=sites.assignment_site([sites.definition_file(type(module))], attr, True)
        or holders[0],
        evidence={
            "holders": holders,
            "parameters": [path for _, _, path, _ in found][:20],
            "values": values,
            "trained": trained,
        },
    )
