"""The tree models' dropout: drop rate, scaling, gradient, seeding and evaluation mode."""

from __future__ import annotations

import pytest
import torch

from treeqa.models.common import Dropout


@pytest.mark.parametrize("p", [0.05, 0.1, 0.5, 0.9])
def test_drop_rate_and_scale(p: float) -> None:
    torch.manual_seed(0)
    y = Dropout(p).train()(torch.ones(400, 500))
    dropped = (y == 0).float().mean().item()
    assert abs(dropped - p) < 4 * (p * (1 - p) / y.numel()) ** 0.5 + 1 / 65536
    kept = y[y != 0]
    torch.testing.assert_close(kept, torch.full_like(kept, 1 / (1 - p)))


def test_gradient_is_the_mask_and_the_same_seed_gives_the_same_mask() -> None:
    x = torch.randn(7, 33, requires_grad=True)  # an odd size: the last random word is cut
    torch.manual_seed(1)
    y = Dropout(0.5).train()(x)
    y.sum().backward()
    assert x.grad is not None
    torch.testing.assert_close(x.grad, (y != 0).float() * 2)
    torch.manual_seed(1)
    torch.testing.assert_close(Dropout(0.5).train()(x), y)
    torch.manual_seed(2)
    assert not torch.equal(Dropout(0.5).train()(x), y)


def test_masks_are_not_correlated_across_neighbouring_elements() -> None:
    # Four elements share one 64-bit random word; their masks must still be independent.
    torch.manual_seed(0)
    keep = (Dropout(0.5).train()(torch.ones(200_000)) != 0).float().view(-1, 4)
    corr = torch.corrcoef(keep.t())
    off_diagonal = corr[~torch.eye(4, dtype=torch.bool)]
    assert off_diagonal.abs().max() < 0.02


def test_identity_in_evaluation_and_at_zero_and_bad_rates_named() -> None:
    x = torch.randn(3, 4)
    assert Dropout(0.5).eval()(x) is x
    assert Dropout(0.0).train()(x) is x
    with pytest.raises(ValueError, match=r"dropout must be in \[0, 1\)"):
        Dropout(1.0)
