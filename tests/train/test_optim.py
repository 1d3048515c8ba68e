"""Parameter groups and the Adagrad whose embedding group can step with plain SGD."""

from __future__ import annotations

import copy
import math
from typing import Any

import pytest
import torch
from torch import nn

from treeqa.train.loop import TrainConfig, TrainState
from treeqa.train.optim import build_optimizer, build_scheduler


class Tiny(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(10, 4, sparse=True)
        self.out = nn.Linear(4, 2)

    def forward(self, words: torch.Tensor) -> torch.Tensor:
        return self.out(self.embed(words)).square().sum()


def test_embedding_sgd_next_to_adagrad_matches_the_two_done_by_hand() -> None:
    torch.manual_seed(0)
    model = Tiny()
    by_hand = copy.deepcopy(model)
    config = TrainConfig(optim="adagrad", lr=0.05, weight_decay=1e-3, emb_lr=0.5, emb_optim="sgd")
    optimizer = build_optimizer(model, config)
    adagrad = torch.optim.Adagrad(by_hand.out.parameters(), lr=0.05, weight_decay=1e-3)
    words = torch.tensor([1, 2, 2, 7])
    for _ in range(3):
        optimizer.zero_grad()
        model(words).backward()
        optimizer.step()
        adagrad.zero_grad()
        by_hand.embed.zero_grad()
        by_hand(words).backward()
        adagrad.step()
        with torch.no_grad():  # plain SGD on the sparse embedding gradient
            by_hand.embed.weight.add_(by_hand.embed.weight.grad, alpha=-0.5)
    for (name, a), b in zip(model.named_parameters(), by_hand.parameters(), strict=True):
        torch.testing.assert_close(a, b, msg=name)
    # Untouched rows stay where they were; the SGD group keeps no Adagrad sums.
    torch.testing.assert_close(model.embed.weight[0], by_hand.embed.weight[0])
    assert len(optimizer.state_dict()["state"]) == 2  # out.weight and out.bias only


def test_same_optimiser_for_embeddings_by_default_and_bad_values_named() -> None:
    model = Tiny()
    optimizer = build_optimizer(model, TrainConfig())
    assert [g["sgd"] for g in optimizer.param_groups] == [False, False]
    # Refused when the config is made, before any data is read.
    with pytest.raises(ValueError, match="train.emb_optim: expected one of same | sgd, got 'adam'"):
        TrainConfig(emb_optim="adam")
    with pytest.raises(ValueError, match="goes with train.optim = adagrad"):
        TrainConfig(optim="adam", emb_optim="sgd")
    with pytest.raises(ValueError, match="train.optim: expected one of adagrad | adam, got 'sgd'"):
        TrainConfig(optim="sgd")
    with pytest.raises(ValueError, match=r"train.adam_betas: expected two numbers in \[0, 1\)"):
        TrainConfig(adam_betas=(0.9, 1.5))


def test_state_dict_round_trip_with_an_sgd_group() -> None:
    """A resumed run restores the Adagrad sums and keeps the SGD group stateless."""
    torch.manual_seed(0)
    config = TrainConfig(optim="adagrad", lr=0.05, emb_lr=0.5, emb_optim="sgd")
    words = torch.tensor([1, 2, 2, 7])
    model = Tiny()
    optimizer = build_optimizer(model, config)
    for _ in range(2):
        optimizer.zero_grad()
        model(words).backward()
        optimizer.step()
    resumed = copy.deepcopy(model)
    again = build_optimizer(resumed, config)
    again.load_state_dict(copy.deepcopy(optimizer.state_dict()))  # as if read from a file
    for m, opt in ((model, optimizer), (resumed, again)):
        opt.zero_grad()
        m(words).backward()
        opt.step()
    for a, b in zip(model.parameters(), resumed.parameters(), strict=True):
        torch.testing.assert_close(a, b)
    assert [g["sgd"] for g in again.param_groups] == [False, True]


def test_a_one_step_warm_up_is_no_warm_up() -> None:
    # log(1) = 0: a 1-step warm-up divided by zero on the first step.
    tiny = Tiny()
    tiny.embed.sparse = False  # Adam takes dense gradients only
    optimizer = build_optimizer(tiny, TrainConfig(optim="adam", lr=0.01, warmup_steps=1))
    assert build_scheduler(optimizer, TrainConfig(warmup_steps=1)) is None
    assert build_scheduler(optimizer, TrainConfig(warmup_steps=2)) is not None


def test_warm_up_is_logarithmic_from_zero_to_lr() -> None:
    # QANet's "inverse exponential increase from 0.0 to 0.001 in the first 1000 steps", as the
    # public re-implementations read it: optimiser step t takes lr * log(t) / log(1000).
    tiny = Tiny()
    tiny.embed.sparse = False
    config = TrainConfig(optim="adam", lr=1e-3, warmup_steps=1000)
    optimizer = build_optimizer(tiny, config)
    scheduler = build_scheduler(optimizer, config)
    assert scheduler is not None
    taken = []
    for _ in range(1002):
        taken.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    for t in (1, 2, 10, 100, 999, 1000, 1002):
        expected = 1e-3 * min(1.0, math.log(t) / math.log(1000))
        assert taken[t - 1] == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize("sparse", [False, True])
def test_clipping_scales_sparse_and_dense_gradients_as_clip_grad_norm_does(sparse: bool) -> None:
    from treeqa.train.loop import clip_gradients

    def model(sparse: bool) -> list[nn.Parameter]:
        torch.manual_seed(0)
        embed, out = nn.Embedding(10, 4, sparse=sparse), nn.Linear(4, 1)
        out(embed(torch.tensor([1, 2, 1]))).sum().backward()  # row 1 twice: uncoalesced
        return [*embed.parameters(), *out.parameters()]

    got, expected = model(sparse), model(False)
    clip_gradients(got, 0.1)
    norm = nn.utils.clip_grad_norm_(expected, 0.1)
    assert norm > 0.1  # so the clipping did something
    for a, b in zip(got, expected, strict=True):
        assert a.grad is not None and b.grad is not None
        torch.testing.assert_close(a.grad.to_dense(), b.grad)


def test_adam_with_sparse_word_vector_gradients_is_refused_with_the_fix() -> None:
    embed = nn.Embedding(5, 3, sparse=True)
    model = nn.ModuleDict({"embed": embed, "out": nn.Linear(3, 1)})
    with pytest.raises(ValueError, match="adam cannot step the sparse gradients of embed: add"):
        build_optimizer(model, TrainConfig(optim="adam", emb_optim="same"))
    embed.weight.requires_grad_(False)  # frozen vectors have no gradients to step
    build_optimizer(model, TrainConfig(optim="adam", emb_optim="same"))


def test_adam_steps_with_torchs_fused_kernel_as_its_default_would() -> None:
    """One launch a step on a GPU instead of several per group; the same steps to rounding."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    plain = copy.deepcopy(model)
    config = TrainConfig(optim="adam", lr=1e-2, weight_decay=1e-3)
    fused = build_optimizer(model, config)
    assert fused.param_groups[0]["fused"] is True
    b1, b2 = config.adam_betas
    reference = torch.optim.Adam(
        plain.parameters(), lr=1e-2, betas=(b1, b2), eps=config.adam_eps, weight_decay=1e-3
    )
    for _ in range(5):
        x = torch.randn(16, 4)
        for net, opt in ((model, fused), (plain, reference)):
            opt.zero_grad()
            net(x).square().mean().backward()
            opt.step()
    for a, b in zip(model.parameters(), plain.parameters(), strict=True):
        torch.testing.assert_close(a, b)


def test_fit_names_a_batch_it_cannot_move_to_the_device() -> None:
    from treeqa.train.loop import fit

    model = Tiny()
    optimizer = build_optimizer(model, TrainConfig())
    with pytest.raises(TypeError, match="a training batch is a tuple; fit\\(\\) needs batches"):
        fit(model, optimizer, lambda epoch: [(1, 2)], TrainConfig(epochs=1, health="off"))


def test_fit_names_batches_or_a_config_of_the_wrong_kind() -> None:
    from torch.utils.data import DataLoader

    from treeqa.train.loop import fit

    model = Tiny()
    optimizer = build_optimizer(model, TrainConfig())
    loader = DataLoader(torch.zeros(4, 3), batch_size=2)
    # Was: "'DataLoader' object is not callable" and "'dict' object has no attribute 'device'".
    with pytest.raises(TypeError, match=r"train_batches is a DataLoader; fit\(\) takes a funct"):
        fit(model, optimizer, loader, TrainConfig(epochs=1, health="off"))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"config is a dict; fit\(\) takes a TrainConfig"):
        fit(model, optimizer, lambda epoch: loader, {"epochs": 1})  # type: ignore[arg-type]


def test_fit_names_a_forward_or_an_evaluate_that_returns_something_else() -> None:
    from treeqa.models.common import Output
    from treeqa.train.loop import fit

    class Words:  # a batch fit() can move
        def __init__(self) -> None:
            self.words = torch.tensor([1, 2, 3])

        def to(self, device: torch.device) -> Words:
            return self

    class Scored(Tiny):
        def forward(self, batch: Words) -> Output:  # type: ignore[override]
            return Output(batch.words.float(), super().forward(batch.words))

    class Bare(Tiny):
        def forward(self, batch: Words) -> torch.Tensor:  # type: ignore[override]
            return super().forward(batch.words)

    config = TrainConfig(epochs=1, health="off", metric="acc")
    data = lambda epoch: [Words()]  # noqa: E731
    with pytest.raises(TypeError, match="forward returned a Tensor; fit\\(\\) takes an Output"):
        fit(Bare(), build_optimizer(Bare(), config), data, config)
    model = Scored()

    def scored_by(evaluate: Any) -> TrainState:
        return fit(model, build_optimizer(model, config), data, config, evaluate=evaluate)

    with pytest.raises(TypeError, match="evaluate\\(model\\) returned a NoneType; fit\\(\\) takes"):
        scored_by(lambda m: None)
    state = scored_by(lambda m: {"acc": torch.tensor(0.5)})
    assert state.history[-1]["acc"] == 0.5 and type(state.best) is float  # not a tensor
    for value, said in ((torch.tensor([0.5, 0.6]), "tensor"), (None, "None"), ("0.5", "'0.5'")):
        with pytest.raises(TypeError, match=f"evaluate\\(model\\)\\['acc'\\] is {said}"):
            scored_by(lambda m, v=value: {"acc": v})
    import numpy as np

    state = scored_by(lambda m: {"acc": np.float64(0.25)})
    assert type(state.history[-1]["acc"]) is float  # a numpy scalar crashed the log after the epoch
