"""The doctor's model hooks stay off copies and pickles of the models it watches."""

import copy
import io
import pickle

import torch
from torch import nn

from treeqa.health import hooks


def scripts_own_hook(*args: object) -> None:
    pass


def hooked(model: nn.Module) -> nn.Module:
    model.register_forward_pre_hook(hooks.ModelHook(lambda *a: None), with_kwargs=True)
    model.register_forward_hook(hooks.ModelHook(lambda *a: None), always_call=True)
    model.register_forward_hook(scripts_own_hook)  # it stays
    return model


def test_copies_and_pickles_leave_the_doctors_hooks_out_and_keep_the_scripts_own():
    undo = hooks.install()
    try:
        # An LSTM has its own __getstate__; a Sequential has Module's.
        for model in (hooked(nn.LSTM(3, 4)), hooked(nn.Sequential(nn.Linear(3, 4)))):
            buffer = io.BytesIO()
            torch.save(model, buffer)
            buffer.seek(0)
            for copied in (
                copy.deepcopy(model),
                copy.copy(model),
                torch.load(buffer, weights_only=False),
            ):
                assert len(copied._forward_hooks) == 1
                assert not any(
                    isinstance(h, hooks.ModelHook) for h in copied._forward_hooks.values()
                )
                assert not copied._forward_pre_hooks and not copied._forward_pre_hooks_with_kwargs
                assert not copied._forward_hooks_always_called
            assert len(model._forward_hooks) == 2 and len(model._forward_pre_hooks) == 1
    finally:
        undo()
    assert nn.Module.__reduce_ex__ is object.__reduce_ex__


def test_a_hook_pickled_by_itself_loads_as_a_call_that_does_nothing():
    loaded = pickle.loads(pickle.dumps(hooks.ModelHook(print)))
    assert loaded is not print and loaded("ignored") is None


def plus_one(n: int) -> int:
    return n + 1


class Counter:
    """A TorchScript class whose method calls a function of its module."""

    def __init__(self, n: int):
        self.n = plus_one(n)


def test_a_class_scripted_through_the_wrapper_resolves_its_callers_names():
    """``@torch.jit.script`` on a class looks its names up in the caller's frame; through the
    doctor's wrapper that is still the caller's (``import torch.distributed.optim`` compiles
    such classes and failed on a name of their module)."""
    undo = hooks.install()
    try:
        scripted = torch.jit.script(Counter)
    finally:
        undo()
    assert scripted(1).n == 2
