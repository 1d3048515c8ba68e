"""The loss levels findings read against: labels wrong at random for a given best loss."""

from __future__ import annotations

import math

import pytest

from treeqa.health.loss_levels import wrong_labels_within


@pytest.mark.parametrize("classes", [2, 4, 10, 1000])
def test_labels_wrong_at_random_put_the_best_loss_at_the_level(classes: int) -> None:
    w = wrong_labels_within(classes)
    assert 0 < w < (classes - 1) / classes
    best = -(1 - w) * math.log(1 - w) - w * math.log(w / (classes - 1))
    assert best == pytest.approx(0.98 * math.log(classes), rel=1e-6)


def test_the_share_grows_with_the_classes() -> None:
    """Two classes lose their information fastest: 42% wrong is near chance already."""
    shares = [wrong_labels_within(c) for c in (2, 3, 4, 10)]
    assert shares == sorted(shares)
    assert round(shares[2], 2) == 0.64  # the 4-class example the docs give (65%: 1.36)
