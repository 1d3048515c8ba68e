"""Where in the user's code a finding points: the innermost frame outside torch, this package
and the frameworks that call a training step; where a class is defined; where a holder of a
graph is assigned."""

import inspect
import itertools
import re
import sys
from collections.abc import Iterable
from pathlib import Path
from types import FrameType
from typing import Any

import torch
from torch import nn

TORCH_DIR = str(Path(torch.__file__).parent)
_SKIP = (
    TORCH_DIR,
    str(Path(__file__).parent),
    "<frozen",
    "runpy.py",
)
_SKIP_PACKAGES = (
    "lightning",
    "pytorch_lightning",
    "lightning_utilities",
    "transformers",
    "accelerate",
    "trl",
    "peft",
    "deepspeed",
    "ignite",
    "skorch",
    "sklearn",
    "fastai",
    "composer",
    "catalyst",
    "torchtnt",
    "torchmetrics",
)
"""Frameworks that call the user's training step: their frames are not where a bug is (an
``optimizer.step()`` inside ignite's trainer or skorch's ``fit`` was named, not the script's
line that set it going)."""
_CALL = nn.Module._call_impl.__code__
"""The code of a module call's frame."""


def _framework(filename: str) -> bool:
    parts = Path(filename).parts
    return any(p in parts for p in _SKIP_PACKAGES) or "runpy" in filename


def users(filename: str) -> bool:
    """Code of the user's: outside torch, this package, runpy and the frameworks."""
    return not filename.startswith(_SKIP) and not _framework(filename)


def user_frame(depth: int = 1) -> FrameType | None:
    """The innermost caller's frame outside torch, this package and runpy (None: none)."""
    frame: FrameType | None = sys._getframe(depth)
    while frame is not None and not users(frame.f_code.co_filename):
        frame = frame.f_back
    return frame


def user_site(depth: int = 1) -> str:
    """``file:line`` of the innermost caller outside torch, this package and runpy."""
    frame = user_frame(depth + 1)
    return "" if frame is None else f"{frame.f_code.co_filename}:{frame.f_lineno}"


def in_module_call() -> bool:
    """Whether a module's forward is running (a module call's frame on the stack)."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None and frame.f_code is not _CALL:
        frame = frame.f_back
    return frame is not None


def models_caller() -> str:
    """The script's line that called the outermost module running now (``evaluate(model)``'s
    ``model(x)``, not a line of the model's own ``forward``)."""
    frame, outside = sys._getframe(1), None
    while frame is not None:
        if frame.f_code is _CALL:
            outside = frame.f_back
        frame = frame.f_back  # type: ignore[assignment]
    while outside is not None and not users(outside.f_code.co_filename):
        outside = outside.f_back
    return "" if outside is None else f"{outside.f_code.co_filename}:{outside.f_lineno}"


def definition_file(cls: type) -> str:
    """The file a class is defined in; "" when unknown. (Its line would parse the file: a
    script that makes a new optimiser, and so watches its models again, every few steps paid
    ~50 ms each time.)"""
    try:
        return inspect.getsourcefile(cls) or ""
    except TypeError:  # a builtin class
        return ""


def definition_site(obj: Any) -> str:
    """``file:line`` where a class (or a module's class) is defined; "" when unknown."""
    cls = obj if isinstance(obj, type) else type(obj)
    try:
        return f"{inspect.getsourcefile(cls)}:{inspect.getsourcelines(cls)[1]}"
    except (OSError, TypeError):
        return ""


