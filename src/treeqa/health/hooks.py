"""The forward hooks the doctor puts on a script's models, and keeping them off copies.

A copy of a watched model (``copy.deepcopy`` for a best-so-far model, ``AveragedModel``) or a
pickle of it (``torch.save(model)``) is made without the doctor's hooks: while the doctor is
installed, ``nn.Module.__reduce_ex__`` (which pickling, ``copy.copy`` and ``copy.deepcopy`` all
go through) leaves them out of the state it hands over. The copy is then what it would be in
plain python: a checkpoint has the same bytes, loads without treeqa (``weights_only`` too,
with the model's classes allowed), and ``torch.jit.script`` compiles it. ``torch.jit.script``
of the watched model itself runs with its hooks taken off for the while.
"""

from __future__ import annotations

import contextlib
import functools
import sys
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn

from treeqa.health import wrap

DETACHED = functools.partial(sys.audit, "treeqa.doctor.detached_hook")
"""What a ``ModelHook`` pickles as when it is pickled by itself (not as part of a module's
state, from which it is left out): a call that does nothing (``sys.audit`` of an event no one
listens to) and that needs nothing of treeqa to load."""

HOOK_KEYS = {
    "_forward_hooks": ("_forward_hooks_with_kwargs", "_forward_hooks_always_called"),
    "_forward_pre_hooks": ("_forward_pre_hooks_with_kwargs",),
}
"""A module's hook dictionaries, each with the dictionaries keyed by the same handle ids."""


class ModelHook(functools.partial):
    """A forward hook the doctor puts on a script's model: ``ModelHook(fn, *first)`` calls
    ``fn(*first, *args)``. A ``functools.partial``, called in C: the hooks run on every forward
    of the model, and a Python ``__call__`` was one more frame each time."""

    def __reduce__(self) -> str | tuple[Any, ...]:
        return DETACHED.__reduce__()

    def __deepcopy__(self, memo: dict[int, Any]) -> Any:
        return DETACHED


def unhooked(state: Any) -> Any:
    """A module's pickled state (its ``__dict__``, copied) without the doctor's hooks; the
    state itself when it holds none."""
    if not isinstance(state, dict):
        return state
    ours = {
        name: {key for key, hook in state.get(name, {}).items() if isinstance(hook, ModelHook)}
        for name in HOOK_KEYS
    }
    if not any(ours.values()):
        return state
    state = dict(state)  # the module's own __dict__ is left as it is
    for name, keys in ours.items():
        for key_name in (name, *HOOK_KEYS[name]) if keys else ():
            if key_name in state:
                kept = state[key_name]
                state[key_name] = type(kept)((k, v) for k, v in kept.items() if k not in keys)
    return state


def install() -> Callable[[], None]:
    """Leave the doctor's hooks out of copies and pickles of modules, and out of
    ``torch.jit.script``; returns the undo."""
    original_reduce = nn.Module.__reduce_ex__

    def reduce_ex(module: nn.Module, protocol: Any) -> Any:
        reduced = original_reduce(module, protocol)
        if isinstance(reduced, tuple) and len(reduced) > 2:
            return (*reduced[:2], unhooked(reduced[2]), *reduced[3:])
        return reduced

    undo_reduce = wrap.install_wrapper(nn.Module, "__reduce_ex__", original_reduce, reduce_ex)
    original_script = torch.jit.script

    def jit_script(
        obj: Any, optimize: Any = None, _frames_up: int = 0, *args: Any, **kwargs: Any
    ) -> Any:
        # A class (`@torch.jit.script class ...`) is compiled with the names of the frame
        # `_frames_up` above script's caller: one more up from here is still the script's.
        frames_up = _frames_up + 1
        if not isinstance(obj, nn.Module):
            return original_script(obj, optimize, frames_up, *args, **kwargs)
        with hooks_off(obj):
            return original_script(obj, optimize, frames_up, *args, **kwargs)

    undo_script = wrap.install_wrapper(torch.jit, "script", original_script, jit_script)

    def undo() -> None:
        undo_script()
        undo_reduce()

    return undo


@contextlib.contextmanager
def hooks_off(model: nn.Module) -> Iterator[None]:
    """``model`` without its ``ModelHook``s for a while: ``torch.jit.script`` compiles every
    forward hook of a module it scripts, and these are Python, not TorchScript."""
    kept = [
        (hooks, dict(hooks))
        for m in model.modules()
        for hooks in (m._forward_hooks, m._forward_pre_hooks)
        if any(isinstance(h, ModelHook) for h in hooks.values())
    ]
    for hooks, _ in kept:
        for key in [k for k, h in hooks.items() if isinstance(h, ModelHook)]:
            del hooks[key]
    try:
        yield
    finally:
        for hooks, before in kept:
            hooks.clear()
            hooks.update(before)
