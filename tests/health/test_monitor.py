"""The monitor inside treeqa's own fit(), its report files, the CLI and the checks on their own."""

from __future__ import annotations

import contextlib
import gc
import io
import json
import math
import os
import signal
import subprocess
import sys
import time
import warnings
from array import array
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from treeqa.health import (
    HealthMonitor,
    checks,
    loss_inputs,
    loss_levels,
    report,
    run_doctor,
    sites,
    timing,
    wrap,
)
from treeqa.health.findings import Finding
from treeqa.health.heap import heap_mb
from treeqa.health.nonfinite import NonFiniteTracer
from treeqa.health.profile import ProfileWindow
from treeqa.health.readings import LossReadings
from treeqa.models.common import Output
from treeqa.train.loop import Callback, TrainConfig, TrainState, fit

SCRIPTS = Path(__file__).parent / "scripts"


class Batch:
    def __init__(self, x: torch.Tensor, y: torch.Tensor):
        self.x, self.y = x, y

    def to(self, device: torch.device) -> Batch:
        return self


class Tiny(nn.Module):
    def __init__(self, scale: float = 1.0):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 3))
        self.scale = scale

    def forward(self, batch: Batch) -> Output:
        logits = self.body(batch.x) * self.scale
        return Output(logits, nn.functional.cross_entropy(logits, batch.y))


def batches(epoch: int) -> list[Batch]:
    g = torch.Generator().manual_seed(epoch)
    return [
        Batch(torch.randn(16, 8, generator=g), torch.randint(0, 3, (16,), generator=g))
        for _ in range(30)
    ]


def train(model: nn.Module, monitor: HealthMonitor, epochs: int = 2) -> int:
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    state = fit(model, opt, batches, TrainConfig(epochs=epochs, device="cpu"), callbacks=[monitor])
    return state.step


def test_fit_clean_run_writes_report(tmp_path: Path) -> None:
    monitor = HealthMonitor(every=10, json_path=tmp_path / "health.json", stream=io.StringIO())
    assert train(Tiny(), monitor) == 60
    report = json.loads((tmp_path / "health.json").read_text())
    assert [f for f in report["findings"] if f["severity"] != "info"] == []
    assert len(report["series"]["step_time"]) == 60 and all(
        math.isfinite(v) for v in report["series"]["loss"]
    )
    assert nn.functional.cross_entropy.__name__ == "cross_entropy"  # the wrapper was removed


class DeviceBatch(Batch):
    def to(self, device: torch.device) -> DeviceBatch:
        return DeviceBatch(self.x.to(device), self.y.to(device))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_fit_on_gpu_reads_every_loss_and_the_device_memory(tmp_path: Path) -> None:
    monitor = HealthMonitor(every=10, json_path=tmp_path / "health.json", stream=io.StringIO())
    model = Tiny()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def on_gpu(epoch: int) -> list[DeviceBatch]:
        return [DeviceBatch(b.x, b.y) for b in batches(epoch)]

    fit(model, opt, on_gpu, TrainConfig(epochs=2, device="cuda"), callbacks=[monitor])
    report = json.loads((tmp_path / "health.json").read_text())
    assert [f for f in report["findings"] if f["severity"] != "info"] == []
    series = report["series"]
    assert len(series["loss"]) == 60 and all(math.isfinite(v) for v in series["loss"])
    assert not monitor.losses.pending  # every queued GPU loss was read by the end
    assert all(v > 0 for v in series["cuda_mb"])
    assert series["canary"] == [None] * 60  # the CPU reference workload is not timed on a GPU


def test_fit_strict_stops_on_error() -> None:
    stream = io.StringIO()
    monitor = HealthMonitor(mode="strict", every=10, stream=stream)
    steps = train(Tiny(scale=float("nan")), monitor, epochs=3)
    assert steps < 10
    assert "non-finite" in stream.getvalue() and "stopping" in stream.getvalue()


CATCHES_EVERYTHING = """
import torch
from torch import nn

model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
caught = 0
for step in range(12):
    try:  # a loop that skips a bad batch and goes on
        x = torch.randn(16, 8)
        loss = nn.functional.cross_entropy(model(x).softmax(-1), (x[:, 0] > 0).long())
        opt.zero_grad()
        loss.backward()
        opt.step()
    except Exception:
        caught += 1
print("caught", caught)
"""


def test_a_strict_stop_the_script_catches_is_still_exit_code_3(tmp_path: Path) -> None:
    """Strict mode stops a script by raising from its optimiser step; a loop that catches every
    ``Exception`` swallows that and runs to its end, exit code 0 without the doctor."""
    script = tmp_path / "catches.py"
    script.write_text(CATCHES_EVERYTHING)
    stream = io.StringIO()
    code, report = run_doctor(["python", str(script)], mode="strict", stream=stream)
    assert code == 3
    assert "caught the HealthError and went on" in stream.getvalue()
    assert any(f["code"] == "probabilities-into-cross-entropy" for f in report["findings"])
    clean = CATCHES_EVERYTHING.replace(".softmax(-1)", "")
    script.write_text(clean)
    code, _ = run_doctor(["python", str(script)], mode="strict", stream=io.StringIO())
    assert code == 0


class Softmaxed(Tiny):
    def forward(self, batch: Batch) -> Output:
        probs = self.body(batch.x).softmax(-1)
        return Output(probs, nn.functional.cross_entropy(probs, batch.y))


class FailsAtStep2(Tiny):
    calls = 0

    def forward(self, batch: Batch) -> Output:
        self.calls += 1
        if self.calls == 2:
            raise RuntimeError("a bad batch")
        return super().forward(batch)


def wrapped_or_hooked() -> list[str]:
    """What of a monitor is still in place: wrapped functions and global module hooks."""
    left = [f.__name__ for f in (nn.functional.cross_entropy, nn.functional.nll_loss)]
    left = [name for name in left if "wrapper" in name]
    hooks = torch.nn.modules.module._global_forward_hooks
    return left + (["a global forward hook"] if hooks else [])


def test_a_second_monitor_in_one_process_checks_its_own_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # finish() takes the first one's wrappers off (they kept the second from installing its
    # own, and softmax into cross-entropy went unreported); a failed fit() takes them off too.
    first = HealthMonitor(every=10, stream=io.StringIO())
    train(Tiny(), first, epochs=1)
    assert wrapped_or_hooked() == []
    with pytest.raises(RuntimeError, match="a bad batch"):
        train(FailsAtStep2(), HealthMonitor(every=10, stream=io.StringIO()), epochs=1)
    assert wrapped_or_hooked() == []
    undos: list = []  # to take the dropped monitor's wrappers off at the end, for later tests
    real = wrap.install_wrapper
    monkeypatch.setattr(wrap, "install_wrapper", lambda *a: undos.append(real(*a)) or undos[-1])
    dropped = HealthMonitor(every=10, stream=io.StringIO())
    dropped.install_loss_checks()
    monkeypatch.setattr(wrap, "install_wrapper", real)
    del dropped  # never finished: its wrappers stay, but note nothing, and are wrapped over
    gc.collect()
    own_loop = HealthMonitor(every=10, stream=io.StringIO())
    own_loop.watch(model := Softmaxed())
    own_loop.install_loss_checks()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for batch in batches(0)[:5]:
        own_loop.begin_step()
        loss = model(batch).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        own_loop.end_step(loss, 0.01)
    codes = {f["code"] for f in own_loop.finish()["findings"]}
    assert "probabilities-into-cross-entropy" in codes
    for undo in reversed(undos):  # the dropped one's, left in place
        undo()
    assert wrapped_or_hooked() == []


def test_a_watched_compiled_module_gets_no_global_hook_before_it_compiles() -> None:
    # Its first call compiles it: a hook there would be compiled in, and removing it after
    # the sampled step would compile it again.
    monitor = HealthMonitor(every=10, stream=io.StringIO())
    monitor.watch(torch.compile(Tiny()))
    monitor.begin_step()  # step 1 is sampled
    assert not torch.nn.modules.module._global_forward_hooks
    monitor.finish()
    plain = HealthMonitor(every=10, stream=io.StringIO())
    plain.watch(Tiny())
    plain.begin_step()
    assert torch.nn.modules.module._global_forward_hooks
    plain.finish()
    assert not torch.nn.modules.module._global_forward_hooks


def test_fit_loss_at_init() -> None:
    monitor = HealthMonitor(every=10, stream=io.StringIO())
    train(Tiny(scale=40.0), monitor, epochs=1)
    assert "loss-at-init" in {f.code for f in monitor.findings.values()}


def line_of(script: str, text: str) -> int:
    lines = (SCRIPTS / script).read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if text in line)


def test_doctor_names_holder_module_and_alias(doctor_report) -> None:
    _, report, _ = doctor_report("bug_graph_retained.py")
    retained = next(f for f in report["findings"] if f["code"] == "graph-retained")
    line = line_of("bug_graph_retained.py", "ex.encoding = encoder")
    assert retained["where"].startswith("Example.encoding")
    assert f"bug_graph_retained.py:{line}" in retained["where"]
    _, report, _ = doctor_report("bug_ema_with_graph.py")  # a dict entry, at its update
    retained = next(f for f in report["findings"] if f["code"] == "graph-retained")
    line = line_of("bug_ema_with_graph.py", "ema[name] = 0.99")
    assert retained["where"].startswith("dict 'ema'[")
    assert f"bug_ema_with_graph.py:{line}" in retained["where"]
    _, report, _ = doctor_report("bug_parameter_alias.py")
    alias = next(f for f in report["findings"] if f["code"] == "parameter-alias")
    line = line_of("bug_parameter_alias.py", "self.Ur = self.Uz")
    assert sorted(alias["evidence"]["names"]) == ["cell.Ur", "cell.Uz"]
    assert f"bug_parameter_alias.py:{line}" in alias["where"]
    _, report, _ = doctor_report("bug_non_finite.py")
    nan = next(f for f in report["findings"] if f["code"] == "non-finite")
    assert nan["where"].startswith("norm (Standardize")
    _, report, _ = doctor_report("bug_probs_into_ce.py")
    probs = next(f for f in report["findings"] if f["code"] == "probabilities-into-cross-entropy")
    line = line_of("bug_probs_into_ce.py", "loss = criterion(model(x)")
    assert probs["where"].endswith(f"bug_probs_into_ce.py:{line}")


def test_doctor_leaves_no_state_behind() -> None:
    # A script's namespace (and the loss graph in it) must not outlive its run: a later run in
    # the same process would report that old graph as its own.
    for name in ("bug_activation_growth.py", "bug_loss_at_init.py"):
        with contextlib.redirect_stdout(io.StringIO()):
            _, report = run_doctor(["python", str(SCRIPTS / name)], every=10, stream=io.StringIO())
    assert "loss-accumulated-with-graph" not in {f["code"] for f in report["findings"]}
    assert nn.functional.cross_entropy.__name__ == "cross_entropy"  # the wrapper was removed


PRE_HOOKS = """
import json, sys
import torch
from torch import nn
from torch.optim.optimizer import _global_optimizer_pre_hooks

torch.manual_seed(0)
model = nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
counts = []
for step in range(6):
    loss = model(torch.randn(8, 4)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    counts.append(len(_global_optimizer_pre_hooks))
json.dump(counts, open(sys.argv[1], "w"))
"""


def test_the_doctors_optimiser_pre_hook_comes_off_once_an_optimiser_steps(tmp_path: Path) -> None:
    # It only ends a step of updates by hand before an optimiser's step; once an optimiser has
    # stepped there is none, and every later step would pay for the hook.
    script, out = tmp_path / "train.py", tmp_path / "counts.json"
    script.write_text(PRE_HOOKS)
    code, report = run_doctor(["python", str(script), str(out)], stream=io.StringIO())
    assert code == 0 and report["steps"] == 6
    assert json.loads(out.read_text()) == [0] * 6


WARNS = """
import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
model = nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(12):
    x = torch.randn(8, 4)
    loss = F.mse_loss(model(x), x[:, 0])  # [8, 1] against [8]: torch warns, stacklevel=2
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


def test_a_librarys_warning_names_the_scripts_line_under_the_doctor(tmp_path: Path) -> None:
    # F.mse_loss is wrapped under the doctor; its warning must still name the script's line
    # (as plain python does), not the wrapper's, or filters by module or line stop matching.
    script = tmp_path / "warns.py"
    script.write_text(WARNS)
    plain_warn = warnings.warn
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _, report = run_doctor(["python", str(script)], stream=io.StringIO())
    sizes = [w for w in caught if "target size" in str(w.message)]
    assert sizes and {(w.filename, w.lineno) for w in sizes} == {(str(script), 11)}
    assert "loss-broadcast" in {f["code"] for f in report["findings"]}  # it was wrapped
    assert warnings.warn is plain_warn  # and put back


def test_doctor_keeps_exit_code_and_writes_plot(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    script = tmp_path / "fails.py"
    script.write_text("import sys\nprint('hello')\nsys.exit(7)\n")
    code, _ = run_doctor(
        ["python", str(script)],
        json_path=tmp_path / "r.json",
        plot_path=tmp_path / "r.png",
        stream=io.StringIO(),
    )
    assert (
        code == 7 and (tmp_path / "r.json").exists() and (tmp_path / "r.png").stat().st_size > 1000
    )


BUGGY_EXIT = """
import sys
from pathlib import Path
from typing import Any

import torch
from torch import nn

