"""Dropouts that train at TensorFlow's keep probability: layers read on sampled steps'
forwards, functional dropouts wrapped for a trained model's forward."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from treeqa.health.dropouts import KEEP, Dropouts, layer_dropout
from treeqa.health.findings import Finding
from treeqa.health.model_inputs import ModelInputs


@pytest.mark.parametrize(
    "layer",
    [
        nn.Dropout(0.9),
        nn.Dropout(KEEP),
        nn.Dropout2d(0.8),
        nn.AlphaDropout(0.8),
        nn.LSTM(4, 4, num_layers=2, dropout=0.8),
        nn.MultiheadAttention(8, 2, dropout=0.9),
        nn.Dropout(1.0),
    ],
)
def test_a_layer_that_trains_at_a_keep_probability_is_named(layer: nn.Module) -> None:
    found = layer_dropout("encoder.drop", layer)
    assert found is not None and found.code == "dropout-as-keep-probability"
    assert found.where.startswith("encoder.drop") and found.evidence["layer"] == "encoder.drop"
    assert ("every unit" in found.message) == (found.evidence["p"] == 1.0)


@pytest.mark.parametrize(
    "layer",
    [
        nn.Dropout(0.5),
        nn.Dropout(0.7),
        nn.Dropout(0.9).eval(),  # Monte Carlo or not, eval mode trains nothing
        nn.GRU(4, 4, num_layers=1),  # (a one-layer recurrent layer applies no dropout)
        nn.MultiheadAttention(8, 2, dropout=0.1),
        nn.Linear(4, 4),
    ],
)
def test_dropout_meant_as_such_is_not_named(layer: nn.Module) -> None:
    assert layer_dropout("layer", layer) is None


def test_the_layers_of_a_sampled_forward_are_read() -> None:
    found: list[Finding] = []
    inputs = ModelInputs(found.append)
    inputs.begin_step()
    x = torch.randn(4, 8)
    drop = nn.Dropout(0.9)
    inputs.note("head.drop", drop, (x,), drop(x))
    inputs.judge(None)
    assert [f.code for f in found] == ["dropout-as-keep-probability"]


def test_functional_dropout_in_a_trained_forward_is_named_at_the_scripts_line() -> None:
    found: list[Finding] = []
    check = Dropouts(found.append)
    x = torch.randn(4, 8)
    F.dropout(x, 0.9, True)  # outside a sampled forward: not wrapped
    check.begin(training=True)
    try:
        F.dropout(x, 0.5, True)
        F.dropout(x, 0.9, training=False)
        F.alpha_dropout(x, 0.9)  # training defaults to False
        nn.Dropout(0.9)(x)  # the layer's own call: the layer check names it
        assert found == []
        F.dropout(x, p=0.9, training=True)
    finally:
        check.end()
    assert [f.code for f in found] == ["dropout-as-keep-probability"]
    assert found[0].where.startswith(__file__)
    assert "F.dropout(x, p=0.9)" in found[0].message
    assert F.dropout.__name__ == "dropout"  # unwrapped after the forward
    check.begin(training=True)  # said once: nothing wrapped again
    assert F.dropout.__name__ == "dropout"


def test_a_forward_without_gradients_or_a_mask_of_ones_is_not_read() -> None:
    """A saliency probe run through a layer in training mode under no_grad trains nothing, and
    word dropout drawn as ``F.dropout(ones, 0.8)`` is a mask whose scale is never read."""
    with torch.no_grad():
        assert layer_dropout("probe", nn.Dropout(0.9)) is None
    found: list[Finding] = []
    check = Dropouts(found.append)
    check.begin(training=True)
    try:
        F.dropout(torch.ones(4, 8), 0.8, True)
    finally:
        check.end()
    assert found == []