def assignment_site(
    files: Iterable[str], attr: str, attribute: bool = False, scope: str = ""
) -> str:
    """Where a holder gets its value: the first ``.attr = ...`` (or ``attr +=``,
    ``attr[key] = ...``, or ``attr.append(...)``) line in
    ``files``, or rather the first that also reads it (``total += loss``, ``state = 0.5 *
    state + h``): that is where a graph grows, not where the holder starts empty.

    ``attribute``: only ``obj.attr = ...`` counts (a local ``attr = ...`` is another variable).
    ``scope``: the function whose variable holds it (``<module>`` for a global): lines in
    that function come first (``out, hidden = model(x, hidden)`` in the training loop, not
    the model's forward's ``out, hidden = self.rnn(x, hidden)``, another variable).
    Lines under ``torch.no_grad()`` make no graph and come last, and an empty start
    (``torch.zeros(n)``) after any other (a prioritised replay's ``self.prios[i] =
    self.prios.max()`` under no_grad was named, where ``self.prios[idx] = td.abs()`` kept the
    TD errors' graphs).
    """
    # A statement that starts with the target (``x.attr = ...``), not prose that mentions it;
    # or one of several targets unpacked (``out, hidden = model(x, hidden)``, an RNN's state).
    prefix = "+" if attribute else "*"
    others = r"[\w\[\].]+\s*"
    # ``attr[key] = ...`` too: a dict of tensors kept by hand (an EMA table).
    pattern = re.compile(
        rf"^\s*(?:{others},\s*)*([\w\[\]]+\.){prefix}{re.escape(attr)}(?:\[[^\]]*\])?\s*"
        rf"(?:,\s*{others})*(=(?!=)|\+=)"
    )
    # A list that grows by a call (``self.outputs.append(loss)``) grows where it is called.
    grows = re.compile(rf"^\s*([\w\[\]]+\.){prefix}{re.escape(attr)}\.(append|extend|insert)\(")
    found: list[tuple[bool, bool, bool, bool, int, str]] = []  # ranked: see below
    for name in files:
        try:
            lines = Path(name).read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError):
            continue
        for i, line in enumerate(lines, 1):
            code = line.split("#")[0]
            if grows.search(code):
                no_grad = _under_no_grad(lines, i - 1)
                elsewhere = _outside(scope, lines, i - 1)
                found.append((elsewhere, no_grad, False, False, len(found), f"{name}:{i}"))
                continue
            target = pattern.search(code)
            if target is None or re.search(r"=\s*None\s*$", code):
                continue
            elsewhere = _outside(scope, lines, i - 1)
            value = code[target.start(2) :]  # "= ..." or "+= ..."
            reads = value.startswith("+=") or re.search(rf"\b{re.escape(attr)}\b", value)
            empty = re.match(_EMPTY, value) is not None
            # In its scope first, then outside no_grad, then not an empty start, then reading
            # it, then first.
            no_grad = _under_no_grad(lines, i - 1)
            found.append((elsewhere, no_grad, empty, not reads, len(found), f"{name}:{i}"))
    return min(found)[5] if found else ""


def _outside(scope: str, lines: list[str], at: int) -> bool:
    """Line ``at`` (0-based) is not in the function ``scope`` ("" for any)."""
    return bool(scope) and _function_of(lines, at) != scope


def _function_of(lines: list[str], at: int) -> str:
    """The name of the function whose body line ``at`` (0-based) is in, read by indentation;
    ``<module>`` for none."""
    indent = len(lines[at]) - len(lines[at].lstrip())
    for line in reversed(lines[:at]):
        stripped = line.lstrip()
        depth = len(line) - len(stripped)
        if not stripped or stripped.startswith("#") or depth >= indent:
            continue
        found = re.match(r"(?:async\s+)?def\s+(\w+)", stripped)
        if found:
            return found.group(1)
        indent = depth
    return "<module>"


_EMPTY = re.compile(
    r"=\s*(torch\.(zeros|ones|empty|full|tensor)\b|\[\s*\]|\{\s*\}|0(\.0*)?\s*$|None\s*$)"
)
"""A holder's empty start (``self.prios = torch.zeros(n)``): where it gets a graph is later."""


def _under_no_grad(lines: list[str], at: int) -> bool:
    """Line ``at`` (0-based) sits in a ``with torch.no_grad():`` (or ``inference_mode``) block,
    or a function decorated with one, read by indentation."""
    indent = len(lines[at]) - len(lines[at].lstrip())
    decorators = False  # reading the lines just above a def, at its depth
    for line in reversed(lines[:at]):
        stripped = line.lstrip()
        if not stripped or stripped.startswith("#"):
            continue
        depth = len(line) - len(stripped)
        if decorators and depth == indent and stripped.startswith("@"):
            if re.match(r"@.*\b(no_grad|inference_mode)\b", stripped):
                return True
            continue
        decorators = False
        if depth >= indent:
            continue
        if re.match(r"(async\s+)?with\b.*\b(no_grad|inference_mode)\(", stripped):
            return True
        decorators = re.match(r"(async\s+def|def)\b", stripped) is not None
        indent = depth
    return False


def script_names(values: Iterable[torch.Tensor], paths_first: bool = False) -> dict[int, str]:
    """The names the script's innermost frame outside torch and this package (and its
    module's globals) gives ``values``, by id: a variable's, or a model's and the parameter's
    or buffer's in it (``target_net.0.weight``, ``ema.module.0.running_mean``). ``paths_first``:
    a model's path before a variable's name (a loop's ``p`` names the last parameter it saw)."""
    wanted = {id(v) for v in values}
    frame = user_frame()
    if frame is None or not wanted:
        return {}
    variables: dict[int, str] = {}  # the innermost scope's name wins
    paths: dict[int, str] = {}  # the first model's path wins
    for scope in (frame.f_globals, frame.f_locals):
        for name, value in scope.items():
            if name.startswith("_"):
                continue
            if id(value) in wanted:
                variables[id(value)] = name
            elif isinstance(value, nn.Module):
                for inner, t in itertools.chain(value.named_parameters(), value.named_buffers()):
                    if id(t) in wanted:
                        paths.setdefault(id(t), f"{name}.{inner}")
    return {**variables, **paths} if paths_first else {**paths, **variables}