model = nn.Sequential(nn.Linear(8, 4), nn.Softmax(dim=-1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(5):
    loss = nn.CrossEntropyLoss()(model(torch.randn(16, 8)), torch.randint(0, 4, (16,)))
    opt.zero_grad()
    loss.backward()
    opt.step()
Path(sys.argv[1]).write_text("written by the script")
print("done", sys.argv[2])
sys.exit(5)
"""


def test_cli_doctor_end_to_end(tmp_path: Path) -> None:
    """The real command in a fresh interpreter: the script's stdout, files, argv and exit code
    are its own; the finding goes to stderr and the JSON report."""
    script, out, made = tmp_path / "train.py", tmp_path / "report.json", tmp_path / "made.txt"
    script.write_text(BUGGY_EXIT)
    cmd = [sys.executable, "-m", "treeqa", "doctor", "--every", "10", "--json", str(out)]
    cmd += ["--", "python", str(script), str(made), "arg2"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 5, proc.stderr
    assert proc.stdout.strip() == "done arg2"
    assert made.read_text() == "written by the script"
    assert "[probabilities-into-cross-entropy]" in proc.stderr
    codes = {f["code"] for f in json.loads(out.read_text())["findings"]}
    assert "probabilities-into-cross-entropy" in codes


OLDEST_TORCH_API = """
import json, sys, types
import torch
from torch import nn
from torch.nn.utils import clip_grad

# torch 2.4's API, the oldest treeqa supports: nn.Buffer came in 2.5, the split clip API in 2.6.
# (torch's own modules hold Buffer already: only the names a script reaches it by go)
parameter = types.ModuleType(nn.parameter.__name__)
vars(parameter).update({k: v for k, v in vars(nn.parameter).items() if k != "Buffer"})
nn.parameter = parameter
for owner in (nn, nn.utils, clip_grad):
    for name in ("Buffer", "get_total_norm", "clip_grads_with_norm_"):
        if hasattr(owner, name):
            delattr(owner, name)

from treeqa.health import run_doctor

code, report = run_doctor(["python", sys.argv[1]], every=10)
print(json.dumps(report))
"""


def test_the_doctor_runs_on_the_oldest_torch_api_it_supports(tmp_path: Path) -> None:
    """Without the later APIs treeqa imports and the doctor watches the run: the checks on the
    missing functions do not apply, the others still report."""
    driver = tmp_path / "driver.py"
    driver.write_text(OLDEST_TORCH_API)
    script = Path(__file__).parent / "scripts" / "bug_clip_before_backward.py"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, str(driver), str(script)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout.splitlines()[-1])
    assert not report.get("monitor_failures"), report["monitor_failures"]
    assert "clip-before-backward" in {f["code"] for f in report["findings"]}


def test_cli_doctor_runs_a_python_dash_o_script_optimised(
    tmp_path: Path, side_by_side: Callable[..., list[subprocess.CompletedProcess[str]]]
) -> None:
    script = tmp_path / "opt.py"
    script.write_text(
        'import sys\nassert False, "asserts run"\nprint(__debug__, sys.flags.optimize)\n'
    )
    doctor = [sys.executable, "-m", "treeqa", "doctor", "--", "python"]
    optimised, twice, plain = side_by_side(
        *([*doctor, *flags, str(script)] for flags in (["-O"], ["-OO"], []))
    )
    for proc, said in (optimised, "False 1"), (twice, "False 2"):
        assert (proc.returncode, proc.stdout.strip()) == (0, said), proc.stderr
    assert plain.returncode == 1 and "AssertionError: asserts run" in plain.stderr


def test_cli_doctor_runs_the_script_with_its_interpreter_options(
    tmp_path: Path, side_by_side: Callable[..., list[subprocess.CompletedProcess[str]]]
) -> None:
    """-X dev, -I, -E set how the interpreter runs: the doctor starts itself again with them."""
    script = tmp_path / "flags.py"
    script.write_text(
        "import os, sys\nf = sys.flags\n"
        "print(f.dev_mode, f.isolated, f.ignore_environment, 'TREEQA_DOCTOR_RESTARTED' in os.environ)\n"
    )
    cases = (["-X", "dev"], "True 0 0 False"), (["-I"], "False 1 1 False")
    doctor = [sys.executable, "-m", "treeqa", "doctor", "--", "python"]
    runs = side_by_side(*([*doctor, *flags, str(script)] for flags, _ in cases))
    for proc, (_, said) in zip(runs, cases, strict=True):
        assert (proc.returncode, proc.stdout.strip()) == (0, said), proc.stderr


ENDS_HARD = """
import os, sys, time, torch
m = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(m.parameters(), lr=0.1)
for step in range(10**9 if sys.argv[1] == "term" else 60):
    opt.zero_grad(); m(torch.randn(8, 4)).pow(2).mean().backward(); opt.step()
    if step == 30 and sys.argv[1] == "term":
        print("training", flush=True)
os._exit(0)
"""


def test_a_script_ended_by_os_exit_or_sigterm_still_reports(tmp_path: Path) -> None:
    """os._exit skips every finally; SIGTERM (a preempted job) kills by default: the doctor
    writes its report either way, and the exit code is the script's (143 for SIGTERM)."""
    script = tmp_path / "train.py"
    script.write_text(ENDS_HARD)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    for how, code in (("exit", 0), ("term", 143)):
        out = tmp_path / f"{how}.json"
        cmd = [sys.executable, "-m", "treeqa", "doctor", "--json", str(out), "--"]
        proc = subprocess.Popen(
            [*cmd, "python", str(script), how], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, env=env,
        )  # fmt: skip
        if how == "term":
            assert proc.stdout is not None and proc.stdout.readline() == "training\n"
            proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == code, err
        assert "treeqa health:" in err and json.loads(out.read_text())["steps"] >= 30


def test_a_script_that_closes_stdout_ends_as_under_python(tmp_path: Path) -> None:
    script = tmp_path / "close.py"
    script.write_text('import sys\nprint("hi")\nsys.stdout.close()\n')
    cmd = [sys.executable, "-m", "treeqa", "doctor", "--", "python", str(script)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert (proc.returncode, proc.stdout) == (0, "hi\n"), proc.stderr
    assert "error" not in proc.stderr


SWALLOWS_SIGTERM = """
import os, signal, torch
m = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(m.parameters(), lr=0.1)
for step in range(60):
    if step == 30:
        try:  # where Python only prints a callback's error: the exit is lost there
            os.kill(os.getpid(), signal.SIGTERM)
        except SystemExit:
            print("swallowed", flush=True)
    opt.zero_grad(); m(torch.randn(8, 4)).pow(2).mean().backward(); opt.step()
print("trained on")
"""


def test_a_sigterm_lost_in_a_callback_ends_the_script_at_its_next_backward(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text(SWALLOWS_SIGTERM)
    code, report = run_doctor(["python", "train.py"], stream=io.StringIO())
    assert (code, capsys.readouterr().out, report["steps"]) == (143, "swallowed\n", 30)
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


CHAINS_SIGTERM = """
import os, signal, torch
found = signal.getsignal(signal.SIGTERM)
asked = []
def graceful(signum, frame):  # as Lightning's: its own, then the one it found unless the default
    asked.append(signum)
    if callable(found):
        found(signum, frame)
before = signal.signal(signal.SIGTERM, graceful)
m = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(m.parameters(), lr=0.1)
def train(steps, term_at):
    for step in range(steps):
        opt.zero_grad(); m(torch.randn(8, 4)).pow(2).mean().backward(); opt.step()
        if step == term_at:
            os.kill(os.getpid(), signal.SIGTERM)
        if asked:
            return step
print("stopped gracefully at", train(60, 30), flush=True)
signal.signal(signal.SIGTERM, before)  # the default back
print("default again", signal.getsignal(signal.SIGTERM) == signal.SIG_DFL, flush=True)
asked.clear()
train(30, 10)
print("not reached")
"""


def test_a_script_chaining_to_the_sigterm_handler_it_found_sees_the_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A handler that calls the one it found unless that was the default (Lightning's does) ran
    the doctor's, which ended the script at once where python lets it stop gracefully: the
    doctor's reads as the default. Put back, the default is the doctor's again, and reports."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text(CHAINS_SIGTERM)
    real = signal.signal, signal.getsignal
    code, report = run_doctor(["python", "train.py"], stream=io.StringIO())
    out = capsys.readouterr().out
    assert out == "stopped gracefully at 30\ndefault again True\n"
    assert (code, report["steps"]) == (143, 31 + 11)
    assert (signal.signal, signal.getsignal) == real
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


def test_first_epoch_allocator_warm_up_is_not_memory_growth() -> None:
    """Seen on SST: RSS climbs 437 -> 506 MB over the first epoch (342 steps, every batch shape
    met once), then stays flat with allocator steps of a few MB for nine epochs."""
    warm_up = [437.0 + 0.2 * i for i in range(342)]
    flat = [505.0 + 11.0 * ((i // 400) % 2) for i in range(2400)]

    def grows(rss: list[float], first_epoch_ends: bool) -> bool:
        monitor = HealthMonitor(stream=io.StringIO())
        monitor.expect_epochs()  # as on_fit_start does
        if first_epoch_ends:
            monitor.series["rss_mb"] = rss[:342]
            monitor.epoch_ended()
        monitor.series["rss_mb"] = rss
        monitor.series["step_time"] = [0.01] * len(rss)
        monitor.series["data_time"] = [0.0] * len(rss)
        monitor._series_checks(len(rss))
        return any(code == "memory-growth" for code, _ in monitor.findings)

    assert not grows(warm_up + flat, first_epoch_ends=True)
    assert not grows(warm_up[:300], first_epoch_ends=False)  # checked inside the first epoch
    leak = [437.0 + 0.2 * i for i in range(342 + 2400)]  # the same climb, never stopping
    assert grows(leak, first_epoch_ends=True)
    assert timing.memory_growth(warm_up[:300], "host RSS", 32.0) is not None  # outside fit()


def test_rss_growth_with_flat_heap_in_use_is_heap_retention() -> None:
    """Seen on SST (Tree-GRU, 20 epochs): RSS 408 -> 540 MB while malloc's bytes in use stayed
    at 175 MB and its free bytes rose 10 -> 103 MB. A leak raises the bytes in use instead."""
    n = 200
    rss = [408.0 + 0.66 * i for i in range(n)]
    flat_used = [175.0 + (i % 7) for i in range(n)]
    free = [10.0 + 0.46 * i for i in range(n)]
    kept = timing.memory_growth(rss, "host RSS", 32.0, (flat_used, free))
    assert kept is not None and kept.code == "heap-retention" and kept.severity == "info"
    assert kept.evidence["heap_free_mb"][3] > kept.evidence["heap_free_mb"][0] + 60
    leaking_used = [190.0 + 0.65 * i for i in range(n)]
    leak = timing.memory_growth(rss, "host RSS", 32.0, (leaking_used, [20.0] * n))
    assert leak is not None and leak.code == "memory-growth" and leak.severity == "warning"
    # Neither leak nor retention explains it (Python objects, not malloc): still a warning.
    other = timing.memory_growth(rss, "host RSS", 32.0, (flat_used, [20.0] * n))
    assert other is not None and other.code == "memory-growth"
    # No heap readings (not glibc): RSS alone, as before.
    nan = [math.nan] * n
    plain = timing.memory_growth(rss, "host RSS", 32.0, (nan, nan))
    assert plain is not None and plain.code == "memory-growth"
    # A mixture of experts' heap filling its holes, judged at step 140 of 500: the bytes in use
    # rose 26% of RSS's rise (12 MB), under the floor; a leak is found once past it.
    moe = [348.6] * 35 + [362.6] * 35 + [384.9] * 35 + [395.1] * 35
    used = [114.7] * 35 + [118.1] * 35 + [125.5] * 35 + [126.7] * 35
    free_moe = [21.1] * 35 + [28.1] * 35 + [50.0] * 35 + [56.1] * 35
    found = timing.memory_growth(moe, "host RSS", 32.0, (used, free_moe))
    assert found is not None and found.code == "heap-retention"
    past = [u + 3 * (u - 114.7) for u in used]  # 48 MB in use: past the floor
    assert timing.memory_growth(moe, "host RSS", 32.0, (past, free_moe)).code == "memory-growth"


def test_the_monitors_own_series_are_not_counted_as_the_scripts_memory(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A million steps of series are ~80 MB: a long run must not read them as its own growth."""
    monkeypatch.setattr("treeqa.health.monitor.rss_mb", lambda: 500.0)
    monitor = HealthMonitor(stream=io.StringIO())
    for _ in range(1000):
        monitor.begin_step()
        monitor.end_step(1.0, 0.01)
    own = len(monitor.series) * 8 * 1000 / 2**20  # MB of series after 1,000 steps
    assert monitor.series["rss_mb"][-1] == pytest.approx(500.0 - own)


def test_the_heap_is_read_again_when_rss_moves(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fast steps read RSS every 10 steps but the heap only every 0.5 s: 50 MB filling
    malloc's free heap in between was judged on the heap's reading from before, as
    memory-growth. A move of 4 MB since the heap's last reading reads it again."""
    rss = iter(range(300, 10_000, 5))  # MB: 5 more at each reading
    reads = []
    monkeypatch.setattr("treeqa.health.monitor.rss_mb", lambda: float(next(rss)))
    monkeypatch.setattr("treeqa.health.monitor.heap_mb", lambda: reads.append(1) or (100.0, 1.0))
    monitor = HealthMonitor(stream=io.StringIO())
    for _ in range(100):  # microseconds a step: one heap reading by time alone
        monitor.begin_step()
        monitor.end_step(1.0, 1e-5)
    assert len(reads) >= 10  # every RSS reading (each step 10k + 1) moved 5 MB


def test_heap_reading_follows_a_kept_tensor() -> None:
    if heap_mb() is None:
        pytest.skip("no glibc mallinfo2 here")
    before = heap_mb()
    kept = torch.ones(8 * 2**20 // 4)  # 8 MB, kept
    after = heap_mb()
    assert before is not None and after is not None
    assert after[0] - before[0] >= 7.9
    del kept
    freed = heap_mb()
    assert freed is not None and freed[0] < after[0] - 7.9


def test_loss_readings_fill_the_series_and_catch_a_nan() -> None:
    monitor = HealthMonitor(stream=io.StringIO())
    values = [2.0, 1.5, float("nan"), 1.0]
    for v in values:
        monitor.begin_step()
        monitor.end_step(torch.tensor(v, requires_grad=True) * 1.0, 0.01)
    monitor.end_step(torch.tensor([3.0, 5.0]), 0.01)  # a per-example loss counts as its mean
    monitor.end_step(0.5, 0.01)  # a float is taken as it is
    report = monitor.finish()
    got = report["series"]["loss"]
    assert got == [2.0, 1.5, None, 1.0, 4.0, 0.5]  # NaN is null in the JSON report
    assert not monitor.losses.pending
    assert [f["code"] for f in report["findings"]] == ["non-finite"]


def test_loss_queue_returns_readings_in_step_order() -> None:
    """The queue a GPU loss takes (on a CPU tensor its values are there at once)."""
    queue = LossReadings()
    queue.add(1, torch.tensor(2.0, requires_grad=True) * 1.0)
    queue.add(2, torch.tensor([1.0, 3.0]))  # a per-example loss counts as its mean
    assert queue.ready() == [(1, 2.0), (2, 2.0)] and not queue.pending


def test_checks_on_numbers() -> None:
    assert timing.step_time_regression([0.01] * 200) is None
    assert timing.step_time_regression([0.01 * (1 + i / 50) for i in range(200)]) is not None
    # Wall time doubling while CPU time stays flat: other jobs on the machine, not a leak.
    slower_wall = [0.01 * (1 + i / 100) for i in range(200)]
    assert timing.step_time_regression(slower_wall, [0.01] * 200) is None
    assert timing.step_time_regression(slower_wall, slower_wall) is not None
    assert timing.memory_growth([500.0 + i for i in range(100)], "host RSS", 32.0) is not None
    one_jump = [350.0] * 55 + [383.0] * 145  # the profiler's buffers at step 55, then flat
    assert timing.memory_growth(one_jump, "host RSS", 32.0) is None
    # Seen on a QANet run: RSS rose over the first half (length buckets, a 64-example dev
    # batch) and then stayed at its high-water mark; the last quarter was 0.1 MB higher.
    plateau = [898.0] * 50 + [1074.0] * 50 + [1465.2] * 50 + [1465.3] * 50
    assert timing.memory_growth(plateau, "host RSS", 32.0) is None
    leak = [343.0] * 50 + [393.0] * 50 + [454.0] * 50 + [508.0] * 50  # bug_memory_growth.py
    assert timing.memory_growth(leak, "host RSS", 32.0) is not None
    assert timing.input_bound([0.03] * 30, [0.01] * 30) is not None
    assert checks.activation_growth({"b.0": 1.0, "b.1": 1.1, "b.2": 1.2}) is None
    assert (
        checks.activation_growth({"b.0": 1.0, "b.1": 11.0, "b.2": 130.0, "b.3": 1500.0}) is not None
    )
    assert loss_inputs.looks_like_probabilities(torch.randn(4, 5).softmax(1))
    assert not loss_inputs.looks_like_probabilities(torch.randn(4, 5))
    # A bfloat16 softmax's rows sum to 1 only within ~0.003; a float32 row 0.003 off is no softmax.
    assert loss_inputs.looks_like_probabilities((torch.randn(64, 10) * 3).bfloat16().softmax(1))
    assert not loss_inputs.looks_like_probabilities(torch.full((4, 5), 0.2006))
    assert loss_levels.loss_at_init(math.log(10) + 0.2, 10) is None
    convs = {"aten::mkldnn_convolution": 7e3, "aten::addmm": 2e3, "aten::add": 1e3}
    conv = checks.hot_op(convs, 1)
    assert conv is not None and conv.severity == "warning" and "depthwise" in conv.fix
    # An image CNN (no text embedding): its convolutions are its work.
    image = checks.hot_op(convs, 1, conv_over_text=False)
    assert image is not None and image.severity == "info" and "depthwise" not in image.fix
    # Each family gets its own fix: a tree model's gathers are not a char CNN.
    # A CPU LSTM's fused layer and its backward are recurrent, not "other operators".
    rnn = checks.hot_op({"aten::mkldnn_rnn_layer": 5e3, "MkldnnRnnLayerBackward0": 3e3}, 1)
    assert rnn.evidence["family"] == "recurrent" and rnn.severity == "info"
    gathers = checks.hot_op({"aten::index_select": 7e3, "aten::addmm": 2e3}, 1)
    assert gathers is not None and "torch.unique" in gathers.fix and "conv" not in gathers.fix
    assert "index_select(0, idx)" not in gathers.fix
    # Gathers by index_select and sums by index_add_ / scatter_add_ are a graph network's
    # message passing, its own work (no cheaper form on a CPU): info, not a warning.
    assert gathers.severity == "info" and "message passing" in gathers.fix
    passing = {"aten::scatter_add_": 5e3, "aten::index_select": 3e3, "aten::addmm": 1e3}
    assert checks.hot_op(passing, 1).severity == "info"
    mixed = {"aten::index": 5e3, "aten::index_select": 3e3, "aten::addmm": 1e3}  # x[mask] too
    assert checks.hot_op(mixed, 1).severity == "warning"
    # Judged over the whole family: x[idx]'s index and index_put_ below a stretched top three.
    stretched = {"aten::index_select": 4e3, "aten::scatter_add_": 3e3, "aten::index_add_": 2e3}
    stretched |= {"aten::index": 1.9e3, "aten::_index_put_impl_": 1.8e3, "aten::mm": 1e3}
    assert checks.hot_op(stretched, 1).severity == "warning"
    put = checks.hot_op({"aten::_index_put_impl_": 5e3, "aten::index": 2e3, "aten::mm": 1e3}, 1)
    assert put is not None and put.fix.startswith("rows gathered as x[idx]")


def test_ctc_targets_holding_the_blank_or_an_index_out_of_range_are_found() -> None:
    """Within each target's length only: padding past it, blank or not, is never read."""
    lengths = torch.tensor([2, 3])
    padded = torch.tensor([[4, 5, 0], [1, 2, 3]])  # [N, S], padded with the blank
    assert loss_inputs.ctc_targets_invalid(padded, lengths, 0, 6) is None
    counted = loss_inputs.ctc_targets_invalid(padded, [3, 3], 0, 6)  # padding counted
    assert counted is not None and counted.code == "ctc-targets-invalid"
    assert (counted.evidence["blank_labels"], counted.evidence["labels"]) == (1, 6)
    from_zero = torch.tensor([0, 1, 2, 3, 4])  # [sum(lengths)], labels numbered from 0
    found = loss_inputs.ctc_targets_invalid(from_zero, lengths, 0, 6)
    assert found is not None and "1 are the blank index 0" in found.message
    assert loss_inputs.ctc_targets_invalid(from_zero, lengths, 5, 6) is None  # blank last
    found = loss_inputs.ctc_targets_invalid(from_zero, lengths, 5, 4)  # 4 of 4 classes
    assert found is not None and found.evidence["out_of_range_labels"] == 1
    assert loss_inputs.ctc_targets_invalid(torch.tensor([1, -1]), 2, 0, 4) is not None


def test_a_loss_divided_or_multiplied_by_a_constant_stands_for_the_loss_it_scales() -> None:
    """accelerate's backward divides the loss by its accumulation steps, the transformers
    Trainer by its own before it, a loop of one's own by k or times 1/k: the cross-entropy
    under them is the step's loss, its value that times the factor."""
    logits = torch.randn(8, 3, requires_grad=True)
    loss = nn.functional.cross_entropy(logits, torch.arange(8) % 3)

    def walked(scaled: torch.Tensor) -> tuple[bool, float]:
        node, scale = loss_inputs.unscaled(scaled)
        return node is loss.grad_fn, scale

    assert walked(1.0 * (loss / 1) / 1) == (True, 1.0)
    assert walked(loss / 4) == (True, 0.25)
    assert walked(loss * (1 / 4)) == (True, 0.25)
    assert walked(0.5 * loss / torch.tensor(2.0)) == (True, 0.25)
    assert walked(loss) == (True, 1.0)
    # A constant tensor on the left saves no factor for the loss's side: left as it is.
    assert walked(torch.ones(()) * loss) == (False, 1.0)
    # Not constants: a learnt temperature, a batch-dependent weight, a zero weight.
    assert walked(loss / torch.tensor(2.0, requires_grad=True)) == (False, 1.0)
    assert walked(loss * torch.ones(2)) == (False, 1.0)
    assert walked(loss * 0) == (False, 1.0)
    divided = loss / 4
    divided.backward()  # frees the factor: the backward after it is torch's to refuse
    assert loss_inputs.unscaled(divided) == (divided.grad_fn, 1.0)


def test_a_loss_a_ddp_model_computes_is_walked_back_through_ddps_sink(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With find_unused_parameters (as the transformers Trainer sets it), DDP hands its model's
    outputs on through a function of its own: the loss among them is still the cross-entropy
    the model computed, whichever output it is."""
    import torch.distributed as dist

    class Scored(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layer = nn.Linear(4, 3)

        def forward(self, x: torch.Tensor, y: torch.Tensor) -> dict[str, torch.Tensor]:
            logits = self.layer(x)
            return {"logits": logits, "loss": nn.functional.cross_entropy(logits, y)}

    # init_process_group sets an excepthook that prefixes "[rank0]: " and outlives the group
    monkeypatch.setattr(sys, "excepthook", sys.excepthook)
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        model = nn.parallel.DistributedDataParallel(Scored(), find_unused_parameters=True)
        out = model(torch.randn(5, 4), torch.tensor([0, 1, 2, 0, 1]))
        assert type(out["loss"].grad_fn).__name__ == "_DDPSinkBackward"
        node, scale = loss_inputs.unscaled(out["loss"] * 2 / 8)
        assert type(node).__name__ == "NllLossBackward0" and scale == 0.25
        assert type(loss_inputs.unscaled(out["loss"])[0]).__name__ == "NllLossBackward0"
        node, _ = loss_inputs.unscaled(out["logits"].sum())
        assert type(node).__name__ == "SumBackward0"
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("name", ["cross_entropy", "mse_loss"])
def test_a_backward_of_the_loss_divided_by_k_reads_as_the_noted_loss(name: str) -> None:
    """What the sampled step's backward is given stands for the cross-entropy or regression
    loss it divides by 1 or by the accumulation steps, 4 (``loss-at-chance``, ``loss-diverged``
    and its maximize cause read them, times the factor), not for one a loss scaler multiplies
    by 65,536: its factor changes from step to step."""
    monitor = HealthMonitor(stream=io.StringIO())
    monitor.install_loss_checks()
    check = monitor.loss_check
    try:
        for factor, stands in ((1, True), (4, True), (1 / 65536, False)):
            monitor.sampling = True
            logits = torch.randn(8, 3, requires_grad=True)
            target = torch.arange(8) % 3 if name == "cross_entropy" else torch.zeros(8, 3)
            handed = getattr(nn.functional, name)(logits, target) / factor  # the wrapped loss
            check.backward(handed)
            noted = check.cross_entropy if name == "cross_entropy" else check.regression
            if stands:
                assert noted is not None and noted[0] == id(handed) and noted[2] is None
                assert noted[3] == 1 / factor
            else:
                assert noted is None
            check.cross_entropy = check.regression = None
    finally:
        monitor.uninstall()


def test_a_mean_times_the_processes_is_told_from_a_sum_over_every_process_s_targets(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two processes: a mean cross-entropy times 2 on 3 sampled steps in a row is
    ``loss-times-processes``, and so is a sum over the tokens divided by this process's own
    count times 2; divided by both processes' count (twice this one's) times 2 it is the mean,
    as the transformers Trainer makes a causal LM's; so is a plain mean. One process: nothing
    to say."""
    from treeqa.health import processes as health_processes

    def run(processes: int, handed: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> Any:
        monkeypatch.setattr(health_processes, "world_size", lambda: processes)
        monitor = HealthMonitor(stream=io.StringIO())
        monitor.install_loss_checks()
        try:
            for _ in range(3):
                monitor.sampling = True
                logits = torch.randn(12, 5, requires_grad=True)
                target = torch.tensor([0, 1, 2, 3, 4, -100] * 2)
                monitor.loss_check.backward(handed(logits, target))
                monitor.loss_check.cross_entropy = None
        finally:
            monitor.uninstall()
        return [(f.code, f.evidence["factor"]) for f in monitor.findings.values()]

    def mean_times_2(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return nn.functional.cross_entropy(logits, target) * 2

    def global_token_mean(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        total = nn.functional.cross_entropy(logits, target, reduction="sum")
        return total / torch.tensor(20) * 2  # 10 tokens here, 10 on the other process

    def local_token_mean_times_2(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        total = nn.functional.cross_entropy(logits, target, reduction="sum")
        return total / torch.tensor(10) * 2  # this process's own count: the mean times 2

    assert run(2, mean_times_2) == [("loss-times-processes", 2.0)]
    assert run(2, local_token_mean_times_2) == [("loss-times-processes", 2.0)]
    assert run(2, global_token_mean) == []
    assert run(2, nn.functional.cross_entropy) == []
    assert run(1, mean_times_2) == []


def test_a_loss_whose_id_a_quotient_of_it_took_is_told_by_its_node() -> None:
    """The transformers Trainer divides the loss by its accumulation steps and drops it;
    accelerate's backward divides the quotient by 1, and that may take the freed loss's id: it
    stands for the loss at a quarter, not at its whole value. Another loss that takes the id
    stands for nothing."""
    monitor = HealthMonitor(stream=io.StringIO())
    monitor.install_loss_checks()
    check = monitor.loss_check
    try:
        monitor.sampling = True
        logits = torch.randn(8, 3, requires_grad=True)
        loss = nn.functional.cross_entropy(logits, torch.arange(8) % 3)
        handed = loss / 4 / 1
        # As if ``loss`` had been freed and ``handed`` made where it was.
        check.cross_entropy = (id(handed), 3, loss.grad_fn, 1.0)
        check.backward(handed)
        assert check.cross_entropy == (id(handed), 3, None, 0.25)
        other = logits.sum()
        check.cross_entropy = (id(other), 3, loss.grad_fn, 1.0)
        check.backward(other)
        assert check.cross_entropy is None
    finally:
        monitor.uninstall()


def test_the_site_of_a_finding_skips_the_frames_of_training_frameworks(tmp_path: Path) -> None:
    """An optimiser step wrapped by accelerate (its AcceleratedOptimizer), or called inside the
    transformers Trainer, is the script's call, not the framework's line."""
    for package in ("accelerate", "transformers"):
        source = tmp_path / package / "optimizer.py"
        source.parent.mkdir()
        source.write_text("def step(fn):\n    return fn()\n")
        framework: dict[str, Any] = {}
        exec(compile(source.read_text(), str(source), "exec"), framework)
        where = framework["step"](sites.user_site)
        assert where.startswith(f"{__file__}:"), where


@pytest.mark.parametrize("by_keyword", [False, True])
def test_ctc_loss_given_the_blank_as_a_label_is_reported(by_keyword: bool) -> None:
    """Through the wrapped loss: nn.CTCLoss passes its arguments by position, F.ctc_loss may
    take them by keyword; the blank given as the last class there."""
    monitor = HealthMonitor(stream=io.StringIO())
    monitor.install_loss_checks()
    try:
        monitor.sampling = True
        log_probs = torch.randn(10, 2, 5).log_softmax(-1)  # [T, N, C]
        targets = torch.tensor([[1, 4], [2, 3]])
        frames, lengths = torch.full((2,), 10), torch.full((2,), 2)
        if by_keyword:
            nn.functional.ctc_loss(
                log_probs, targets=targets, input_lengths=frames, target_lengths=lengths, blank=4
            )
        else:
            nn.CTCLoss(blank=4)(log_probs, targets, frames, lengths)
        codes = [f.code for f in monitor.findings.values()]
        assert codes == ["ctc-targets-invalid"]
    finally:
        monitor.uninstall()


CLASSIFIER_HEAD = """
import torch
from torch import nn

torch.manual_seed(0)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.head = nn.Sequential(nn.Linear(16, 128), nn.ReLU(), nn.Linear(128, 2))

    def forward(self, x):
        return self.head(x)


model = Net()
with torch.no_grad():
    model.head[2].weight.mul_(40)  # confident logits, as a classifier's get on easy data
opt = torch.optim.SGD(model.parameters(), lr=1e-4)
x = torch.randn(64, 16)
y = (x[:, 0] > 0).long()
for _ in range(5):
    loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


def test_activation_growth_compares_the_repeated_blocks_of_a_stack_only(tmp_path: Path) -> None:
    # Linear, ReLU, Linear in an nn.Sequential are numbered like blocks but repeat nothing: logits
    # 10x the hidden layer's output are no growth from block to block.
    head = nn.Sequential(nn.Linear(16, 128), nn.ReLU(), nn.Linear(128, 2))
    kinds = {f"head.{i}": checks.module_kind(m) for i, m in enumerate(head)}
    assert checks.activation_growth({"head.0": 0.88, "head.1": 0.61, "head.2": 10.3}, kinds) is None
    # Repeated blocks are still compared, a different last member (a final norm) left out.
    stack = nn.Sequential(*(nn.Linear(8, 8) for _ in range(4)), nn.LayerNorm(8))
    kinds = {f"b.{i}": checks.module_kind(m) for i, m in enumerate(stack)}
    rms = {"b.0": 1.0, "b.1": 11.0, "b.2": 130.0, "b.3": 1500.0, "b.4": 1.0}
    found = checks.activation_growth(rms, kinds)
    assert found is not None and found.evidence["rms"] == [1.0, 11.0, 130.0, 1500.0]
    # A deep MLP: its Linear layers, as many as its ReLUs, are the blocks compared.
    mlp = nn.Sequential(*(m for _ in range(4) for m in (nn.Linear(8, 8), nn.ReLU())))
    kinds = {f"mlp.{i}": checks.module_kind(m) for i, m in enumerate(mlp)}
    rms = {f"mlp.{i}": 10.0 ** (i // 2) * (1 if i % 2 == 0 else 0.6) for i in range(8)}
    found = checks.activation_growth(rms, kinds)
    assert found is not None and found.evidence["rms"] == [1.0, 10.0, 100.0, 1000.0]
    script = tmp_path / "classifier_head.py"
    script.write_text(CLASSIFIER_HEAD)
    _, report = run_doctor(["python", str(script)], stream=io.StringIO())
    assert report["steps"] == 5
    assert "activation-growth" not in {f["code"] for f in report["findings"]}


class Wrapper(nn.Module):
    """A layer wrapped as FullyShardedDataParallel wraps one: no weights of its own, one child."""

    def __init__(self, inner: nn.Module):
        super().__init__()
        self.inner = inner

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(x)


def test_a_stack_under_fsdp_is_told_apart_by_the_weights_it_wraps_or_is_set() -> None:
    """FullyShardedDataParallel takes a layer's parameters away (into a flat parameter) and sets
    views of it in their place for a forward, and wraps each layer under an auto-wrap policy: a
    16-512-512-2 MLP then read as three alike blocks whose logits grew 10x."""
    rms = {"mlp.0": 0.6, "mlp.1": 0.4, "mlp.2": 0.5, "mlp.3": 0.3, "mlp.4": 6.0}
    wrapped = nn.Sequential(
        Wrapper(nn.Linear(16, 512)), nn.ReLU(), Wrapper(nn.Linear(512, 512)), nn.ReLU(),
        Wrapper(nn.Linear(512, 2)),
    )  # fmt: skip
    kinds = {f"mlp.{i}": checks.module_kind(m) for i, m in enumerate(wrapped)}
    assert checks.activation_growth(rms, kinds) is None
    mlp = nn.Sequential(
        nn.Linear(16, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 2)
    )
    for layer in mlp[::2]:  # as set for a forward: plain tensors, no parameters
        weight, bias = layer.weight.detach(), layer.bias.detach()
        del layer.weight, layer.bias
        layer.weight, layer.bias = weight, bias
    kinds = {f"mlp.{i}": checks.module_kind(m) for i, m in enumerate(mlp)}
    assert checks.activation_growth(rms, kinds) is None
    # Wrapped alike, a stack of like layers is still one kind, and its growth is found.
    stack = nn.Sequential(*(Wrapper(nn.Linear(8, 8)) for _ in range(4)))
    kinds = {f"b.{i}": checks.module_kind(m) for i, m in enumerate(stack)}
    assert checks.activation_growth({"b.0": 1.0, "b.1": 11.0, "b.2": 130.0, "b.3": 1500.0}, kinds)


def test_a_conv_over_text_is_one_shaped_to_read_embedded_characters() -> None:
    """A diffusion model's 3 x 3 convs over channels as wide as its timestep Embedding were
    taken for a conv over text, and their share of a step warned with a char CNN's fix."""
    conv_over_embedding = checks.conv_over_embedding

    assert conv_over_embedding(nn.Conv2d(1, 256, (7, 32)), {32})  # bug_hot_op.py's
    assert conv_over_embedding(nn.Conv2d(64, 64, (1, 5)), {64})  # QANet's naive variant
    assert not conv_over_embedding(nn.Conv2d(64, 64, 3, padding=1), {64})  # a DDPM's
    assert not conv_over_embedding(nn.Conv2d(64, 64, 1), {64})  # a 1 x 1 projection
    assert not conv_over_embedding(nn.Conv2d(64, 64, (1, 5), groups=64), {64})  # depthwise


def test_hot_op_warns_only_if_the_family_dominates_without_the_threads_cpu_wait() -> None:
    """On a busy host a preempted call holds its operator's wall time: a trivial model's
    ``scatter_add_`` read 72% of a step. The window's run-queue wait is taken from the top
    family before judging it."""
    # (scatter_add_ alone now reads as a graph network's own work: advanced indexing here)
    times = {"aten::index": 7.2e3, "aten::addmm": 1.8e3, "aten::add": 1e3}  # us, 1 step
    assert checks.hot_op(times, 1).severity == "warning"
    found = checks.hot_op(times, 1, cpu_wait=5e3)  # 5 ms of the 10 waiting for a CPU
    assert found.severity == "info" and found.evidence["cpu_wait_ms_per_step"] == 5.0
    assert found.evidence["share"] == 0.72  # the report still says what the profiler read
    assert "these shares are rough" in found.message  # 5 of 10 ms waited
    assert "rough" not in checks.hot_op(times, 1, cpu_wait=2e3).message  # a fifth: as read
    assert checks.hot_op(times, 1, cpu_wait=0.3e3).severity == "warning"  # 6.9 of 9.7 ms: stands


def test_fused_attention_kernels_are_their_own_family() -> None:
    """QANet's window at step 51 on an H200 (ms per step): cuDNN's attention was "other
    operators" with advice for none of them."""
    times = {
        "aten::_cudnn_attention_forward": 99.7e3,
        "aten::_cudnn_attention_backward": 64.6e3,
        "aten::mm": 22.8e3,
        "aten::copy_": 13.6e3,
        "aten::add": 13.6e3,
    }
    found = checks.hot_op(times, 1)
    assert found is not None and found.evidence["family"] == "attention"
    assert found.severity == "info" and "square of the length" in found.fix
    names = [
        "aten::_scaled_dot_product_flash_attention_for_cpu",
        "ScaledDotProductEfficientAttentionBackward0",
    ]
    assert {checks.op_family(n) for n in names} == {"attention"}


def test_random_draws_are_their_own_family() -> None:
    """QANet's reduced config on a CPU: dropout's masks (aten::bernoulli_) were "other
    operators, no usual rewrite" at 32% of a step; aten::normal_ was a reduction."""
    times = {"aten::bernoulli_": 153e3, "aten::mm": 110e3, "aten::random_": 20e3}
    found = checks.hot_op(times, 3)
    assert found is not None and found.evidence["family"] == "random"
    assert found.severity == "info" and "dropout" in found.fix
    names = ["aten::normal_", "aten::uniform_", "aten::native_dropout", "aten::randperm"]
    assert {checks.op_family(n) for n in names} == {"random"}
    kept = ["aten::native_layer_norm", "aten::norm", "aten::index_select", "aten::mm"]
    assert [checks.op_family(n) for n in kept] == ["reduction", "reduction", "indexing", "matmul"]


def test_device_idle_is_the_gpus_busy_time_against_steps_outside_windows() -> None:
    """The H200 figures: QANet at batch 32 ran 37 ms of kernels in a 123 ms step (found);
    at batch 128, 128 ms in 142 ms (not)."""
    steps = [0.123] * 20 + [math.nan] * 3  # NaN: steps whose time was not read
    found = timing.device_idle(0.037, 3100, steps)
    assert found is not None and found.code == "device-idle" and found.severity == "info"
    assert found.evidence["share"] == 0.301 and found.evidence["kernels_per_step"] == 3100
    assert "busy 30% of each step (37.0 ms of kernels in a 123.0 ms step" in found.message
    assert timing.device_idle(0.128, 3100, [0.142] * 20) is None
    assert timing.device_idle(0.037, 3100, [0.123] * 4) is None  # too few steps to judge
    assert timing.device_idle(0.0, 0, [0.123] * 20) is None  # nothing ran on a device


def test_device_busy_counts_overlapping_kernels_once() -> None:
    from torch.autograd import DeviceType

    from treeqa.health.profile import _device_busy

    class Event:
        def __init__(self, start: int, ns: int, device: DeviceType = DeviceType.CUDA) -> None:
            self.start, self.ns, self.device = start, ns, device

        def start_ns(self) -> int:
            return self.start

        def duration_ns(self) -> int:
            return self.ns

        def device_type(self) -> DeviceType:
            return self.device

        def name(self) -> str:
            return "kernel"

    # two streams overlapping over 100-150, a gap, a kernel inside another, a CPU operator
    events = [Event(100, 100), Event(0, 150), Event(400, 100), Event(420, 10)]
    busy, kernels = _device_busy([*events, Event(0, 10_000, DeviceType.CPU)])
    assert busy == 300 / 1e9 and kernels == 4


def test_a_profile_window_on_a_cpu_reads_no_device_time() -> None:
    window = ProfileWindow(steps=2)
    window.schedule(1)
    for step in (1, 2):
        window.begin(step)
        torch.ones(64, 64) @ torch.ones(64, 64)
        window.end(step)
    assert not window.active and window.device is None


def test_a_profile_window_adds_up_the_step_threads_cpu_wait() -> None:
    clock = iter([(7, 1.0), (7, 1.25), (7, 2.0), (8, 2.5), (7, 3.0), (7, math.nan)])
    window = ProfileWindow(steps=3, waited=lambda: next(clock))
    window.schedule(1)
    for step in (1, 2, 3):  # 0.25 s waited; a close on another thread; NaN: neither counts
        window.begin(step)
        window.end(step)
    assert window.cpu_wait == 0.25 and not window.active


def test_parameter_alias_is_a_slip_not_a_tie_written_on_purpose() -> None:
    import copy

    class Gates(nn.Module):  # the original Tree-GRU: the reset gate is the update gate
        def __init__(self) -> None:
            super().__init__()
            self.Uz = nn.Linear(4, 4)
            self.Ur = self.Uz

    class Shared(nn.Module):  # an embedding given to encoder and decoder, a handle, a tie
        def __init__(self) -> None:
            super().__init__()
            emb = nn.Embedding(5, 4)
            self.encoder, self.decoder = nn.Sequential(emb), nn.Sequential(emb, nn.Linear(4, 4))
            self.last = self.decoder[1]
            self.src, self.tgt = nn.Embedding(5, 4), nn.Embedding(5, 4)
            self.tgt.weight = self.src.weight

    class Copies(nn.Module):  # copy.copy shares the parameter table: meant as new layers
        def __init__(self) -> None:
            super().__init__()
            layer = nn.Linear(4, 4)
            self.layers = nn.ModuleList([copy.copy(layer) for _ in range(3)])

    assert [f.evidence["names"] for f in checks.parameter_aliases(Gates())] == [["Uz", "Ur"]]
    repeated = nn.Sequential(*[nn.Linear(4, 4)] * 3)  # [block] * n
    assert len(checks.parameter_aliases(repeated)) == 2
    assert checks.parameter_aliases(Shared()) == []
    (found,) = checks.parameter_aliases(Copies())
    assert found.evidence == {"names": ["layers.0", "layers.1", "layers.2"], "parameters": 20}

    class TiedByData(nn.Module):  # two parameters over one table: each stepped on its own
        def __init__(self) -> None:
            super().__init__()
            self.emb, self.out = nn.Embedding(5, 4), nn.Linear(4, 5)
            self.out.weight.data = self.emb.weight.data

    (found,) = checks.parameter_aliases(TiedByData())
    assert found.evidence == {"names": ["emb.weight", "out.weight"], "parameters": 20}
    side_by_side = nn.Linear(4, 4)  # views of one buffer that do not overlap (cuDNN's RNNs)
    flat = torch.zeros(20)
    side_by_side.weight.data, side_by_side.bias.data = flat[:16].view(4, 4), flat[16:]
    assert checks.parameter_aliases(side_by_side) == []
    columns = nn.Module()  # a weight's columns split in two: spans that interleave, no element
    table = torch.randn(4, 8)
    columns.register_parameter("left", nn.Parameter(table[:, :4]))
    columns.register_parameter("right", nn.Parameter(table[:, 4:]))
    assert checks.parameter_aliases(columns) == []
    parts = nn.Module()  # view_as_real's real and imaginary parts: every other element
    pairs = torch.view_as_real(torch.randn(6, dtype=torch.complex64))
    parts.register_parameter("re", nn.Parameter(pairs[:, 0]))
    parts.register_parameter("im", nn.Parameter(pairs[:, 1]))
    assert checks.parameter_aliases(parts) == []
    assert checks.parameter_aliases(nn.LSTM(4, 4, num_layers=2)) == []


class SlowCallback(Callback):
    """A callback that takes 20 ms after every step (a slow logger, the monitor itself on a
    busy host: its reference workload waits for a preempted thread-pool worker)."""

    def on_step_end(self, state: TrainState, output: Output, batch: object) -> None:
        time.sleep(0.02)


def test_the_callbacks_own_time_after_a_step_is_not_data_wait(tmp_path: Path) -> None:
    monitor = HealthMonitor(every=10, json_path=tmp_path / "health.json", stream=io.StringIO())
    model = Tiny()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    config = TrainConfig(epochs=1, device="cpu")
    fit(model, opt, batches, config, callbacks=[monitor, SlowCallback()])
    report = json.loads((tmp_path / "health.json").read_text())
    assert "input-bound" not in {f["code"] for f in report["findings"]}
    assert sorted(report["series"]["data_time"])[15] < 0.01  # the batches are a list: ~0


def test_a_machine_that_slows_down_is_not_a_regression() -> None:
    """Seen on a shared host: a clean 80-step script's steps and CPU time rose 12 -> 20 ms per
    step; a fixed reference workload timed after each step slowed as much."""
    steps = [0.012 * (1 + i / 100) for i in range(200)]
    machine = [15e-6 * (1 + i / 100) for i in range(200)]
    assert timing.step_time_regression(steps, steps) is not None
    assert timing.step_time_regression(steps, steps, machine) is None
    # A leak on a steady machine, and a leak on a machine that gets slower, still show.
    leak = [0.01 * (1 + i / 50) for i in range(200)]
    steady = [15e-6] * 100 + [math.nan] * 3 + [15e-6] * 97  # NaN: a profiler window
    alone = timing.step_time_regression(leak, leak, steady)
    assert alone is not None and alone.evidence["machine_slowdown"] == 1.0
    both = [a * b / 15e-6 for a, b in zip(leak, machine, strict=True)]
    found = timing.step_time_regression(both, both, machine)
    assert found is not None and found.evidence["machine_slowdown"] > 1.5
    assert found.evidence["ratio"] == pytest.approx(alone.evidence["ratio"], rel=0.02)


def test_a_reference_read_on_some_steps_keeps_its_quarters_aligned_with_the_steps() -> None:
    """After the first 200 steps the reference is timed on every 4th step only: its quarters
    must still cover the same steps as the step times', not the first steps' dense readings."""
    n = 1000
    # The machine runs at full speed until step 600, then 2x slower; so do the steps.
    machine = [15e-6 * (2 if i >= 600 else 1) for i in range(n)]
    sparse = [t if i < 200 or i % 4 == 0 else math.nan for i, t in enumerate(machine)]
    steps = [0.01 * (2 if i >= 600 else 1) * (1 + i / 2000) for i in range(n)]
    assert timing.step_time_regression(steps, steps) is not None
    assert timing.step_time_regression(steps, steps, sparse) is None
    medians = timing.quarter_medians(sparse, 50)
    assert medians == timing.quarter_medians(machine, 50) == [15e-6, 15e-6, 30e-6, 30e-6]
    assert timing.quarter_medians([1.0] * 50 + [math.nan] * 150, 0) is None  # a quarter empty
    # A long run's quarters are sampled (an odd stride), and still see a series read every 4th step.
    long = [float(i * 4 // 40_000 + 1) if i % 4 == 0 else math.nan for i in range(40_000)]
    assert timing.quarter_medians(long, 0) == [1.0, 2.0, 3.0, 4.0]


def test_a_reference_that_reads_fast_late_makes_no_finding() -> None:
    drift = [0.01 * (1 + i / 400) for i in range(200)]  # 1.4x: under the 1.5x threshold
    faster = [15e-6 * (1 - i / 400) for i in range(200)]
    assert timing.step_time_regression(drift, drift) is None
    assert timing.step_time_regression(drift, drift, faster) is None


def test_monitor_times_the_canary_after_each_early_cpu_step_then_every_4th() -> None:
    monitor = HealthMonitor(every=1000, stream=io.StringIO())  # no profiler window (step 1001)
    state = torch.random.get_rng_state()
    for _ in range(240):
        monitor.begin_step()
        monitor.end_step(1.0, 0.01)
    for name in ("canary", "cpu_time"):
        series = monitor.series[name]
        read = [i + 1 for i, t in enumerate(series) if not math.isnan(t)]
        assert len(series) == 240 and read == [*range(1, 201), *range(204, 241, 4)], name
    assert all(0 < t < 0.1 for t in monitor.series["canary"][:200])
    assert torch.equal(torch.random.get_rng_state(), state)  # the script's random stream


def test_series_checks_thin_out_as_the_run_grows(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each series check reads every step so far: at a fixed interval their cost per step would
    grow with the run. Every 50 steps until step 1,600, then every 1/32 of the steps so far."""
    monitor = HealthMonitor(every=50, stream=io.StringIO())
    checked: list[int] = []
    monkeypatch.setattr(monitor, "_series_checks", checked.append)
    for _ in range(3200):
        monitor.begin_step()
        monitor.end_step(1.0, 0.01)
    gaps = [b - a for a, b in zip(checked, checked[1:], strict=False)]
    assert checked[:3] == [50, 100, 150] and set(gaps[:31]) == {50}
    assert all(b - a == max(50, a // 32) for a, b in zip(checked, checked[1:], strict=False))
    assert 50 < len(checked) < 64  # a fixed interval: 64
    assert report.build(monitor)["series"]["step"][:3] == [1, 2, 3]  # ints in the JSON


def test_profiler_window_is_not_opened_for_a_host_that_got_slower() -> None:
    early, slow = [0.01] * 40, [0.02] * 40  # steps 2x slower at the end
    machine_early, machine_slow = [1e-5] * 40, [2e-5] * 40
    for canary, expected in (
        (None, True),  # no reference: slower steps open a window
        ([*machine_early, *machine_early], True),  # the machine kept its speed: the steps slowed
        ([*machine_early, *machine_slow], False),  # the machine slowed as much
        ([*machine_early, *[math.nan, math.nan, math.nan, 2e-5] * 10], False),  # every 4th read
    ):
        window = ProfileWindow()
        window.schedule_if_slower([*early, *slow], 81, canary)
        assert window.active is expected, canary
    # The step thread's wait for a CPU rose from none to a third of each step: other
    # processes slowed it. A wait that stayed as it was says nothing.
    for wait, expected in (([0.0] * 40 + [0.007] * 40, False), ([0.002] * 80, True)):
        window = ProfileWindow()
        window.schedule_if_slower([*early, *slow], 81, None, wait)
        assert window.active is expected, wait


def test_lightning_adapter_is_optional() -> None:
    try:
        import lightning  # noqa: F401
    except ImportError:
        from treeqa.health.lightning import HealthCallback

        with pytest.raises(ImportError, match="treeqa\\[lightning\\]"):
            HealthCallback()
        return
    from treeqa.health.lightning import HealthCallback

    assert HealthCallback().monitor is not None


def test_cli_doctor_bad_arguments_are_one_line_before_any_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from treeqa.cli.main import main

    monkeypatch.chdir(tmp_path)
    script = tmp_path / "train.py"
    script.write_text("open('ran.txt', 'w').close()\n")
    missing = tmp_path / "nosuch.py"
    for argv, message in (
        (["--", "python", str(missing)], f"{missing}: no such script"),
        (["--", "python", "-m", "nosuch_module"], "-m nosuch_module: no such module"),
        (["--json", str(tmp_path), "--", "python", str(script)], f"--json {tmp_path}: a directory"),
    ):
        assert main(["doctor", *argv]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"treeqa doctor: error: {message}") and err.count("\n") == 1
    with pytest.raises(SystemExit):
        main(["doctor", "--every", "0", "--", "python", str(script)])
    assert (
        "argument --every: expected a whole number of at least 1, got 0" in capsys.readouterr().err
    )
    assert not (tmp_path / "ran.txt").exists()  # the script never started


def test_loss_accumulated_is_caught_in_a_fresh_interpreter(doctor_report) -> None:
    """The corpus script runs under the real ``treeqa doctor`` in a new process (conftest's
    FRESH_PROCESS), where the running total's oldest graph node is numbered 0."""
    _, report, _ = doctor_report("bug_loss_accumulated.py")
    found = next(f for f in report["findings"] if f["code"] == "loss-accumulated-with-graph")
    line = line_of("bug_loss_accumulated.py", "total_loss += loss")
    assert "total_loss" in found["where"] and f"bug_loss_accumulated.py:{line}" in found["where"]


HOLDERS = """
import torch
from torch import nn

torch.manual_seed(0)
_warm = (torch.ones(1, requires_grad=True) * 2).sum()  # a graph made before training, kept
init_norm = _warm * 1.5  # and another, derived from it: neither grows
lin = nn.Linear(8, 4)
opt = torch.optim.SGD(lin.parameters(), lr=0.01)
state, total = torch.zeros(4), 0.0
for step in range(34):
    x = torch.randn(16, 8)
    if "{bug}" == "state":
        state = 0.5 * state + lin(x).mean(0)  # carried over without detach
        loss = (state - 1.0).pow(2).mean()
        retain = True
    else:
        loss = lin(x).pow(2).mean()
        retain = False
    opt.zero_grad()
    loss.backward(retain_graph=retain)
    opt.step()
    if "{bug}" == "total":
        total += loss
"""


@pytest.mark.parametrize("bug", ["none", "total", "state"])
def test_graph_holders_are_the_ones_that_span_steps(bug: str, tmp_path: Path) -> None:
    """A graph made before the first step is no earlier step's; a loss computed from a
    carried-over state is not the holder, the state is."""
    script = tmp_path / f"holders_{bug}.py"
    script.write_text(HOLDERS.replace("{bug}", bug))
    _, report = run_doctor(["python", str(script)], every=10, stream=io.StringIO())
    kinds = ("graph-retained", "loss-accumulated-with-graph")
    graph = {f["code"]: f for f in report["findings"] if f["code"] in kinds}
    if bug == "none":
        assert graph == {}
    elif bug == "total":
        assert list(graph) == ["loss-accumulated-with-graph"]
        assert "'total'" in graph["loss-accumulated-with-graph"]["where"]
    else:
        assert list(graph) == ["graph-retained"]
        found = graph["graph-retained"]
        line = next(i for i, t in enumerate(HOLDERS.splitlines(), 1) if "state = 0.5" in t)
        assert (
            found["severity"] == "error"
            and f"'state' in <module>() ({script}:{line})" in found["where"]
        )


COMPILED = """
import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 4))
compiled = torch.compile(model, backend="{backend}")
opt = torch.optim.SGD(model.parameters(), lr=0.05)
total = 0.0
for step in range(40):
    x = torch.randn(32, 16)
    loss = nn.functional.cross_entropy(compiled(x), (x[:, 0] > 0).long())
    opt.zero_grad()
    loss.backward()
    opt.step()
    total += loss  # the monitor still sees a compiled model's steps and graphs
print("done")
"""


def test_cli_doctor_runs_a_compiled_script(tmp_path: Path) -> None:
    """Dynamo traces into global module hooks: the doctor's must do nothing there (it asserted
    before), and must not be added and removed on sampled steps, which recompiles the model;
    nor may the every-module hook be removed after the compiled model's first call, nor a
    hook's own frame be compiled (each recompiled it, and a script with
    ``error_on_recompile`` stopped): the doctor recompiles nothing."""
    script, out = tmp_path / "compiled.py", tmp_path / "report.json"
    script.write_text(COMPILED.replace("{backend}", "aot_eager"))
    cmd = [sys.executable, "-m", "treeqa", "doctor", "--every", "10", "--json", str(out)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TORCH_LOGS": "recompiles"}
    proc = subprocess.run(
        [*cmd, "--", "python", str(script)], capture_output=True, text=True, timeout=300, env=env
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "done", proc.stderr
    report = json.loads(out.read_text())
    assert report["steps"] == 40
    assert "loss-accumulated-with-graph" in {f["code"] for f in report["findings"]}
    assert proc.stderr.count("Recompiling") == 0, proc.stderr


def test_cli_doctor_finds_a_compiled_models_gradients_not_zeroed(tmp_path: Path) -> None:
    """The gradient probes hook parameters, outside the compiled graph: a compiled model's
    loop without zero_grad is named, and the probes recompile nothing."""
    script, out = tmp_path / "compiled.py", tmp_path / "report.json"
    source = COMPILED.replace("{backend}", "aot_eager").replace("    opt.zero_grad()\n", "")
    script.write_text(source.replace("    total += loss", "    total += loss.item()"))
    cmd = [sys.executable, "-m", "treeqa", "doctor", "--every", "10", "--json", str(out)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TORCH_LOGS": "recompiles"}
    proc = subprocess.run(
        [*cmd, "--", "python", str(script)], capture_output=True, text=True, timeout=300, env=env
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "done", proc.stderr
    assert "gradients-not-zeroed" in {f["code"] for f in json.loads(out.read_text())["findings"]}
    assert proc.stderr.count("Recompiling") == 0, proc.stderr


PATHS = """
import os
import sys
import warnings

import torch
from torch import nn

warnings.warn("hidden by -W ignore")
os.chdir(sys.argv[1])  # the report path was given relative to the caller's directory
model = nn.Linear(4, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
total = 0.0
for i in range(10):
    loss = model(torch.randn(3, 4)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    total += loss
print(__file__, sys.argv[0], " ".join(sys.orig_argv))
raise KeyboardInterrupt
"""


def test_doctor_paths_options_and_ctrl_c(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """As plain python: an absolute __file__, argv[0] as given, -W/-X options with their value,
    exit 130 on Ctrl-C with the script's own traceback; reports go where the caller meant."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text(PATHS)
    (tmp_path / "elsewhere").mkdir()
    with pytest.raises(ValueError, match="cannot write there"):  # before the run, not after
        run_doctor(["python", "train.py", "elsewhere"], json_path="train.py/r.json")
    with pytest.raises(ValueError, match="/proc/r.json: cannot write there"):
        run_doctor(["python", "train.py", "elsewhere"], json_path="/proc/r.json")
    for name in ("health.txt", "health"):  # no image format, found before the run
        with pytest.raises(ValueError, match=f"--plot {tmp_path / name}: name the image format"):
            run_doctor(["python", "train.py", "elsewhere"], plot_path=name)
    command = ["python", "-W", "ignore", "-X", "faulthandler", "train.py", "elsewhere"]
    code, _ = run_doctor(command, json_path="r.json", every=5, stream=io.StringIO())
    out, err = capsys.readouterr()
    assert code == 130
    assert out.split() == [str(tmp_path / "train.py"), "train.py", *command]
    assert "hidden by" not in err and "runpy" not in err and "doctor.py" not in err
    assert err.startswith("Traceback") and err.strip().endswith("KeyboardInterrupt")
    assert (tmp_path / "r.json").exists() and not (tmp_path / "elsewhere" / "r.json").exists()


SCRIPT_AS_PYTHON = """
import sys, warnings

if not sys.warnoptions:  # the idiom of the warnings docs: quiet unless -W was given
    warnings.simplefilter("ignore")
print(sys.warnoptions, type(__loader__).__name__)
import torch

m = torch.nn.Linear(4, 3)
opt = torch.optim.SGD(m.parameters(), lr=0.1)
for _ in range(3):
    loss = torch.nn.functional.cross_entropy(m(torch.randn(8, 4)), torch.randint(0, 3, (8,)))
    opt.zero_grad()
    loss.backward()
    opt.step()
if sys.argv[1] == "warn":
    warnings.warn("a warning -W error makes an error")
torch.nn.functional.cross_entropy(m(torch.randn(8, 4)), torch.randint(0, 3, (7,)))
"""


OPTIONS = [["-W", "error"], ["-W", "ignore::UserWarning"], []]


@pytest.fixture(scope="module")
def as_python(
    tmp_path_factory: pytest.TempPathFactory,
    side_by_side: Callable[..., list[subprocess.CompletedProcess[str]]],
) -> tuple[Path, dict[str, subprocess.CompletedProcess[str]]]:
    """The script run by plain python with each of the ``OPTIONS``, side by side."""
    folder = tmp_path_factory.mktemp("as-python")
    (folder / "train.py").write_text(SCRIPT_AS_PYTHON)
    commands = ([sys.executable, *options, "train.py", "warn"] for options in OPTIONS)
    runs = side_by_side(*commands, cwd=folder)
    return folder, {" ".join(o): run for o, run in zip(OPTIONS, runs, strict=True)}


@pytest.mark.parametrize("options", OPTIONS)
def test_doctor_gives_the_script_what_python_gives_it(
    options: list[str],
    as_python: tuple[Path, dict[str, subprocess.CompletedProcess[str]]],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """-W filters in sys.warnoptions (a script that checks it keeps its filters), a loader in
    __loader__, and tracebacks of the script's frames and torch's, none of the doctor's wrappers
    (an error inside a wrapped loss, a warning turned into an error inside warnings.warn)."""
    folder, plain_runs = as_python
    monkeypatch.chdir(folder)
    capsys.readouterr()  # (what the fixture's setup printed is not the script's)
    command = ["python", *options, "train.py", "warn"]
    code, _ = run_doctor(command, every=5, stream=io.StringIO())
    out, err = capsys.readouterr()
    plain = plain_runs[" ".join(options)]
    assert (
        (code, out) == (plain.returncode, plain.stdout) == (1, f"{options[1:]} SourceFileLoader\n")
    )
    assert "treeqa" not in err and "runpy" not in err
    assert err.splitlines()[-1] == plain.stderr.splitlines()[-1]
    assert [line for line in err.splitlines() if line.startswith("  File")] == [
        line for line in plain.stderr.splitlines() if line.startswith("  File")
    ]


def test_doctor_module_run_names_the_modules_lines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "train.py").write_text(
        COMPILED.replace('torch.compile(model, backend="{backend}")', "model")
    )
    with contextlib.redirect_stdout(io.StringIO()):
        _, report = run_doctor(["python", "-m", "pkg.train"], every=5, stream=io.StringIO())
    found = next(f for f in report["findings"] if f["code"] == "loss-accumulated-with-graph")
    assert str(tmp_path / "pkg" / "train.py") + ":" in found["where"]


def test_a_loss_that_overflows_after_growing_is_named_divergence() -> None:
    """Outputs still finite, the squared error too large for float32: a learning rate too
    high, not the loss code; a loss that turns NaN with no such growth keeps that hint."""
    for before, expected in (
        ([1.5e3, 3e9, 7e15, 2e22, 1e28], "the loss grew from 1.5e+03 to 1e+28 over the 5 steps"),
        ([0.7, 0.69, 0.7, 0.68], "no module output was non-finite (look at the loss code)"),
    ):
        found: list[Finding] = []
        tracer = NonFiniteTracer(found.append)
        tracer.saw_loss(7, math.inf, before)
        tracer.begin_step().remove()  # a watched step on which no module output was non-finite
        tracer.finish()
        assert expected in found[0].message, found[0].message


class Sparsify(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.to_sparse()


def test_the_output_hooks_pass_sparse_and_nested_outputs_by() -> None:
    """A module that returns a sparse matrix (a graph's adjacency) or a nested tensor: neither
    has a mean or ``isfinite``, and the script ran on as plain python runs it
    (``clean_sparse_outputs.py`` for the sampled steps' hook)."""
    found: list[Finding] = []
    tracer = NonFiniteTracer(found.append)
    sparse, enc = Sparsify(), nn.Linear(4, 2)
    tracer.names = {id(sparse): "sparse", id(enc): "enc"}
    tracer.saw_loss(3, math.nan)
    handle = tracer.begin_step()
    try:
        sparse(torch.full((2, 4), math.nan))
        enc(torch.ones(1, 4))
    finally:
        handle.remove()
    tracer.finish()
    assert "first produced" not in found[0].message
    assert not checks.dense(torch.ones(2, 2).to_sparse())
    assert not checks.dense(torch.nested.as_nested_tensor([torch.ones(2), torch.ones(3)]))
    assert checks.dense(torch.ones(2, 2))


def test_nan_in_one_of_several_outputs_names_the_module() -> None:
    """A layer that returns several tensors, a flow's (z, log_det), is named when one of them
    is non-finite from finite inputs, not passed by for the loss code to be blamed."""

    class Coupling(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.scale = nn.Linear(1, 1)

        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            a, b = x.chunk(2, 1)
            s = self.scale(a)
            return torch.cat([a, b * s], 1), torch.log(s).sum(1)

    found: list[Finding] = []
    tracer = NonFiniteTracer(found.append)
    flow = Coupling()
    with torch.no_grad():
        flow.scale.weight.fill_(-1.0)
        flow.scale.bias.zero_()
    tracer.names = {id(flow): "flow", id(flow.scale): "flow.scale"}
    tracer.saw_loss(3, math.nan)
    handle = tracer.begin_step()
    with torch.no_grad():
        flow(torch.ones(4, 2))
    handle.remove()
    tracer.saw_loss(4, math.nan)
    assert "first produced by module flow (Coupling" in found[0].message, found[0].message


def test_messages_say_what_is_known() -> None:
    """Armed after the bad step, the NaN tracer finds weights the optimiser already spoiled: that
    module did not produce the NaN. Advice fits the operator family and the loader in use."""
    found: list[Finding] = []
    tracer = NonFiniteTracer(found.append)
    enc = nn.Linear(4, 2)
    tracer.names = {id(enc): "enc"}
    tracer.saw_loss(41, math.nan)
    handle = tracer.begin_step()
    with torch.no_grad():
        enc.weight.fill_(math.nan)
        enc(torch.ones(1, 4))
    handle.remove()
    tracer.saw_loss(42, math.nan)
    assert (
        "enc's parameters (weight) are already non-finite, updated at step 41" in found[0].message
    )
    assert "first produced" not in found[0].message and found[0].where == "enc (Linear)"
    for family, op in (
        ("other", "aten::t"),
        ("elementwise", "aten::relu"),
        ("softmax/loss", "aten::_log_softmax"),
        ("communication", "c10d::allreduce_"),  # DDP's gradients, not a reduction
        ("communication", "DistributedDataParallel.forward"),
        ("communication", "FSDP::all_gather (0)"),  # fully_shard's, not an indexing op
        ("communication", "FullyShardedDataParallel._pre_forward"),
    ):
        hot = checks.hot_op({op: 7e3, "aten::addmm": 1e3}, 1)
        assert hot is not None and hot.evidence["family"] == family
        assert hot.severity == "info", op
        assert "conv" not in hot.fix and "bf16" not in hot.fix, family
    waits = timing.input_bound([0.03] * 30, [0.01] * 30, workers=4)
    assert waits is not None and "already has 4 workers" in waits.fix
    assert "num_workers>0" not in waits.fix
    monitor = HealthMonitor(stream=io.StringIO())
    for _ in range(3):
        monitor.note_backward(True)
        monitor.end_step(1.0, 0.01)
    retain = next(f for f in monitor.findings.values() if f.code == "retain-graph-every-step")
    assert "no later backward" not in retain.message  # a later backward may well go through it


TEACHER = """
import time

import torch
from torch import nn


class Teacher(nn.Module):  # frozen and slow: its forward is compute, not waiting for data
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 4)

    def forward(self, x):
        time.sleep(0.004)
        return self.lin(x)


teacher, student = Teacher(), nn.Linear(8, 4)
opt = torch.optim.SGD(student.parameters(), lr=0.01)
for step in range(30):
    x = torch.randn(16, 8)
    with torch.no_grad():
        target = teacher(x)
    loss = (student(x) - target).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


def test_a_frozen_teachers_forward_is_not_data_wait(tmp_path: Path) -> None:
    script = tmp_path / "distill.py"
    script.write_text(TEACHER)
    _, report = run_doctor(["python", str(script)], every=10, stream=io.StringIO())
    assert report["steps"] == 30
    assert "input-bound" not in {f["code"] for f in report["findings"]}
    assert min(report["series"]["step_time"][1:]) >= 0.004  # the teacher counts as compute


def test_a_one_time_jump_is_not_a_regression_and_no_steps_is_said() -> None:
    """Seen: a backbone unfrozen at step 150 of 300 took steps 1.9 -> 3.1 ms at once, then flat."""
    unfreeze = [0.0019] * 150 + [0.0031] * 150
    assert timing.step_time_regression(unfreeze, unfreeze) is None
    late_leak = [0.01] * 100 + [0.01 * (1 + i / 50) for i in range(100)]  # grows from half-way
    assert timing.step_time_regression(late_leak, late_leak) is not None
    stream = io.StringIO()
    HealthMonitor(stream=stream).finish()  # a script that never stepped an optimiser
    assert "0 training steps seen, so nothing was monitored" in stream.getvalue()
    assert "no findings" not in stream.getvalue()


def test_backward_calls_with_no_optimiser_step_ask_for_the_step(tmp_path: Path) -> None:
    script = tmp_path / "no_step.py"
    script.write_text(
        "import torch\n"
        "model = torch.nn.Linear(4, 2)\n"
        "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "for _ in range(30):\n"
        "    opt.zero_grad()\n"
        "    model(torch.randn(8, 4)).pow(2).mean().backward()  # opt.step() forgotten\n"
    )
    stream = io.StringIO()
    _, report = run_doctor(["python", str(script)], stream=stream)
    assert report["steps"] == 0 and report["backwards_without_a_step"] == 30
    assert "after 30 backward() calls" in stream.getvalue()
    assert "is optimizer.step() missing?" in stream.getvalue()
    assert "no findings" not in stream.getvalue()
    # word_language_model's update, by hand: each is a step, the last one at the script's end.
    script.write_text(
        script.read_text()
        + "    for p in model.parameters():\n"
        + "        p.data.add_(p.grad, alpha=-0.1)\n"
    )
    _, report = run_doctor(["python", str(script)], stream=io.StringIO())
    assert report["steps"] == 30 and report["backwards_without_a_step"] == 0
    # The step copied under the evaluation's torch.no_grad(): the first backward raises, and
    # no backward ran, so none is counted (the step was not forgotten).
    script.write_text(
        "import torch\n"
        "model = torch.nn.Linear(4, 2)\n"
        "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "with torch.no_grad():\n"
        "    loss = model(torch.randn(8, 4)).pow(2).mean()\n"
        "    try:\n"
        "        loss.backward()\n"
        "    except RuntimeError as e:\n"
        "        print(e)\n"
    )
    stream = io.StringIO()
    _, report = run_doctor(["python", str(script)], stream=stream)
    assert report["steps"] == 0 and report["backwards_without_a_step"] == 0
    assert "is optimizer.step() missing?" not in stream.getvalue()


def test_gradients_from_autograd_grad_applied_by_hand_make_steps(tmp_path: Path) -> None:
    script = tmp_path / "by_hand.py"
    script.write_text(
        "import torch\n"
        "model = torch.nn.Linear(4, 2)\n"
        "params = list(model.parameters())\n"
        "for _ in range(30):\n"
        "    loss = model(torch.randn(8, 4)).pow(2).mean()\n"
        "    grads = torch.autograd.grad(loss, params)\n"
        "    for p, g in zip(params, grads):\n"
        "        p.data.add_(g, alpha=-0.1)\n"
    )
    _, report = run_doctor(["python", str(script)], stream=io.StringIO())
    assert report["steps"] == 30
    losses = report["series"]["loss"]  # the outputs given to autograd.grad
    assert len(losses) == 30 and losses[-1] < losses[0]


WGAN = """
import torch
from torch import nn

torch.manual_seed(0)
gen, critic = nn.Linear(4, 2), nn.Linear(2, 1)
opt_g = torch.optim.Adam(gen.parameters(), lr=1e-3)
opt_c = torch.optim.Adam(critic.parameters(), lr=1e-3)
for it in range(12):
    g_loss = -critic(gen(torch.randn(16, 4))).mean()  # the generator steps first: the clock
    opt_g.zero_grad()
    g_loss.backward()
    opt_g.step()
    for _ in range(5):  # five critic steps per generator step
        fake = gen(torch.randn(16, 4)).detach()
        c_loss = critic(fake).mean() - critic(torch.randn(16, 2)).mean()
        opt_c.zero_grad()
        c_loss.backward()
        opt_c.step()
"""


def test_another_optimiser_stepping_between_clock_steps_does_not_take_over(
    tmp_path: Path,
) -> None:
    script = tmp_path / "wgan.py"
    script.write_text(WGAN)
    _, report = run_doctor(["python", str(script)], every=10, stream=io.StringIO())
    assert report["steps"] == 12


TWO_RUNS_KEPT = """
import torch
from torch import nn

kept = []  # each run's optimiser stays alive after its run
for seed in (0, 1):
    torch.manual_seed(seed)
    model = nn.Linear(8, 2)
    kept.append(torch.optim.Adam(model.parameters(), lr=1e-3))
    for _ in range(30):
        x = torch.randn(16, 8)
        loss = nn.functional.cross_entropy(model(x), (x[:, 0] > 0).long())
        kept[-1].zero_grad()
        loss.backward()
        kept[-1].step()
"""


def test_a_second_runs_steps_all_count_whether_the_first_optimiser_is_gone_or_not(
    tmp_path: Path,
) -> None:
    """The first optimiser alive, the second takes over after 9 steps, which are counted
    then (they were missing); freed, it takes over at its first step."""
    script = tmp_path / "two_runs.py"
    script.write_text(TWO_RUNS_KEPT)
    _, report = run_doctor(["python", str(script)], every=10, stream=io.StringIO())
    assert report["steps"] == 30 + 30  # kept alive: 9 steps to take over, counted then
    assert report["series"]["step"] == list(range(1, 61))
    script.write_text(
        TWO_RUNS_KEPT.replace("kept.append(", "kept[:] = [").replace("lr=1e-3))", "lr=1e-3)]")
    )
    _, report = run_doctor(["python", str(script)], every=10, stream=io.StringIO())
    assert report["steps"] == 30 + 30  # freed: the second takes over at its first step, counted


def test_a_cross_entropy_is_read_as_a_mean_over_its_targets() -> None:
    """1 for a mean; a sum counts its targets (not ``ignore_index``); neither is not read."""
    from treeqa.health.losses import _summed_over

    tokens = torch.tensor([3, -100, 5, 7, -100])
    assert _summed_over((), {}) == 1
    assert _summed_over((None,), {"reduction": "mean", "label_smoothing": 0.1}) == 1
    assert _summed_over((tokens,), {"reduction": "sum"}) == 3
    assert _summed_over((tokens, None, None, 5, None, "sum"), {}) == 4  # by position
    assert _summed_over((torch.full((4,), -100),), {"reduction": "sum"}) is None
    assert _summed_over((torch.rand(6, 3).softmax(1),), {"reduction": "sum"}) == 6
    assert _summed_over((tokens,), {"reduction": "none"}) is None
    assert _summed_over((tokens,), {"size_average": False}) is None


def test_step_time_regression_is_judged_per_unit_of_work() -> None:
    """REINFORCE: each step is an episode, and episodes get longer as the policy learns, so
    steps take longer with the autograd nodes they make; a correct run, not a slowdown. A
    memory bank that grows makes each step slower at the same number of nodes."""
    n = 200
    nodes = [40.0 * (1 + 9 * i / n) for i in range(n)]  # episodes 1x -> 10x as long
    episodes = [0.002 + 1e-4 * k for k in nodes]  # a fixed part, then 0.1 ms a node
    assert timing.step_time_regression(episodes, episodes) is not None  # before: an error
    assert timing.step_time_regression(episodes, episodes, work=nodes) is None
    every_4th = [k if i % 4 == 0 else math.nan for i, k in enumerate(nodes)]
    assert timing.step_time_regression(episodes, episodes, work=every_4th) is None
    leak = [0.01 * (1 + i / 50) for i in range(n)]  # the same nodes a step, each slower
    found = timing.step_time_regression(leak, leak, work=[40.0] * n)
    assert found is not None and "work_growth" not in found.evidence
    both = [t * k / 40 for t, k in zip(leak, nodes, strict=True)]  # longer episodes and a leak
    found = timing.step_time_regression(both, both, work=nodes)
    assert found is not None and "work per step" in found.message
    assert found.evidence["work_growth"][3] > 3
    # Fewer nodes a step (a curriculum that shortens) excuses nothing.
    shrinking = list(reversed(nodes))
    assert timing.step_time_regression(leak, leak, work=shrinking) is not None


def test_a_profile_window_is_not_reopened_for_steps_that_do_more_work() -> None:
    early, slow = [0.01] * 40, [0.02] * 40  # steps 2x slower at the end
    for work, expected in (([50.0] * 80, True), ([50.0] * 40 + [100.0] * 40, False)):
        window = ProfileWindow()
        window.schedule_if_slower([*early, *slow], 81, None, None, work)
        assert window.active is expected, work


def test_profile_window_reads_its_events_as_key_averages_does() -> None:
    """Self time per operator from the profiler's raw events, one pass: the numbers torch's
    ``key_averages`` gives (which took 6.8 s for a 400-move episode's 107,000 events)."""
    from treeqa.health.profile import _op_times

    model = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 2))
    rnn = nn.GRU(4, 8)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for _ in range(5):
            loss = model(torch.randn(3, 4)).sum() + rnn(torch.randn(5, 2, 4))[0].sum()
            loss.backward()
    ours = _op_times(prof.profiler.kineto_results.events())
    theirs = {e.key: e.self_cpu_time_total for e in prof.key_averages()}
    assert ours.keys() == theirs.keys()
    assert all(ours[k] == pytest.approx(theirs[k], abs=0.01) for k in theirs)


class _EventWithoutEnd:
    """A profiler event as torch 2.4 gives it, without ``end_ns``."""

    def __init__(self, event: Any):
        self.event = event

    def __getattr__(self, name: str) -> Any:
        if name == "end_ns":
            raise AttributeError(name)
        return getattr(self.event, name)


def test_profile_window_reads_events_that_have_no_end_time() -> None:
    from treeqa.health.profile import _op_times

    model = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 2))
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        model(torch.randn(3, 4)).sum().backward()
    events = prof.profiler.kineto_results.events()
    times = _op_times([_EventWithoutEnd(e) for e in events])
    assert times == _op_times(events) and "aten::addmm" in times


def test_a_profile_window_leaves_the_scripts_own_profiler_session_alone() -> None:
    """Started and stopped inside the script's ``torch.profiler.profile()``, a window ended
    the script's session: its ``key_averages()`` came back empty. It is given up instead."""
    layer = nn.Linear(4, 4)
    window = ProfileWindow(steps=1)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        window.schedule(1)
        window.begin(1)
        layer(torch.randn(2, 4)).sum().backward()
        assert not window.active and window.close(1) is None
    assert {e.key: e.count for e in prof.key_averages()}.get("aten::addmm") == 1
    assert window.profiled == set()


def test_a_profile_window_records_no_range_another_thread_ends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A collective's range (``gloo:all_reduce``) begins on the step's thread and ends on the
    process group's worker thread once the future DDP waits on has completed: a window stopped
    in between, at the optimiser step, had torch write the range's end into freed heap (a DDP
    rank died with ``malloc(): unsorted double linked list corrupted``). The window's events
    hold the step's operators and the collective's launch, not that range."""
    import torch.distributed as dist

    from treeqa.health import profile

    names: list[str] = []
    op_times = profile._op_times

    def recorded(events: Any) -> dict[str, float]:
        names.extend(e.name() for e in events)
        return op_times(events)

    monkeypatch.setattr(profile, "_op_times", recorded)
    store = dist.FileStore(str(tmp_path / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        layer = nn.Linear(4, 4)
        window = ProfileWindow(steps=1)
        window.schedule(1)
        window.begin(1)
        layer(torch.randn(2, 4)).sum().backward()
        dist.all_reduce(layer.weight.grad, async_op=True).get_future().wait()
        window.end(1)
    finally:
        dist.destroy_process_group()
    assert "aten::addmm" in names and "c10d::allreduce_" in names
    assert "gloo:all_reduce" not in names
    assert not torch.autograd.profiler._is_profiler_enabled


def test_a_profile_window_leaves_the_environment_as_it_was(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Kineto's log level is set for its first start, not left in the script's os.environ
    (which its subprocesses inherit)."""
    monkeypatch.delenv("KINETO_LOG_LEVEL", raising=False)
    window = ProfileWindow(steps=1)
    window.schedule(1)
    window.begin(1)
    assert "KINETO_LOG_LEVEL" not in os.environ
    window.end(1)
    monkeypatch.setenv("KINETO_LOG_LEVEL", "3")  # a user's setting is kept
    window.schedule(2)
    window.begin(2)
    window.end(2)
    assert os.environ["KINETO_LOG_LEVEL"] == "3"


def test_a_profile_window_of_many_small_ops_ends_early_and_later_ones_keep_a_budget(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from treeqa.health import profile

    monkeypatch.setattr(profile, "MAX_EVENTS", 50)
    layer = nn.Linear(4, 4)
    window = ProfileWindow(steps=3)
    window.schedule(1)
    window.begin(1)
    for _ in range(20):  # ~100 events: more than a window's step may record here
        layer(torch.randn(1, 4)).sum().backward()
    window.end(1)
    assert not window.active and window.profiled == {1} and window.events > 50
    window.spent = 1e3  # the windows so far took more than 1% of the run's wall time
    window.schedule(10)
    assert not window.active and window.windows == 1


def _windows_reading(monkeypatch: pytest.MonkeyPatch, *readings: dict[str, float]) -> ProfileWindow:
    """A one-step window scheduled at step 1 whose windows read these operator times (us)."""
    from treeqa.health import profile

    times = iter(readings)
    monkeypatch.setattr(profile, "_op_times", lambda events: next(times))
    window = ProfileWindow(steps=1)
    window.schedule(1)
    return window


def _run_steps(window: ProfileWindow, first: int, last: int) -> list[Finding]:
    found = []
    for step in range(first, last + 1):
        if window.active:
            window.begin(step)
            found += [f for f in [window.end(step)] if f is not None]
    return found


COPIES = {"aten::copy_": 8e3, "aten::addmm": 1e3}  # 8 of 9 ms a step copying: a warning
MATMULS = {"aten::copy_": 1e3, "aten::addmm": 8e3}


def test_a_hot_op_warning_stands_when_a_second_window_reads_it_too(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Three steps of ~3 ms once read copies at 53% where six runs of the same script read
    18-27%: a window's warning is held until a window CONFIRM_AFTER steps on reads it again."""
    from treeqa.health.profile import CONFIRM_AFTER

    window = _windows_reading(monkeypatch, COPIES, COPIES)
    assert _run_steps(window, 1, CONFIRM_AFTER) == [] and window.active
    assert not window.recording  # the steps between windows are timed as the script's
    [found] = _run_steps(window, CONFIRM_AFTER + 1, CONFIRM_AFTER + 1)
    assert (found.code, found.severity, found.evidence["family"]) == ("hot-op", "warning", "copy")
    assert found.evidence["windows"] == [[1, 1], [21, 21]]
    assert window.profiled == {1, 21} and not window.active


def test_a_hot_op_warning_a_second_window_does_not_read_is_not_given(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    window = _windows_reading(monkeypatch, COPIES, MATMULS)
    [found] = _run_steps(window, 1, 30)
    assert (found.severity, found.evidence["family"]) == ("info", "matmul")
    window = _windows_reading(monkeypatch, COPIES, {"aten::index_select": 8e3, "aten::mm": 1e3})
    [found] = _run_steps(window, 1, 30)  # a warning of another family: neither read twice
    assert (found.severity, found.evidence["family"]) == ("info", "indexing")


def test_a_hot_op_warning_no_second_window_can_judge_is_given_as_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    window = _windows_reading(monkeypatch, COPIES)
    assert _run_steps(window, 1, 10) == []
    found = window.close(10)  # the run ended before the second window
    assert found is not None and (found.severity, found.evidence["steps"]) == ("warning", [1, 1])
    window = _windows_reading(monkeypatch, COPIES)
    window.begin(1)
    found = window.close(1)  # the run ended in the first window
    assert found is not None and found.severity == "warning" and not window.active


def test_profiler_memory_comes_off_the_heap_reading_that_holds_it() -> None:
    """A window's buffers, freed but kept by malloc, are the C heap's free bytes: they came
    off the bytes in use too, which then read negative (-160 MB on a REINFORCE run) and
    called the profiler's own memory malloc's."""
    readings = iter([(100.0, 40.0, 10.0), (180.0, 42.0, 85.0)])  # (RSS, in use, free) MB
    window = ProfileWindow(steps=1)
    window._memory = lambda: next(readings)  # type: ignore[method-assign]
    window.schedule(1)
    window.begin(1)
    window.end(1)
    assert window.memory_added == 80.0 and window.heap_added == (2.0, 75.0)


def test_the_monitors_own_work_is_not_counted_in_step_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A profiler window's start (in the step: begin_step) and its reading (after the step)
    are the monitor's time, not the script's: a slow one leaves the step times as they were."""
    slow = 0.2
    start, stop = ProfileWindow.begin, ProfileWindow._stop

    def slow_start(self: ProfileWindow, step: int) -> None:
        start(self, step)
        time.sleep(slow)

    def slow_stop(self: ProfileWindow, step: int) -> int:
        time.sleep(slow)
        return stop(self, step)

    monkeypatch.setattr(ProfileWindow, "begin", slow_start)
    monkeypatch.setattr(ProfileWindow, "_stop", slow_stop)
    script = tmp_path / "train.py"
    script.write_text(
        "import torch\n"
        "model = torch.nn.Linear(4, 2)\n"
        "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "for _ in range(60):\n"
        "    opt.zero_grad()\n"
        "    model(torch.randn(8, 4)).pow(2).mean().backward()\n"
        "    opt.step()\n"
    )
    _, report = run_doctor(["python", str(script)], stream=io.StringIO())
    series = report["series"]
    profiled = [i for i, s in enumerate(series["step"]) if 51 <= s <= 53]
    assert profiled and all(series["step_time"][i] < slow / 2 for i in profiled)
    assert all(series["data_time"][i + 1] < slow / 2 for i in profiled)


class Local(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(2, 2)


def test_watching_a_model_reads_no_source(monkeypatch: pytest.MonkeyPatch) -> None:
    """A script that makes a new optimiser every few steps (Reptile, MAML) has its models
    watched again each time: that must not parse their classes' files."""

    def parse(obj: object) -> None:
        raise AssertionError(f"parsed the source of {obj}")

    monkeypatch.setattr(checks.inspect, "getsourcelines", parse)
    monitor = HealthMonitor(stream=io.StringIO())
    monitor.watch(Local())
    assert __file__ in monitor.source_files
    assert not any("site-packages" in f for f in monitor.source_files)
    monitor.uninstall()


HOOKED = """
import sys
def hook(kind, error, tb):
    print("the script's hook:", kind.__name__, error, tb.tb_frame.f_code.co_filename, file=sys.stderr)
sys.excepthook = hook
raise RuntimeError("bad")
"""


def test_a_scripts_own_excepthook_prints_its_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "excepthook", sys.excepthook)  # (put back after the test)
    (tmp_path / "train.py").write_text(HOOKED)
    code, _ = run_doctor(["python", str(tmp_path / "train.py")], stream=io.StringIO())
    err = capsys.readouterr().err
    assert code == 1
    # the script's frames only, as python hands them to the hook
    assert f"the script's hook: RuntimeError bad {tmp_path / 'train.py'}" in err, err
    assert "Traceback" not in err


def test_torch_compiles_warning_about_the_monitors_global_hooks_is_not_given() -> None:
    """A compiled module warns on each call while global module hooks are in place: when they
    are the monitor's alone, the script (maybe run with -W error) does not hear of it."""
    monitor = HealthMonitor(stream=io.StringIO())
    monitor.install_loss_checks()  # wrappers in place: warnings.warn is the monitor's
    ours = torch.nn.modules.module.register_module_forward_hook(monitor._rms_hook)
    try:
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            warnings.warn(wrap.COMPILE_WITH_HOOKS + " ...", UserWarning, stacklevel=1)
            assert said == []
            theirs = torch.nn.modules.module.register_module_forward_hook(lambda *a: None)
            warnings.warn(wrap.COMPILE_WITH_HOOKS + " ...", UserWarning, stacklevel=1)
            theirs.remove()
            assert len(said) == 1
    finally:
        ours.remove()
        monitor.uninstall()


THREADED = """
import threading, torch
from torch import nn
def train():
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 2))
    opt = torch.optim.Adam(model.parameters(), 1e-3)
    for _ in range(120):
        x = torch.randn(32, 16)
        loss = nn.functional.cross_entropy(model(x), (x[:, 0] > 0).long())
        opt.zero_grad(); loss.backward(); opt.step()
thread = threading.Thread(target=train)
thread.start(); thread.join()
print("trained")
"""


def test_training_in_a_thread_opens_no_profiler_window(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """torch's profiler started off the main thread prints an error of its own to stderr."""
    (tmp_path / "train.py").write_text(THREADED)
    code, report = run_doctor(["python", str(tmp_path / "train.py")], every=10)
    out, err = capfd.readouterr()
    assert code == 0 and "trained" in out and report["steps"] == 120
    assert "External init callback" not in err, err


def test_doctor_runs_a_folders_main_as_python_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "folder_main_helper.py").write_text("X = 7\n")
    (tmp_path / "app" / "__main__.py").write_text(
        "import sys, folder_main_helper as h\nprint(__file__, sys.argv[0], h.X)\n"
    )
    code, _ = run_doctor(["python", "app"], stream=io.StringIO())
    assert code == 0
    assert capsys.readouterr().out.strip() == f"{tmp_path / 'app' / '__main__.py'} app 7"


def test_a_loss_at_chance_all_run_is_said_and_one_that_falls_is_not() -> None:
    steps = array("d", range(1, 301))
    ln3 = math.log(3)
    samples = [(s, 3, 1.0) for s in range(1, 301, 10)]
    wander = array("d", (ln3 * (1 + 0.02 * math.sin(s)) for s in range(1, 301)))
    found = loss_levels.loss_at_chance(samples, steps, wander)
    assert found is not None and found.code == "loss-at-chance" and found.evidence["classes"] == 3
    falling = array("d", (ln3 * (1 - s / 600) for s in range(1, 301)))  # learns, slowly
    assert loss_levels.loss_at_chance(samples, steps, falling) is None
    assert loss_levels.loss_at_chance(samples, steps[:150], wander[:150]) is None  # too short
    other = [(s, 3, 1.0) for s in range(1, 120, 10)]  # none in the second half is the step's loss
    assert loss_levels.loss_at_chance(other, steps, wander) is None
    dipped = array("d", wander)
    dipped[10] = 0.5  # once far below chance: it can learn
    assert loss_levels.loss_at_chance(samples, steps, dipped) is None
    # Only the sampled steps at chance: one batch read on each (a fixed order, 10 an epoch)
    aliased = array("d", (ln3 if s % 10 == 1 else 0.2 for s in range(1, 301)))
    assert loss_levels.loss_at_chance(samples, steps, aliased) is None
    # Above log(C) all the second half, never below the floor: worse than uniform, thrashed
    # by a learning rate far too high (BERT at 0.3 read 1.16 log(4)); diverged from 4x.
    for over, found in ((1.16, True), (1.9, True), (2.2, False)):
        above = array("d", (w * over for w in wander))
        result = loss_levels.loss_at_chance(samples, steps, above)
        assert (result is not None) == found, over
        assert result is None or "at or above chance" in result.message


def test_a_loss_at_chance_over_imbalanced_classes_is_judged_at_each_batchs_level() -> None:
    """A model that learnt only how often each class comes sits at each batch's loss under
    those frequencies, below log(C); up to 10% above it is still chance, 3% below is not."""
    steps = array("d", range(1, 301))
    samples = [(s, 3, 1.0) for s in range(1, 301, 10)]
    levels = {s: 0.6 + 0.1 * math.sin(s) for s, _, _ in samples}  # each batch's mix
    for over, found in ((1.0, True), (1.06, True), (1.12, False), (0.95, False)):
        losses = array("d", (levels.get(s, 0.6) * over for s in range(1, 301)))
        result = loss_levels.loss_at_chance(samples, steps, losses, levels)
        assert (result is not None) == found, over
    result = loss_levels.loss_at_chance(
        samples, steps, array("d", (levels.get(s, 0.6) for s in steps)), levels
    )
    assert result is not None and result.evidence["imbalanced"]
    assert "as often as the labels do" in result.message
    # Falling onto it from above all through the second half: the model still learns.
    falling = array("d", (levels.get(s, 0.6) * (1.2 - 0.2 * s / 300) for s in steps))
    assert loss_levels.loss_at_chance(samples, steps, falling, levels) is None
    # Without the levels the same losses are far below log(3): no finding.
    assert loss_levels.loss_at_chance(samples, steps, array("d", (0.6 for _ in steps))) is None


def test_a_steps_work_is_the_measure_that_grew_most() -> None:
    """Autograd nodes a step (a longer episode) and elements given to the model (a batch-size
    warm-up), each relative to its early steps; the larger of the two, NaN where neither."""
    nodes = [100.0] * 50 + [200.0] * 50
    elements = [32.0] * 25 + [256.0] * 75
    work = timing.most_growth(nodes, elements)
    assert work[10] == 1.0 and work[30] == 8.0 and work[60] == 8.0
    assert timing.most_growth(nodes, [math.nan] * 100)[60] == 2.0
    assert math.isnan(timing.most_growth([math.nan] * 4, [math.nan] * 4)[0])
    # Nodes read every 4th step only: each holds until the next reading, not the elements'
    # flat 1.0 on three steps in four (a model grown block by block: 14 -> 35 nodes a step).
    grown = [(14.0 + 7 * (s // 100)) if s % 4 == 0 else math.nan for s in range(400)]
    work = timing.most_growth(grown, [1536.0] * 400)
    assert work[301] == work[303] == 35 / 14
    assert timing.work_growth(work, 20)[3] >= 2.0


def test_label_counts_give_the_chance_level_of_imbalanced_classes_only() -> None:
    from treeqa.health.priors import LabelCounts

    labels = LabelCounts()
    mix = torch.tensor([0] * 80 + [1] * 15 + [2] * 5)
    for _ in range(300):  # 30,000 targets: the entropy known to ~1%
        labels.add(mix, 3, -100, 0.0)
    p = torch.tensor([0.8, 0.15, 0.05], dtype=torch.float64)
    entropy = float(-(p * p.log()).sum())
    assert labels.chance(3) == pytest.approx(entropy, abs=1e-3)
    batch = labels.batch(torch.tensor([0, 0, 2, 2, -100]), 3, -100)  # ignored: not counted
    assert batch is not None and batch.tolist() == [2, 0, 2, 1]
    assert labels.chance(3, batch) == pytest.approx(float(-(p[[0, 0, 2, 2]].log()).mean()))
    few = LabelCounts()
    few.add(mix, 3, -100, 0.0)  # 100 labels of this mix: known to ~8%, log(3) stands
    assert few.chance(3) is None
    balanced = LabelCounts()
    for _ in range(300):
        balanced.add(torch.arange(99) % 3, 3, -100, 0.0)
    assert balanced.chance(3) is None
    probabilities = LabelCounts()
    probabilities.add(torch.rand(8, 3).softmax(1), 3, -100, 0.0)
    assert probabilities.chance(3) is None


def test_target_moments_give_each_batchs_error_of_predicting_the_targets_mean() -> None:
    """Each output's mean, over the counted rows; a batch's level is its mean squared error
    against those means (not its own: a batch's own mean would put it below what a model that
    learnt only the mean reads). Targets held at one value have no level."""
    from treeqa.health.priors import TargetMoments

    torch.manual_seed(0)
    moments = TargetMoments()
    scale = torch.tensor([1.0, 10.0])  # two outputs, one ten times the other's spread
    for _ in range(100):
        moments.add(torch.randn(64, 2) * scale + torch.tensor([5.0, -3.0]))
    y = torch.randn(64, 2) * scale + torch.tensor([5.0, -3.0])
    batch = moments.batch(y)
    assert batch is not None and batch[0] == (2,) and batch[1] == 64
    level = moments.levels({7: batch})[7]
    expected = float(((y - torch.tensor([5.0, -3.0])) ** 2).mean())
    assert level == pytest.approx(expected, rel=0.02)  # the means known to ~0.2% of a spread
    # A least-squares GAN's targets, all ones: no spread about their own mean, no level.
    gan = TargetMoments()
    for _ in range(10):
        gan.add(torch.ones(32, 1))
        gan.add(torch.zeros(32, 1))
    ones = gan.batch(torch.ones(32, 1))
    assert ones is not None and gan.levels({3: ones}) == {}
    # Wide targets (an image) are one position; a scalar or a one-row target is none.
    image = torch.rand(4, 3, 32, 32)
    moments.add(image)
    wide = moments.batch(image)
    assert wide is not None and wide[0] == (-1,) and wide[1] == image.numel()
    assert moments.batch(torch.tensor(1.0)) is None and moments.batch(torch.ones(1, 3)) is None
    assert moments.batch(torch.arange(8)) is None  # integer targets: not a regression's


def test_a_mean_squared_error_at_the_targets_variance_all_run_is_loss_at_chance() -> None:
    """Targets shuffled from their inputs: the MSE sits at each batch's error of predicting the
    targets' mean. Up to 10% over it still, and 5% under (a network memorises a little of rows
    paired wrongly the same way every epoch); further under, or falling onto it, not."""
    steps = array("d", range(1, 301))
    samples = [(s, "mse_loss", 1.0) for s in range(1, 301, 10)]
    levels = {s: 2.0 + 0.5 * math.sin(s) for s, _, _ in samples}  # each batch's variance
    for over, found in ((1.0, True), (1.08, True), (0.96, True), (1.15, False), (0.93, False)):
        losses = array("d", (levels.get(s, 2.0) * over for s in range(1, 301)))
        result = loss_levels.loss_at_mean(samples, steps, losses, levels)
        assert (result is not None) == found, over
        assert result is None or result.code == "loss-at-chance"
    at = array("d", (levels.get(s, 2.0) for s in steps))
    found = loss_levels.loss_at_mean(samples, steps, at, levels)
    assert found is not None and "predicting the targets' mean" in found.message
    assert found.evidence["function"] == "mse_loss" and found.evidence["ratio"] == 1.0
    falling = array("d", (levels.get(s, 2.0) * (1.3 - 0.3 * s / 300) for s in steps))
    assert loss_levels.loss_at_mean(samples, steps, falling, levels) is None
    assert loss_levels.loss_at_mean(samples, steps, at, {}) is None  # no level known
    l1 = [(s, "l1_loss", 1.0) for s, _, _ in samples]  # no level for an L1 loss here
    assert loss_levels.loss_at_mean(l1, steps, at, levels) is None


def test_a_loss_divided_by_the_accumulation_steps_is_judged_as_the_cross_entropy() -> None:
    """Accumulated over 4 micro-batches, every step's loss read in the series is a quarter of
    the cross-entropy: at chance, or diverged, the cross-entropy is what is judged, with the
    steps between the sampled ones read as a quarter too."""
    steps = array("d", range(1, 301))
    ln3 = math.log(3)
    samples = [(s, 3, 0.25) for s in range(1, 301, 10)]
    quarter = array("d", (ln3 / 4 * (1 + 0.02 * math.sin(s)) for s in range(1, 301)))
    found = loss_levels.loss_at_chance(samples, steps, quarter)
    assert found is not None and found.evidence["max"] == pytest.approx(ln3 * 1.02, abs=1e-3)
    # Read unscaled, a quarter of log(C) is a model that learnt.
    unscaled = [(s, 3, 1.0) for s, _, _ in samples]
    assert loss_levels.loss_at_chance(unscaled, steps, quarter) is None
    # The sampled steps' batch alone at chance: every other step's cross-entropy is low.
    aliased = array("d", (ln3 / 4 if s % 10 == 1 else 0.05 for s in range(1, 301)))
    assert loss_levels.loss_at_chance(samples, steps, aliased) is None
    ln5 = math.log(5)
    samples = [(s, 5, 0.25) for s in (1, 2, 3, 50, 100, 150, 200)]
    climbing = array("d", (ln5 / 4 * (1 + s / 10) for s in range(1, 201)))
    found = loss_levels.loss_diverged(samples, steps[:200], climbing)
    assert found is not None and found.evidence["early_min"] == pytest.approx(ln5 * 1.1, 1e-3)


def test_a_generator_given_to_backward_reaches_torch_whole(tmp_path: Path) -> None:
    # The doctor read its first tensor to see the loss, and torch got the rest only.
    script = tmp_path / "generator.py"
    script.write_text(
        "import torch\n"
        "w = torch.ones(3, requires_grad=True)\n"
        "v = torch.ones(2, requires_grad=True)\n"
        "torch.autograd.backward(t.sum() for t in (w * 2, v * 3))\n"
        "print(w.grad.tolist(), v.grad.tolist())\n"
    )
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        run_doctor(["python", str(script)], stream=io.StringIO())
    assert out.getvalue() == "[2.0, 2.0, 2.0] [3.0, 3.0]\n"


def test_a_loss_that_climbs_far_above_chance_has_diverged() -> None:
    """Adam at lr=1.0: from log(C) to tens of times it, finite. A model that starts far above
    log(C) (loss-at-init's), one that stays near it, one above it only early, a loss with an
    infinite reading (non-finite's) and a run with one late reading are not this."""
    steps = array("d", range(1, 201))
    ln5 = math.log(5)
    samples = [(s, 5, 1.0) for s in (1, 2, 3, 50, 100, 150, 200)]
    climbing = array("d", (ln5 * (1 + s / 10) for s in range(1, 201)))
    found = loss_levels.loss_diverged(samples, steps, climbing)
    assert found is not None and found.code == "loss-diverged" and found.evidence["classes"] == 5
    started_high = array("d", [ln5 * 20] * 200)
    assert loss_levels.loss_diverged(samples, steps, started_high) is None
    assert loss_levels.loss_diverged(samples, steps, array("d", [ln5] * 200)) is None
    spike = array("d", (ln5 * (8 if 40 < s < 90 else 0.5) for s in range(1, 201)))
    assert loss_levels.loss_diverged(samples, steps, spike) is None
    infinite = array("d", climbing)
    infinite[-1] = math.inf
    assert loss_levels.loss_diverged(samples, steps, infinite) is None
    one_late = [(s, 5, 1.0) for s in (1, 2, 3, 50, 100, 200)]
    assert loss_levels.loss_diverged(one_late, steps, climbing) is None
    # The sampled steps' batch is one the model gets wrong (a loader in a fixed order, 50
    # batches an epoch, its last from another source); every other step's loss is low.
    aliased = array("d", climbing)
    for i in range(len(aliased)):
        if (i + 1) not in (1, 2, 3) and (i + 1) % 50:
            aliased[i] = 0.1
    assert loss_levels.loss_diverged(samples, steps, aliased) is None
    # Diverged models thrash: a late batch it happens to get right reads 0 (Adam at lr=10).
    thrashing = array("d", climbing)
    thrashing[199] = 0.0
    assert loss_levels.loss_diverged(samples, steps, thrashing) is not None


def test_a_diverged_loss_under_maximize_names_the_optimiser_not_the_lr() -> None:
    steps = array("d", range(1, 201))
    ln5 = math.log(5)
    samples = [(s, 5, 1.0) for s in (1, 2, 3, 50, 100, 150, 200)]
    climbing = array("d", (ln5 * (1 + s / 10) for s in range(1, 201)))
    found = loss_levels.loss_diverged(samples, steps, climbing, maximize="SGD")
    assert found is not None and found.evidence["maximize"] == "SGD"
    assert "(SGD has maximize=True set, so each step climbs the loss it is given)" in found.message
    assert found.fix == loss_levels.MAXIMIZE_FIX
    plain = loss_levels.loss_diverged(samples, steps, climbing)
    assert plain is not None and "maximize" not in plain.evidence
    assert "a learning rate far too high?" in plain.message


def test_targets_whose_own_entropy_is_near_log_c_are_not_judged_at_chance() -> None:
    """Soft targets near uniform (a teacher at a high temperature) or heavy label smoothing: a
    loss near log(C) is the targets' level. Hard targets, light smoothing and confident soft
    targets are judged."""
    from treeqa.health.losses import _floor_near_chance

    labels = torch.arange(8) % 4
    near_uniform = torch.softmax(torch.randn(8, 4) * 0.1, dim=1)
    confident = torch.softmax(torch.randn(8, 4) * 10, dim=1)
    assert _floor_near_chance((near_uniform,), {}, 4)
    assert not _floor_near_chance((confident,), {}, 4)
    assert not _floor_near_chance((labels,), {}, 4)
    assert not _floor_near_chance((labels,), {"label_smoothing": 0.1}, 4)
    assert _floor_near_chance((labels,), {"label_smoothing": 0.9}, 4)
    assert _floor_near_chance((confident,), {"label_smoothing": 1.0}, 4)


def test_state_that_grows_to_a_fixed_size_is_information_not_a_leak() -> None:
    """A cross-batch memory bank fills up in the first two thirds of the run, each step slower as
    it grows, then stays full: flat to the end. A leak grows to the end, and stays a finding."""
    n = 300
    bank = [0.001 + 0.01 * min(i, 200) / 200 for i in range(n)]  # 1 ms -> 11 ms, full at 200
    found = timing.step_time_regression(bank, bank)
    assert found is not None and found.severity == "info" and found.evidence["stopped"]
    assert "then stopped getting slower" in found.message
    leak = [0.001 + 0.01 * i / n for i in range(n)]
    found = timing.step_time_regression(leak, leak)
    assert found is not None and found.severity == "error" and not found.evidence["stopped"]
    # A replay buffer of cloned batches, full at step 100 of 300: RSS rises, then stays.
    buffer = [400.0 + 70.0 * min(i, 100) / 100 for i in range(n)]
    assert timing.stopped(buffer, timing.warmup_of(n))
    # A copy of the weights kept each epoch, three epochs: flat between its jumps, not stopped.
    epochs = [462.0] * 100 + [503.0] * 100 + [535.0] * 100
    assert not timing.stopped(epochs, timing.warmup_of(n))
    assert not timing.stopped([400.0 + 70.0 * i / n for i in range(n)], timing.warmup_of(n))
    found = timing.memory_growth([400.0 + 70.0 * i / n for i in range(n)], "host RSS", 32.0)
    assert found is not None and found.severity == "warning"


def test_a_growth_said_early_that_stopped_since_becomes_information() -> None:
    """Memory judged at step 150 while the buffer still filled, then at the end, flat: the
    warning made on the way is lowered, not left standing beside a finding that says it stopped."""
    monitor = HealthMonitor(stream=io.StringIO())
    rising = [400.0 + 0.5 * i for i in range(150)]
    monitor.series["rss_mb"] = rising
    monitor.series["step_time"] = [0.01] * 150
    monitor.series["data_time"] = [0.0] * 150
    monitor._series_checks(150)
    [(key, found)] = [(k, f) for k, f in monitor.findings.items() if k[0] == "memory-growth"]
    assert found.severity == "warning"
    whole = rising + [475.0] * 250
    monitor.series["rss_mb"] = whole
    monitor.series["step_time"] = [0.01] * len(whole)
    monitor.series["data_time"] = [0.0] * len(whole)
    monitor._series_checks(len(whole))
    assert monitor.findings[key].severity == "info"
    assert "host RSS after each step rose +" in monitor.findings[key].message


def test_activation_growth_takes_no_weightless_layer_for_a_block() -> None:
    """A CNN's three ReLUs (after convolutions of three shapes) and a 2-64-64-64 MLP's SiLUs
    were the most common kind of their ``nn.Sequential``, and their outputs, grown 16-35x as
    the models learned, were named; a ReLU follows the layer before it and is no block."""
    features = nn.Sequential(
        nn.Conv2d(1, 16, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(16, 32, 3), nn.ReLU(),
        nn.MaxPool2d(2), nn.Conv2d(32, 32, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
    )  # fmt: skip
    kinds = {f"features.{i}": checks.module_kind(m) for i, m in enumerate(features)}
    rms = {f"features.{i}": 0.23 * 5.9 ** (i // 3) for i in range(9)}  # c_classify_count_bins
    assert checks.activation_growth(rms, kinds) is None
    mlp = nn.Sequential(
        nn.Linear(2, 64), nn.SiLU(), nn.Linear(64, 64), nn.SiLU(), nn.Linear(64, 64), nn.SiLU()
    )
    kinds = {f"encoder.{i}": checks.module_kind(m) for i, m in enumerate(mlp)}
    rms = {f"encoder.{i}": 0.44 * 4.1 ** (i // 2) for i in range(6)}
    assert checks.activation_growth(rms, kinds) is None
    # Four like convolutions, each with its ReLU, are still a stack, and their growth found.
    convs = nn.Sequential(*(m for _ in range(4) for m in (nn.Conv2d(8, 8, 3), nn.ReLU())))
    kinds = {f"c.{i}": checks.module_kind(m) for i, m in enumerate(convs)}
    found = checks.activation_growth({f"c.{i}": 10.0 ** (i // 2) for i in range(8)}, kinds)
    assert found is not None and found.evidence["rms"] == [1.0, 10.0, 100.0, 1000.0]
