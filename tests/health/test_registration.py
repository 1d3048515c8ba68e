"""Layers held in plain containers, which the model does not register (module-not-registered)."""

from __future__ import annotations

from torch import nn

from treeqa.health.registration import module_not_registered, unregistered


class Heads(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Linear(4, 4)
        self.heads = {"a": nn.Linear(4, 2), "b": [nn.Linear(4, 2)]}  # a dict, a list inside
        self.scale = [nn.Parameter(nn.Linear(1, 1).weight.detach())]
        self.handles = [self.body]  # a handle on a registered layer: not it


def test_plain_containers_are_searched_for_layers_and_parameters() -> None:
    model = nn.Sequential(Heads())
    found = unregistered([model])
    paths = [path for _, _, path, _ in found]
    assert paths == [
        "0.heads['a'].weight",
        "0.heads['a'].bias",
        "0.heads['b'][0].weight",
        "0.heads['b'][0].bias",
        "0.scale[0]",
    ]
    assert {attr for _, attr, _, _ in found} == {"heads", "scale"}


def test_the_finding_says_what_is_lost_whether_or_not_an_optimiser_holds_them() -> None:
    found = unregistered([Heads()])[:2]
    untrained = module_not_registered(found, trained=False)
    assert untrained.code == "module-not-registered" and untrained.severity == "warning"
    assert "plain dict (heads)" in untrained.message and "never updates them" in untrained.message
    assert untrained.evidence["values"] == 10 and untrained.where.endswith(
        "test_registration.py:14"
    )
    trained = module_not_registered(found, trained=True)
    assert "a saved model loses them" in trained.message
