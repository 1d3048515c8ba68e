"""``target-not-detached``: a loss's target made from another forward of the model it scores,
with gradients through it (a temporal-difference target without ``no_grad``); and targets with
gradients that are right (a physics-informed residual, a periodic boundary condition, a GAN's
feature matching, a target network)."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path
from typing import Any

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


def _doctor(tmp_path: Path, body: str, head: str = HEAD) -> list[dict[str, Any]]:
    from treeqa.health.launch import run_doctor

    script = tmp_path / "script.py"
    script.write_text(head + body)
    with contextlib.redirect_stdout(io.StringIO()):
        _, report = run_doctor(["python", str(script)], every=10, stream=io.StringIO())
    assert not report.get("monitor_failures")
    return [f for f in report["findings"] if f["code"] == CODE]


def test_a_td_target_with_gradients_is_named_at_the_loss(tmp_path: Path) -> None:
    body = (
        "    target = R[s] + gamma * net(eye[s2]).squeeze(1)\n"
        "    loss = F.mse_loss(net(eye[s]).squeeze(1), target)\n"
        "    step(loss)\n"
    )
    found = _doctor(tmp_path, body)
    assert len(found) == 1
    assert found[0]["severity"] == "warning"
    assert found[0]["where"].endswith("script.py:26")  # the loss
    assert len(found[0]["evidence"]["steps"]) == 3


def test_a_td_target_without_gradients_is_clean(tmp_path: Path) -> None:
    body = (
        "    with torch.no_grad():\n"
        "        target = R[s] + gamma * net(eye[s2]).squeeze(1)\n"
        "    step(F.smooth_l1_loss(net(eye[s]).squeeze(1), target))\n"
        "    target = (R[s] + gamma * net(eye[s2]).squeeze(1)).detach()\n"
        "    step(F.mse_loss(net(eye[s]).squeeze(1), target))\n"
    )
    assert _doctor(tmp_path, body) == []


def test_a_target_network_run_with_gradients_is_clean(tmp_path: Path) -> None:
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
    assert _doctor(tmp_path, body, head) == []


def test_a_residual_and_a_periodic_condition_are_clean(tmp_path: Path) -> None:
    body = (
        "    x = torch.rand(64, S, requires_grad=True)\n"
        "    u = net(x)\n"
        "    (du,) = torch.autograd.grad(u.sum(), x, create_graph=True)\n"
        "    residual = F.mse_loss(du[:, :1], torch.sin(u))  # both sides from one forward\n"
        "    periodic = F.mse_loss(net(x * 0), net(torch.ones_like(x)))  # the output itself\n"
        "    step(residual + periodic)\n"
    )
    assert _doctor(tmp_path, body) == []


def test_a_consistency_target_without_its_stop_gradient_is_named(tmp_path: Path) -> None:
    head = HEAD.replace("nn.Linear(32, 1)", "nn.Linear(32, 4)")
    body = (
        "    x = eye[s] + 0.1 * torch.randn(64, S)\n"
        "    weak = net(eye[s]).softmax(1)\n"
        "    step(F.cross_entropy(net(x), weak))\n"
    )
    found = _doctor(tmp_path, body, head)
    assert len(found) == 1
    fixed = body.replace(".softmax(1)", ".softmax(1).detach()")
    assert _doctor(tmp_path, fixed, head) == []


GAN = """
import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
G = nn.Sequential(nn.Linear(4, 32), nn.ReLU(), nn.Linear(32, 8))
D = nn.Sequential(nn.Linear(8, 32), nn.ReLU())
head = nn.Linear(32, 1)
opt_d = torch.optim.Adam([*D.parameters(), *head.parameters()], lr=1e-3)
opt_g = torch.optim.Adam(G.parameters(), lr=1e-3)
real = torch.randn(512, 8) + 2
for _ in range(60):
    x = real[torch.randint(0, 512, (32,))]
    fake = G(torch.randn(32, 4))
    d_real, d_fake = head(D(x)), head(D(fake.detach()))
    loss_d = F.binary_cross_entropy_with_logits(d_real, torch.ones_like(d_real))
    loss_d = loss_d + F.binary_cross_entropy_with_logits(d_fake, torch.zeros_like(d_fake))
    opt_d.zero_grad()
    loss_d.backward()
    opt_d.step()
    # feature matching: the critic's features of real images, through the critic
    loss_g = F.mse_loss(D(fake).mean(0), D(x).mean(0))
    opt_g.zero_grad()
    loss_g.backward()
    opt_g.step()
"""


def test_feature_matching_through_a_critic_the_generator_does_not_step_is_clean(
    tmp_path: Path,
) -> None:
    assert _doctor(tmp_path, "", GAN) == []
