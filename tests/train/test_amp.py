"""fp16 autocast trains with a loss scaler: gradients read unscaled, overflowed steps skipped,
the scale resumed. Autocast applies on GPU only; these tests widen it to CPU, where torch
runs float16 autocast too, so the same code path runs here."""

from __future__ import annotations

import copy
import io
import math

import pytest
import torch

from treeqa.data.qa_batch import QABatch
from treeqa.health.monitor import HealthMonitor
from treeqa.models.common import Output
from treeqa.models.qanet import QANet, QANetConfig
from treeqa.train import loop
from treeqa.train.loop import Callback, TrainConfig, TrainState, fit

TINY = QANetConfig(
    d_model=16,
    heads=2,
    word_dim=12,
    char_dim=8,
    emb_convs=2,
    model_blocks=2,
    model_convs=1,
    dropout=0.0,
    char_dropout=0.0,
    survival=1.0,
)
VOCAB, CHARS, W = 50, 20, 5


def batches(n: int = 4, b: int = 4, length: int = 12, qlength: int = 5) -> list[QABatch]:
    g = torch.Generator().manual_seed(0)
    out = []
    for i in range(n):
        starts = torch.randint(0, length - 3, (b,), generator=g)
        out.append(
            QABatch(
                torch.randint(1, VOCAB, (b, length), generator=g),
                torch.randint(1, CHARS, (b, length, W), generator=g),
                torch.randint(1, VOCAB, (b, qlength), generator=g),
                torch.randint(1, CHARS, (b, qlength, W), generator=g),
                starts,
                starts + 2,
                torch.arange(i * b, (i + 1) * b),
            )
        )
    return out


def qanet() -> QANet:
    torch.manual_seed(0)
    return QANet(TINY, VOCAB, CHARS, torch.randn(VOCAB, TINY.word_dim))


def train(
    model: QANet, amp: str, epochs: int, state: TrainState | None = None, *cbs: Callback
) -> TrainState:
    config = TrainConfig(epochs=epochs, amp=amp, device="cpu", health="off", optim="adam")
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    data = batches()
    return fit(model, optimizer, lambda epoch: data, config, callbacks=cbs, state=state)


class Seen(Callback):
    """Each step's global gradient norm as callbacks read it (after backward), and its loss."""

    def __init__(self) -> None:
        self.norms: list[float] = []
        self.losses: list[float] = []

    def on_after_backward(self, state: TrainState, model: torch.nn.Module) -> None:
        grads = [p.grad.norm() for p in model.parameters() if p.grad is not None]
        self.norms.append(float(torch.stack(grads).norm()))

    def on_step_end(self, state: TrainState, output: Output, batch: QABatch) -> None:
        self.losses.append(float(output.loss.detach()))


@pytest.fixture
def amp_on_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(loop, "AMP_DEVICES", ("cuda", "cpu"))


def test_fp16_on_cpu_trains_in_float32_without_a_scaler() -> None:
    state = train(qanet(), "fp16", 1)
    assert state.scaler is not None and not state.scaler.is_enabled()
    assert state.to_json()["grad_scaler"] is None


@pytest.mark.usefixtures("amp_on_cpu")
def test_callbacks_read_unscaled_gradients_and_the_loss_falls() -> None:
    half, model = Seen(), qanet()
    state = train(model, "fp16", 8, None, half)
    assert state.scaler is not None and state.scaler.is_enabled()
    assert state.to_json()["grad_scaler"]["scale"] > 1  # the loss was scaled up
    # Steps overflow at first (the scale starts at 2**16) and are skipped, so the first finite
    # gradients are the untrained model's: callbacks see its float32 gradients within float16's
    # precision, not thousands of times them.
    k = next(i for i, norm in enumerate(half.norms) if norm < float("inf"))
    reference = qanet()
    reference(batches()[k % 4]).loss.backward()
    grads = [p.grad.norm() for p in reference.parameters() if p.grad is not None]
    assert half.norms[k] == pytest.approx(float(torch.stack(grads).norm()), rel=0.05)
    first, last = sum(half.losses[:4]) / 4, sum(half.losses[-4:]) / 4
    assert last < first * 0.9
    assert all(torch.isfinite(p).all() for p in model.parameters())


