"""``sample-not-reparameterised``: a draw taken with ``sample()`` from a distribution the model
computes, fed on to the model, where ``rsample()`` was meant (a VAE's latent); and draws taken
with ``sample()`` on purpose: a policy's action scored by its ``log_prob``, a frozen encoder's
latent (``clean_draws_without_gradients.py``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Doctor = Callable[[str, str], list[dict[str, Any]]]
"""The ``doctor_script`` fixture: a script's text -> its findings of a code."""
CODE = "sample-not-reparameterised"
HEAD = """
import torch
from torch import nn
from torch.distributions import Normal
from torch.nn import functional as F

torch.manual_seed(0)
x_all = torch.tanh(torch.randn(512, 2) @ torch.randn(2, 8))
enc = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 4))
dec = nn.Sequential(nn.Linear(2, 32), nn.ReLU(), nn.Linear(32, 8))
opt = torch.optim.Adam([*enc.parameters(), *dec.parameters()], lr=1e-3)


def step(loss):
    opt.zero_grad()
    loss.backward()
    opt.step()


for _ in range(40):
    x = x_all[torch.randint(0, 512, (32,))]
    mu, log_var = enc(x).chunk(2, 1)
    q = Normal(mu, (0.5 * log_var).exp())
    kl = (mu.pow(2) + log_var.exp() - log_var - 1).sum(1).mean() / 2
"""


def _doctor(doctor_script: Doctor, body: str, head: str = HEAD) -> list[dict[str, Any]]:
    return doctor_script(head + body, CODE)


def test_a_latent_drawn_with_sample_into_the_decoder_is_named_at_the_draw(
    doctor_script: Doctor,
) -> None:
    body = "    z = q.sample()\n    step(F.mse_loss(dec(z), x) + kl)\n"
    found = _doctor(doctor_script, body)
    assert len(found) == 1
    assert found[0]["severity"] == "error"
    assert found[0]["where"].endswith("script.py:25")  # the draw
    assert found[0]["evidence"]["distribution"] == "Normal"
    assert len(found[0]["evidence"]["steps"]) == 3


def test_a_reparameterised_latent_is_clean(doctor_script: Doctor) -> None:
    body = "    z = q.rsample()\n    step(F.mse_loss(dec(z), x) + kl)\n"
    assert _doctor(doctor_script, body) == []


def test_a_draw_viewed_before_the_decoder_is_named(doctor_script: Doctor) -> None:
    body = "    z = q.sample((1,))\n    step(F.mse_loss(dec(z.view(32, 2)), x) + kl)\n"
    found = _doctor(doctor_script, body)
    assert len(found) == 1
    assert "the forward of" in found[0]["message"]


def test_a_draw_put_beside_a_label_before_the_decoder_is_named(doctor_script: Doctor) -> None:
    # a conditional VAE: the decoder is given torch.cat([z, y])
    head = HEAD.replace(
        "nn.Linear(2, 32), nn.ReLU(), nn.Linear(32, 8)",
        "nn.Linear(3, 32), nn.ReLU(), nn.Linear(32, 8)",
    )
    body = "    z = q.sample()\n    step(F.mse_loss(dec(torch.cat([z, x[:, :1]], 1)), x) + kl)\n"
    found = _doctor(doctor_script, body, head)
    assert len(found) == 1
    assert found[0]["where"].endswith("script.py:25")  # the draw


def test_an_action_beside_the_state_in_a_critic_and_scored_is_clean(doctor_script: Doctor) -> None:
    head = HEAD.replace(
        "nn.Linear(2, 32), nn.ReLU(), nn.Linear(32, 8)",
        "nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 8)",
    )
    body = (
        "    a = q.sample()\n"
        "    value = dec(torch.cat([x, a], 1)).sum(1)\n"
        "    advantage = (value - value.mean()).detach()\n"
        "    step(-(q.log_prob(a).sum(1) * advantage).mean() + value.pow(2).mean())\n"
    )
    assert _doctor(doctor_script, body, head) == []


def test_a_draw_scored_by_a_loss_is_named(doctor_script: Doctor) -> None:
    body = (
        "    y = dec(q.mean)\n    step(F.mse_loss(Normal(y, 0.1).sample(), x) + F.mse_loss(y, x))\n"
    )
    found = _doctor(doctor_script, body)
    assert len(found) == 1
    assert found[0]["evidence"]["given_to"] == "F.mse_loss"


def test_an_action_scored_by_its_log_probability_is_clean(doctor_script: Doctor) -> None:
    # REINFORCE: the draw is an action, fed to a critic the same optimiser trains, and its
    # gradient is taken through log_prob
    body = (
        "    a = q.sample()\n"
        "    value = dec(a).sum(1)\n"
        "    advantage = (value - value.mean()).detach()\n"
        "    step(-(q.log_prob(a).sum(1) * advantage).mean() + value.pow(2).mean())\n"
    )
    assert _doctor(doctor_script, body) == []


def test_actions_scored_after_they_are_stacked_are_clean(doctor_script: Doctor) -> None:
    # the log-probabilities taken of a copy of the draws: the run learns through them
    body = (
        "    a = q.sample()\n"
        "    value = dec(a).sum(1)\n"
        "    advantage = (value - value.mean()).detach()\n"
        "    kept = torch.stack([a.clone()])\n"
        "    step(-(q.log_prob(kept[0]).sum(1) * advantage).mean() + value.pow(2).mean())\n"
    )
    assert _doctor(doctor_script, body) == []


def test_latents_of_an_encoder_the_optimiser_does_not_train_are_clean(
    doctor_script: Doctor,
) -> None:
    # a frozen encoder's weights still require grad, but no optimiser steps them: its draws
    # train the decoder alone, as they should
    head = HEAD.replace("[*enc.parameters(), *dec.parameters()]", "dec.parameters()")
    body = "    z = q.sample()\n    step(F.mse_loss(dec(z), x))\n"
    assert _doctor(doctor_script, body, head) == []


def test_a_draw_given_as_a_keyword_argument_is_named(doctor_script: Doctor) -> None:
    head = HEAD.replace(
        "dec = nn.Sequential(nn.Linear(2, 32), nn.ReLU(), nn.Linear(32, 8))",
        "class Decoder(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.net = nn.Sequential(nn.Linear(2, 32), nn.ReLU(), nn.Linear(32, 8))\n\n"
        "    def forward(self, *, z):\n"
        "        return self.net(z * 1.0)\n\n\n"
        "dec = Decoder()",
    )
    body = "    z = q.sample()\n    step(F.mse_loss(dec(z=z), x) + kl)\n"
    assert len(_doctor(doctor_script, body, head)) == 1
