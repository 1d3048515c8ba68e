"""The monitor's report: one line per new finding, a terminal summary, JSON and a plot."""

from __future__ import annotations

import json
import math
import platform
import time
from pathlib import Path
from typing import Any, TextIO

from treeqa.health import wrap
from treeqa.health.findings import SEVERITIES, Finding
from treeqa.train.checkpoint import keep_aside, write_text_atomic

_ORDER = {s: i for i, s in enumerate(reversed(SEVERITIES))}
REPORT_POINTS = 20_000
"""Values per series at most in the report (health.json and its plot): a longer run's are
every k-th step's, their step numbers in "step". At full length a run wrote ~210 bytes of
JSON a step (a 1M-step run: ~210 MB, built as Python floats at its end); now ~4 MB at most."""


def one_line(finding: Finding) -> str:
    where = f" at {finding.where}" if finding.where else ""
    return f"treeqa health: {finding.severity.upper()} [{finding.code}] step {finding.step}: {finding.message}{where}"


def build(monitor: Any) -> dict[str, Any]:
    findings = sorted(monitor.findings.values(), key=lambda f: (_ORDER[f.severity], f.step))
    even = {k: monitor.even(k) for k in monitor.series}  # a long run's: thinned evenly
    stride = max(1, -(-len(even["step"]) // REPORT_POINTS))
    series = {
        k: [None if not math.isfinite(v) else v for v in vs[::stride]] for k, vs in even.items()
    }
    series["step"] = [int(v) for v in even["step"][::stride]]
    return {
        "findings": [f.to_json() for f in findings],
        "series": series,
        "steps": monitor.step - monitor.resumed_at,
        "resumed_at": monitor.resumed_at,
        "backwards_without_a_step": monitor.unstepped_backwards,
        "monitor_failures": wrap.FAILURES[monitor.failures_from :],
        "meta": {
            "started": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(monitor.started)),
            "python": platform.python_version(),
        },
    }


def plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def print_summary(result: dict[str, Any], stream: TextIO) -> None:
    findings = result["findings"]
    steps = result["steps"]
    backwards = result.get("backwards_without_a_step", 0)
    if steps == 0 and backwards:  # gradients computed, never applied
        print(
            f"treeqa health: 0 training steps seen after {backwards} backward() calls, so "
            "nothing was monitored (a step is one torch.optim optimiser step, or weights "
            "updated by hand between two backwards): is optimizer.step() missing?",
            file=stream,
        )
    elif steps == 0:  # "no findings" would read as a clean bill of health
        print(
            "treeqa health: 0 training steps seen, so nothing was monitored (a step is one "
            "torch.optim optimiser step, or weights updated by hand after a backward: "
            "inference is not seen)",
            file=stream,
        )
    failures = result.get("monitor_failures", [])
    if failures:  # said on stderr when they came; the counts below would read as the whole run
        print(
            f"treeqa health: the monitor's own code failed ({plural(len(failures), 'time')}, "
            "said above): what it did not watch after that is not in this report",
            file=stream,
        )
    if steps == 0 and not findings:
        return
    # A run resumed from a checkpoint: this report covers its steps after the resume only.
    watched = plural(steps, "step") + _resumed_span(result.get("resumed_at", 0), steps)
    if not findings:
        print(f"treeqa health: {watched}, no findings", file=stream)
        return
    counts = {s: sum(f["severity"] == s for f in findings) for s in SEVERITIES}
    shown = ", ".join(f"{n} {s}" for s, n in counts.items() if n)
    counted = f"{watched}, {plural(len(findings), 'finding')}"
    print(f"\ntreeqa health: {counted} ({shown})", file=stream)
    for f in findings:
        print(f"  {f['severity']:<7} {f['code']:<34} step {f['step']}: {f['message']}", file=stream)
        if f["where"]:
            print(f"          where: {f['where']}", file=stream)
        print(f"          fix:   {f['fix']}", file=stream)


def _resumed_span(resumed: int, steps: int) -> str:
    """Which steps a report of a run resumed after step ``resumed`` covers, for its summary
    ("" for a run that was not): none, when it stopped before its first step."""
    if not resumed:
        return ""
    covered = {0: "", 1: f"step {resumed + 1}, "}.get(steps, f"{resumed + 1}-{resumed + steps}, ")
    return f" ({covered}resumed after step {resumed})"


def in_place(path: Path) -> bool:
    """A report path written into as it is, not replaced by a renamed file: a pipe, a device
    or a link (``/dev/stdout`` links to the process's output, a file when redirected, and a
    rename would put a file in the link's place while the output stayed empty)."""
    return path.is_symlink() or (path.exists() and not path.is_file())


def write_json(result: dict[str, Any], path: str | Path) -> None:
    """The report as JSON, written atomically to a file (a kill leaves the old report or the
    new one, never half); into a pipe, device or link as it is (``in_place``)."""
    path = Path(path)
    text = json.dumps(result, indent=1) + "\n"
    if in_place(path):
        path.write_text(text, encoding="utf-8")
    else:
        write_text_atomic(path, text)


def check_plot_path(path: Path, flag: str = "--plot") -> None:
    """Fail before the run, not after it, when the plot cannot be drawn: no matplotlib, or a
    file name whose extension names no image format it writes. ``flag``: the option named."""
    try:
        from matplotlib.backend_bases import FigureCanvasBase
    except ImportError as e:
        raise ValueError(f"{flag} needs matplotlib: pip install 'treeqa[plot]'") from e
    formats = FigureCanvasBase.get_supported_filetypes()
    if path.suffix[1:].lower() not in formats:
        raise ValueError(
            f"{flag} {path}: name the image format by its extension "
            f"({', '.join('.' + f for f in sorted(formats))})"
        )


def write_plot(result: dict[str, Any], path: str | Path) -> None:
    """Step time, memory and loss over steps, with each finding marked where it first appeared."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise RuntimeError("the health plot needs matplotlib: pip install 'treeqa[plot]'") from e
    s = result["series"]
    steps = s["step"]
    fig, axes = plt.subplots(3, 1, figsize=(9, 7.5), sharex=True)
    panels = [
        ("step time (ms)", [None if v is None else v * 1e3 for v in s["step_time"]], "tab:blue"),
        ("memory (MB)", s["cuda_mb"] if any(s["cuda_mb"]) else s["rss_mb"], "tab:green"),
        ("loss", s["loss"], "tab:red"),
    ]
    for ax, (label, values, color) in zip(axes, panels, strict=True):
        xs = [x for x, v in zip(steps, values, strict=True) if v is not None]
        ax.plot(xs, [v for v in values if v is not None], color=color, lw=0.8)
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    colors = {"error": "red", "warning": "orange", "info": "grey"}
    for i, f in enumerate(result["findings"]):
        for ax in axes:
            ax.axvline(f["step"], color=colors[f["severity"]], ls="--", lw=0.8)
        axes[0].annotate(
            f["code"],
            (f["step"], 1 - 0.1 * (i % 8)),
            xycoords=("data", "axes fraction"),
            fontsize=7,
            color=colors[f["severity"]],
            rotation=0,
            va="top",
        )
    if any(s["cuda_mb"]):
        axes[1].set_ylabel("device memory (MB)")
    elif any(v is not None for v in s.get("heap_used_mb", [])):  # glibc's heap readings
        axes[1].lines[0].set_label("host RSS")
        for key, style, label in (
            ("heap_used_mb", "k-", "heap used"),
            ("heap_free_mb", "k:", "heap free"),
        ):
            xs = [x for x, v in zip(steps, s[key], strict=True) if v is not None]
            axes[1].plot(xs, [v for v in s[key] if v is not None], style, lw=0.7, label=label)
        axes[1].legend(fontsize=7, loc="center right")
    axes[-1].set_xlabel("step")
    axes[0].set_title(
        f"training health: {len(result['findings'])} findings over {result['steps']} steps"
    )
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def keep_earlier(path: Path) -> None:
    """Move a report an earlier part of the run wrote (before a resume) to ``health.1.json``,
    ``health.2.json``, ...: the resumed part writes its own, and the earlier findings stay
    (said, as an earlier ``config.toml`` or ``metrics.jsonl`` kept aside is)."""
    if path.exists():
        print(f"{path} held an earlier report: kept as {keep_aside(path)}")