@pytest.mark.usefixtures("amp_on_cpu")
def test_an_overflowed_step_is_skipped_and_the_scale_halves() -> None:
    model = qanet()
    before = copy.deepcopy(model.state_dict())
    seen: list[tuple[float, bool]] = []

    class Watch(Callback):
        def on_step_end(self, state, output, batch) -> None:  # type: ignore[no-untyped-def]
            unchanged = all(torch.equal(before[k], v) for k, v in model.state_dict().items())
            seen.append((state.to_json()["grad_scaler"]["scale"], unchanged))

    huge = {"scale": 2.0**40, "growth_factor": 2.0, "backoff_factor": 0.5}
    huge |= {"growth_interval": 2000, "_growth_tracker": 0}
    state = train(model, "fp16", 10, TrainState(scaler_state=huge), Watch())
    # float16 overflows at 2**16: the first steps are skipped, the weights untouched, and the
    # scale halves each time until the gradients fit; then training goes on.
    assert seen[0] == (2.0**39, True)
    skipped = [unchanged for _, unchanged in seen].index(False)
    assert 10 <= skipped <= 35 and seen[skipped - 1][0] == 2.0 ** (40 - skipped)
    assert all(torch.isfinite(v).all() for v in model.state_dict().values())
    assert state.step == 40


@pytest.mark.usefixtures("amp_on_cpu")
def test_a_resumed_run_goes_on_with_its_saved_scale() -> None:
    state = train(qanet(), "fp16", 1)
    saved = state.to_json()["grad_scaler"]
    resumed = TrainState.from_json(state.to_json())
    assert resumed.scaler_state == saved
    scaler = loop.loss_scaler(torch.device("cpu"), "fp16", resumed)
    assert scaler.state_dict() == saved


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_fp16_on_a_gpu_scales_the_loss_and_trains() -> None:
    model, seen = qanet(), Seen()
    monitor = HealthMonitor("on", every=1, stream=io.StringIO())
    config = TrainConfig(epochs=8, amp="fp16", device="cuda", health="off", optim="adam")
    data = batches()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    state = fit(model, optimizer, lambda epoch: data, config, callbacks=[seen, monitor])
    assert state.scaler is not None and state.scaler.is_enabled()
    assert sum(seen.losses[-4:]) < 0.9 * sum(seen.losses[:4])
    assert all(torch.isfinite(p).all() for p in model.parameters())
    assert not [f for f in monitor.findings.values() if f.code == "non-finite"]


class NaNGradients(torch.nn.Module):
    """QANet plus sqrt(0) in its loss: the loss stays finite, every gradient is NaN."""

    def __init__(self) -> None:
        super().__init__()
        self.qanet = qanet()

    def forward(self, batch: QABatch) -> Output:
        out = self.qanet(batch)
        zero = (self.qanet.pointer.start.weight * 0).pow(2).sum()
        return Output(out.logits, out.loss + zero.sqrt())


@pytest.mark.usefixtures("amp_on_cpu")
@pytest.mark.parametrize("nan", [False, True])
def test_the_health_monitor_tells_overflows_from_nan_gradients(nan: bool) -> None:
    seen, monitor = Seen(), HealthMonitor("on", every=1, stream=io.StringIO())
    train(NaNGradients() if nan else qanet(), "fp16", 6, None, seen, monitor)  # type: ignore[arg-type]
    assert math.inf in seen.norms or math.isnan(seen.norms[0])  # overflowed steps were skipped
    findings = [f for f in monitor.findings.values() if f.code == "non-finite"]
    # Overflows the scaler skips are no finding; gradients non-finite at every scale are.
    assert [f.severity for f in findings] == (["error"] if nan else [])
