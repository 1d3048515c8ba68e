"""``target-not-detached``: a loss's target made from another forward of the model it scores,
with gradients through it (a temporal-difference target without ``no_grad``); and targets with
gradients that are right (a physics-informed residual, a periodic boundary condition, a GAN's
feature matching, a target network: ``clean_targets_with_gradients.py``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Doctor = Callable[[str, str], list[dict[str, Any]]]
"""The ``doctor_script`` fixture: a script's text -> its findings of a code."""
CODE = "target-not-detached"
HEAD = """
import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
S, gamma = 12, 0.9
P = torch.rand(S, S) ** 4
P = P / P.sum(1, keepdim=True)
R = torch.randn(S)
eye = torch.eye(S)
net = nn.Sequential(nn.Linear(S, 32), nn.ReLU(), nn.Linear(32, 1))
opt = torch.optim.Adam(net.parameters(), lr=3e-3)


def step(loss):
    opt.zero_grad()
    loss.backward()
    opt.step()


for _ in range(60):
    s = torch.randint(0, S, (64,))
    s2 = torch.multinomial(P[s], 1).squeeze(1)
"""


def _doctor(doctor_script: Doctor, body: str, head: str = HEAD) -> list[dict[str, Any]]:
    return doctor_script(head + body, CODE)


def test_a_td_target_with_gradients_is_named_at_the_loss(doctor_script: Doctor) -> None:
    body = (
        "    target = R[s] + gamma * net(eye[s2]).squeeze(1)\n"
        "    loss = F.mse_loss(net(eye[s]).squeeze(1), target)\n"
        "    step(loss)\n"
    )
    found = _doctor(doctor_script, body)
    assert len(found) == 1
    assert found[0]["severity"] == "warning"
    assert found[0]["where"].endswith("script.py:26")  # the loss
    assert len(found[0]["evidence"]["steps"]) == 3


def test_a_td_target_without_gradients_is_clean(doctor_script: Doctor) -> None:
    body = (
        "    with torch.no_grad():\n"
        "        target = R[s] + gamma * net(eye[s2]).squeeze(1)\n"
        "    step(F.smooth_l1_loss(net(eye[s]).squeeze(1), target))\n"
        "    target = (R[s] + gamma * net(eye[s2]).squeeze(1)).detach()\n"
        "    step(F.mse_loss(net(eye[s]).squeeze(1), target))\n"
    )
    assert _doctor(doctor_script, body) == []


def test_a_target_network_run_with_gradients_is_clean(doctor_script: Doctor) -> None:
    # Its weights are copied in, never trained: the gradient into them is wasted, not wrong.
    head = HEAD.replace(
        "for _ in range(60):",
        "target_net = nn.Sequential(nn.Linear(S, 32), nn.ReLU(), nn.Linear(32, 1))\nfor _ in range(60):",
    )
    body = (
        "    target = R[s] + gamma * target_net(eye[s2]).squeeze(1)\n"
        "    step(F.mse_loss(net(eye[s]).squeeze(1), target))\n"
        "    target_net.load_state_dict(net.state_dict())\n"
    )
    assert _doctor(doctor_script, body, head) == []


def test_a_residual_and_a_periodic_condition_are_clean(doctor_script: Doctor) -> None:
    body = (
        "    x = torch.rand(64, S, requires_grad=True)\n"
        "    u = net(x)\n"
        "    (du,) = torch.autograd.grad(u.sum(), x, create_graph=True)\n"
        "    residual = F.mse_loss(du[:, :1], torch.sin(u))  # both sides from one forward\n"
        "    periodic = F.mse_loss(net(x * 0), net(torch.ones_like(x)))  # the output itself\n"
        "    step(residual + periodic)\n"
    )
    assert _doctor(doctor_script, body) == []


def test_two_passes_scored_against_each_other_are_clean_a_predictor_on_one_side_named(
    doctor_script: Doctor,
) -> None:
    # R-Drop, a Π-model, TRADES: both passes train on purpose.
    head = HEAD.replace("nn.Linear(32, 1)", "nn.Linear(32, 4)")
    body = (
        "    x = eye[s] + 0.1 * torch.randn(64, S)\n"
        "    other = net(eye[s]).softmax(1)\n"
        "    step(F.cross_entropy(net(x), other) + F.mse_loss(net(x).softmax(1), other))\n"
    )
    assert _doctor(doctor_script, body, head) == []
    # SimSiam without its stop-gradient: a predictor on one side only.
    head = head.replace("opt = ", "predictor = nn.Linear(4, 4)\nopt = ").replace(
        "net.parameters()", "[*net.parameters(), *predictor.parameters()]"
    )
    body = (
        "    x1, x2 = eye[s] + 0.1 * torch.randn(64, S), eye[s] + 0.1 * torch.randn(64, S)\n"
        "    z1, z2 = net(x1), net(x2)\n"
        "    step(F.mse_loss(F.normalize(predictor(z1), dim=1), F.normalize(z2, dim=1)))\n"
    )
    assert len(_doctor(doctor_script, body, head)) == 1
    fixed = body.replace("normalize(z2, dim=1)", "normalize(z2.detach(), dim=1)")
    assert _doctor(doctor_script, fixed, head) == []


def test_a_td_error_only_logged_is_no_loss(doctor_script: Doctor) -> None:
    body = (
        "    with torch.no_grad():\n"
        "        target = R[s] + gamma * net(eye[s2]).squeeze(1)\n"
        "    step(F.mse_loss(net(eye[s]).squeeze(1), target))\n"
        "    logged = F.mse_loss(net(eye[s]).squeeze(1), R[s] + gamma * net(eye[s2]).squeeze(1))\n"
    )
    assert _doctor(doctor_script, body) == []
