"""The training-health monitor: cheap checks every step, hooks and scans on sampled steps.

Every step costs a few timer reads, one ``float(loss)`` (the only host sync), a read of the
process memory and list appends. Heavier checks run on sampled steps (the first three and
every ``every``-th): module-output RMS, probabilities fed to cross-entropy, gradient finiteness.
gc walks for retained graphs run on a doubling schedule within a time budget, profiler windows
once early and again when steps get slower. ``fit()`` drives it as a ``Callback``;
``treeqa doctor`` and the Lightning adapter drive the same ``begin_step``/``end_step`` API.
"""

from __future__ import annotations

import bisect
import functools
import math
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

import torch
from torch import nn
from torch.nn import functional as F

from treeqa.health import checks, graphs, report
from treeqa.health.checks import Finding
from treeqa.models.common import Output
from treeqa.train.loop import Callback, TrainState

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


class HealthError(RuntimeError):
    """Raised (doctor) or turned into ``state.stop`` (fit) by an error finding in strict mode."""


def rss_mb() -> float:
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * _PAGE / 2**20
    except OSError:
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class HealthMonitor(Callback):
    """Watches a training run and reports ``Finding``s (see ``treeqa.health.checks.CODES``).

    ``mode`` is "on" or "strict" (an error finding stops the run). ``every``: steps between
    sampled steps. ``scan_budget``: share of wall time the gc walks may take.
    """

    def __init__(
        self,
        mode: str = "on",
        every: int = 50,
        json_path: str | Path | None = None,
        plot_path: str | Path | None = None,
        scan_budget: float = 0.005,
        stream: TextIO | None = None,
    ):
        if mode not in ("on", "strict"):
            raise ValueError(f"health mode {mode!r}: expected on | strict")
        self.mode, self.every, self.scan_budget = mode, max(1, every), scan_budget
        self.json_path, self.plot_path = json_path, plot_path
        self.stream = stream or sys.stderr
        self.findings: dict[tuple[str, str], Finding] = {}
        self.series: dict[str, list[float]] = {
            k: [] for k in ("step", "step_time", "data_time", "loss", "rss_mb", "cuda_mb")
        }
        self.models: list[nn.Module] = []
        self.params: list[tuple[str, nn.Parameter]] = []
        self.names: dict[int, str] = {}
        self.source_files: list[str] = []
        self.step = 0
        self.stop_requested = False
        self.paused = False
        self.sampling = False
        self._seq: list[int] = []  # sequence number of each step's loss (graphs-from-step map)
        self._seq_step: list[int] = []
        self._hooks: list[Any] = []
        self._rms: dict[str, torch.Tensor] = {}
        self._unused: set[str] | None = None
        self._nan_steps_left = 0
        self._nan_origin: str | None = None
        self._nan_evidence: dict[str, Any] = {}
        self._retain_steps = 0
        self._retain_site = ""
        self._backward_retained: bool | None = None
        self._last_scan_end, self._last_scan_cost, self._scans_with_graphs = 0.0, 0.0, 0
        self._profiler: Any = None
        self._profile_start = self._profile_end = 0
        self._profiles = 0
        self._profiled: set[int] = set()
        self._ce_seen = False
        self._restore: list[Callable[[], None]] = []
        self.started = time.time()

    # ------------------------------------------------------------------ API for any loop

    def watch(self, *models: nn.Module) -> None:
        """Check these models (parameter aliases now; unused parameters and activations later)."""
        for model in models:
            if any(model is m for m in self.models):
                continue
            self.models.append(model)
            for finding in checks.parameter_aliases(model):
                self.add(finding)
            for cls in {type(m) for m in model.modules()}:
                site = checks.definition_site(cls).rpartition(":")[0]
                if site and site not in self.source_files and "site-packages" not in site:
                    self.source_files.append(site)
        self.names = checks.module_names(self.models)
        seen: set[int] = set()
        self.params = []
        for i, model in enumerate(self.models):
            for name, p in model.named_parameters():
                if id(p) not in seen and p.requires_grad:
                    seen.add(id(p))
                    self.params.append(((f"model{i}." if i else "") + name, p))

    def install_loss_checks(self) -> None:
        """Wrap ``F.cross_entropy``/``F.nll_loss`` (nn losses call them) to look at their input."""
        for fname in ("cross_entropy", "nll_loss"):
            original = getattr(F, fname)
            if getattr(original, "_treeqa_health", False):
                continue
            wrapper = self._loss_wrapper(fname, original)
            setattr(F, fname, wrapper)
            self._restore.append(functools.partial(setattr, F, fname, original))

    def uninstall(self) -> None:
        self._remove_hooks()
        while self._restore:
            self._restore.pop()()

    def begin_step(self) -> None:
        """Call when the step's compute starts (after its batch is ready)."""
        s = self.step + 1
        self.sampling = s <= 3 or s % self.every == 0
        if self.sampling:
            self._rms = {}
            self._hooks.append(torch.nn.modules.module.register_module_forward_hook(self._rms_hook))
        if self._nan_steps_left > 0:
            self._hooks.append(torch.nn.modules.module.register_module_forward_hook(self._nan_hook))
        if self._profiler is None and self._profile_end == 0 and s == self.every + 1:
            self._start_profile(s)

    def note_backward(self, retain_graph: bool) -> None:
        self._backward_retained = retain_graph
        if retain_graph and not self._retain_site:
            self._retain_site = checks.user_site(2)

    def end_step(
        self, loss: torch.Tensor | float | None, step_time: float, data_time: float = 0.0
    ) -> None:
        """Call after the optimiser step with the step's loss and its timings (seconds)."""
        self.step += 1
        s = self.step
        value = math.nan
        if isinstance(loss, torch.Tensor):
            seq = graphs.sequence_nr(loss)
            if seq is not None:
                self._seq.append(seq)
                self._seq_step.append(s)
            value = float(loss.detach().float().mean())
        elif loss is not None:
            value = float(loss)
        cuda = torch.cuda.memory_allocated() / 2**20 if torch.cuda.is_initialized() else 0.0
        for key, v in zip(
            self.series, (s, step_time, data_time, value, self._rss(s), cuda), strict=True
        ):
            self.series[key].append(float(v))
        self._remove_hooks()
        if self.sampling:
            self._sampled_checks(s)
            self.sampling = False
        self._check_retain(s)
        self._check_non_finite(s, value)
        if self._profiler is not None and s >= self._profile_end:
            self._finish_profile()
        if s in (8, 32) or s % (4 * self.every) == 0:
            self._maybe_scan(s, loss if isinstance(loss, torch.Tensor) else None)
        if s % self.every == 0:
            self._series_checks(s)

    def add(self, finding: Finding) -> None:
        finding.step = finding.step or self.step
        # Run-wide findings (timings, memory, profiles) are one finding each, updated as they grow.
        run_wide = finding.code in (
            "step-time-regression",
            "memory-growth",
            "input-bound",
            "hot-op",
            "loss-at-init",
        )
        detail = (
            str(finding.evidence.get("family", finding.evidence.get("kind", "")))
            if run_wide
            else finding.where
        )
        key = (
            finding.code,
            detail if run_wide else (finding.where or finding.message.split(":")[0]),
        )
        old = self.findings.get(key)
        if old is None:
            self.findings[key] = finding
            print(report.one_line(finding), file=self.stream, flush=True)
        else:
            old.evidence, old.message = finding.evidence, finding.message
            if checks.SEVERITIES.index(finding.severity) > checks.SEVERITIES.index(old.severity):
                old.severity = finding.severity
                print(report.one_line(old), file=self.stream, flush=True)
        if self.mode == "strict" and self.findings[key].severity == "error":
            self.stop_requested = True

    def finish(self) -> dict[str, Any]:
        """Final analyses; write JSON/plot if asked; print the summary. Returns the report."""
        self._remove_hooks()
        if self._profiler is not None:
            self._finish_profile()
        if self._nan_steps_left > 0 or self._nan_evidence:
            self._emit_non_finite()
        self._series_checks(self.step)
        result = report.build(self)
        report.print_summary(result, self.stream)
        if self.json_path:
            report.write_json(result, self.json_path)
        if self.plot_path:
            report.write_plot(result, self.plot_path)
        return result

    # ------------------------------------------------------------------ fit() callback

    def on_fit_start(
        self, state: TrainState, model: nn.Module, optimizer: torch.optim.Optimizer
    ) -> None:
        self.step = state.step
        self.watch(model)
        self.install_loss_checks()

    def on_batch_start(self, state: TrainState, batch: Any) -> None:
        self.begin_step()

    def on_step_end(self, state: TrainState, output: Output, batch: Any) -> None:
        self.end_step(output.loss, state.step_time, state.data_time)
        if self.stop_requested and not state.stop:
            errors = [f for f in self.findings.values() if f.severity == "error"]
            print(
                f"treeqa health (strict): stopping at step {self.step}: {errors[0].code}: {errors[0].message}",
                file=self.stream,
            )
            state.stop = True

    def on_eval_start(self, state: TrainState, model: nn.Module) -> None:
        self.paused = True

    def on_eval_end(self, state: TrainState, model: nn.Module) -> None:
        self.paused = False

    def on_fit_end(self, state: TrainState) -> None:
        self.uninstall()
        self.finish()

    # ------------------------------------------------------------------ sampled checks

    def _rms_hook(self, module: nn.Module, inputs: Any, output: Any) -> None:
        name = self.names.get(id(module))
        if (
            name is not None
            and name not in self._rms
            and isinstance(output, torch.Tensor)
            and output.is_floating_point()
        ):
            self._rms[name] = output.detach().float().pow(2).mean().sqrt()

    def _sampled_checks(self, s: int) -> None:
        if self._rms:
            names = list(self._rms)
            values = torch.stack(
                [v.to(self._rms[names[0]].device) for v in self._rms.values()]
            ).tolist()
            found = checks.activation_growth(dict(zip(names, values, strict=True)))
            if found is not None:
                mod = next(
                    (m for m in self._modules() if self.names.get(id(m)) == found.where + ".0"),
                    None,
                )
                found.where = (
                    f"{found.where} ({checks.definition_site(mod)})"
                    if mod is not None
                    else found.where
                )
                self.add(found)
        if s <= 3 and self.params:
            unused = {n for n, p in self.params if p.grad is None}
            self._unused = unused if self._unused is None else self._unused & unused
            if s == 3 and self._unused and len(self._unused) < len(self.params):
                names = sorted(self._unused)
                count = sum(p.numel() for n, p in self.params if n in self._unused)
                self.add(
                    Finding(
                        "unused-parameter",
                        "warning",
                        f"{len(names)} parameter tensors ({count} values) never received a gradient: {', '.join(names[:5])}",
                        where=names[0],
                        evidence={"parameters": names[:20], "values": count},
                    )
                )
        bad = checks.non_finite_grads(self.params) if self.params else []
        if bad and not self._nan_evidence:
            self._nan_evidence = {"step": s, "gradients": bad[:10]}
            self._nan_steps_left = max(self._nan_steps_left, 1)

    def _loss_wrapper(
        self, fname: str, original: Callable[..., torch.Tensor]
    ) -> Callable[..., torch.Tensor]:
        def wrapper(input: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
            result = original(input, *args, **kwargs)
            if self.sampling and not self.paused and isinstance(input, torch.Tensor):
                self._inspect_loss(fname, input, result)
            return result

        wrapper._treeqa_health = True  # type: ignore[attr-defined]
        wrapper.__wrapped__ = original  # type: ignore[attr-defined]
        return wrapper

    def _inspect_loss(self, fname: str, input: torch.Tensor, result: torch.Tensor) -> None:
        if checks.looks_like_probabilities(input):
            where = checks.user_site(3)
            classes = input.shape[1 if input.dim() >= 2 else 0]
            self.add(
                Finding(
                    "probabilities-into-cross-entropy",
                    "error",
                    f"{fname} received probabilities (non-negative rows summing to 1 over {classes} classes), not {'logits' if fname == 'cross_entropy' else 'log-probabilities'}",
                    where=where,
                    evidence={
                        "function": fname,
                        "classes": int(classes),
                        "min": round(float(input.min()), 6),
                    },
                )
            )
        if (
            fname == "cross_entropy"
            and not self._ce_seen
            and self.step == 0
            and result.numel() == 1
        ):
            self._ce_seen = True
            found = checks.loss_at_init(
                float(result.detach()), int(input.shape[1 if input.dim() >= 2 else 0])
            )
            if found is not None:
                found.where = checks.user_site(3)
                self.add(found)

    # ------------------------------------------------------------------ non-finite values

    def _check_non_finite(self, s: int, value: float) -> None:
        if not math.isfinite(value) and not self._nan_evidence:
            self._nan_evidence = {"step": s, "loss": str(value)}
            self._nan_steps_left = 3
        elif self._nan_steps_left > 0 and (self._nan_evidence.get("step") != s or self._nan_origin):
            self._nan_steps_left -= 1
            if self._nan_origin or self._nan_steps_left == 0:
                self._emit_non_finite()

    def _nan_hook(self, module: nn.Module, inputs: Any, output: Any) -> None:
        if (
            self._nan_origin is not None
            or not isinstance(output, torch.Tensor)
            or not output.is_floating_point()
        ):
            return
        if bool(torch.isfinite(output).all()):
            return
        ins = [x for x in inputs if isinstance(x, torch.Tensor) and x.is_floating_point()]
        bad_params = [
            n
            for n, p in module.named_parameters(recurse=False)
            if not bool(torch.isfinite(p).all())
        ]
        if all(bool(torch.isfinite(x).all()) for x in ins) or bad_params:
            name = self.names.get(id(module), type(module).__name__)
            self._nan_origin = f"{name} ({type(module).__name__}, {checks.definition_site(module)})"
            self._nan_evidence["module"] = name
            if bad_params:
                self._nan_evidence["non_finite_parameters"] = bad_params

    def _emit_non_finite(self) -> None:
        ev, origin = self._nan_evidence, self._nan_origin
        what = "gradients" if "gradients" in ev else "the loss"
        msg = f"non-finite values in {what} from step {ev.get('step')}"
        msg += (
            f"; first produced by module {origin}"
            if origin
            else "; no module output was non-finite (look at the loss code)"
        )
        self.add(
            Finding(
                "non-finite",
                "error",
                msg,
                where=origin or ", ".join(ev.get("gradients", [])[:3]),
                evidence=dict(ev),
            )
        )
        self._nan_steps_left = 0

    # ------------------------------------------------------------------ retained graphs

    def _check_retain(self, s: int) -> None:
        retained, self._backward_retained = self._backward_retained, None
        self._retain_steps = self._retain_steps + 1 if retained else 0
        if self._retain_steps == 3:
            self.add(
                Finding(
                    "retain-graph-every-step",
                    "warning",
                    "backward(retain_graph=True) on every step with no later backward through that graph: each step's graph stays alive",
                    where=self._retain_site,
                    evidence={"steps": 3},
                )
            )

    def _step_of(self, seq: int) -> int:
        i = bisect.bisect_left(self._seq, seq)
        return self._seq_step[i] if i < len(self._seq_step) else self.step

    def _maybe_scan(self, s: int, loss: torch.Tensor | None) -> None:
        now = time.perf_counter()
        # The two early scans always run (a fixed cost that catches leaks early); later ones
        # keep within the time budget.
        if len(self._seq) < 3 or (
            s > 32 and now - self._last_scan_end < self._last_scan_cost / self.scan_budget
        ):
            return
        marker = self._seq[-3]  # nodes numbered <= this belong to step s-2 or earlier
        found = graphs.scan(marker)
        reused = loss is not None and (graphs.oldest_node(loss) or marker + 1) <= marker
        self._last_scan_end = time.perf_counter()
        self._last_scan_cost = self._last_scan_end - now
        if found.scalars:
            holder = next(iter(found.scalar_holders), "unknown holder")
            self.add(
                Finding(
                    "loss-accumulated-with-graph",
                    "error",
                    f"{found.scalars} scalar tensor(s) keep the graphs of earlier steps (held by {holder}), from step {self._step_of(found.oldest or 0)} on",
                    where=self._where(holder),
                    evidence={
                        "scalars": found.scalars,
                        "holders": found.scalar_holders,
                        "oldest_step": self._step_of(found.oldest or 0),
                    },
                )
            )
        self._scans_with_graphs = self._scans_with_graphs + 1 if found.tensors else 0
        if found.tensors and (self._scans_with_graphs >= 2 or reused):
            holder = (
                max(found.holders, key=lambda k: found.holders[k])
                if found.holders
                else "unknown holder"
            )
            oldest = self._step_of(found.oldest or 0)
            msg = f"{found.tensors} tensors still hold autograd graphs from step {oldest} at step {s} (held by {holder})"
            msg += (
                "; this step's backward runs through them, so each step does more work"
                if reused
                else ""
            )
            self.add(
                Finding(
                    "graph-retained",
                    "error" if reused else "warning",
                    msg,
                    where=self._where(holder),
                    evidence={
                        "tensors": found.tensors,
                        "holders": found.holders,
                        "oldest_step": oldest,
                        "step": s,
                        "backward_reaches_old_graphs": reused,
                    },
                )
            )

    def _where(self, holder: str) -> str:
        attr = holder.split("'")[1] if "'" in holder else holder.rstrip("[]").rpartition(".")[2]
        site = checks.assignment_site(self.source_files, attr) if attr else ""
        return f"{holder} ({site})" if site else holder

    # ------------------------------------------------------------------ series and profiles

    def _series_checks(self, s: int) -> None:
        times = [
            math.nan if i + 1 in self._profiled else t
            for i, t in enumerate(self.series["step_time"])
        ]
        for found in (
            checks.step_time_regression(times),
            checks.memory_growth(self.series["rss_mb"], "host RSS", 32.0),
            checks.memory_growth(self.series["cuda_mb"], "device memory", 16.0)
            if any(self.series["cuda_mb"])
            else None,
            checks.input_bound(self.series["data_time"], self.series["step_time"]),
        ):
            if found is not None:
                self.add(found)
        recent = [t for t in times[-20:] if math.isfinite(t)]
        early = [t for t in times[5:25] if math.isfinite(t)]
        if len(times) >= 60 and self._profiles < 3 and self._profiler is None and recent and early:
            if sorted(recent)[len(recent) // 2] > 1.5 * sorted(early)[len(early) // 2]:
                self._start_profile(s + 1)

    def _start_profile(self, s: int) -> None:
        activities = [torch.profiler.ProfilerActivity.CPU]
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        self._profiler = torch.profiler.profile(activities=activities)
        self._profiler.__enter__()
        self._profile_start, self._profile_end = s, s + 2
        self._profiles += 1

    def _finish_profile(self) -> None:
        prof, self._profiler = self._profiler, None
        prof.__exit__(None, None, None)
        steps = range(self._profile_start, self.step + 1)
        self._profiled.update(steps)
        times: dict[str, float] = {}
        for evt in prof.key_averages():
            if (
                evt.key.startswith(
                    ("ProfilerStep", "[", "Optimizer.", "cuda", "enumerate(", "autograd::")
                )
                or "#" in evt.key
            ):
                continue
            t = float(evt.self_cpu_time_total) + float(
                getattr(evt, "self_device_time_total", 0.0) or 0.0
            )
            times[evt.key] = times.get(evt.key, 0.0) + t
        found = checks.hot_op(times, len(steps))
        if found is not None:
            found.where = next(iter(found.evidence["top_ops"]), "")
            found.evidence["steps"] = [steps.start, steps.stop - 1]
            self.add(found)

    def _rss(self, s: int) -> float:
        # Reading /proc costs ~0.1 ms on a busy host: every 5th step is enough for a trend.
        if s % 5 == 1 or not self.series["rss_mb"]:
            self._last_rss = rss_mb()
        return self._last_rss

    def _modules(self) -> list[nn.Module]:
        return [m for model in self.models for m in model.modules()]

    def _remove_hooks(self) -> None:
        while self._hooks:
            self._hooks.pop().remove()
