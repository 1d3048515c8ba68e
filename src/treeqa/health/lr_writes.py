"""``lr-not-applied``: a learning rate written where the optimiser does not read it.

A torch optimiser reads ``lr`` from each dict of its ``param_groups`` at every step, and
nothing else. A schedule written by hand that sets the rate anywhere else changes nothing: the
run trains at the first rate throughout (no decay, no warm-up). The places, each read from the
clock's optimiser on its sampled steps and when the run ends (dict lookups):

- an attribute of the optimiser, ``optimizer.lr = x`` (Keras's ``model.optimizer.lr``), or
  ``optimizer.learning_rate``; or one named for another of its settings, a key of its
  defaults (``optimizer.weight_decay = x``, ``optimizer.momentum``), read from the groups too;
- ``optimizer.defaults["lr"]`` changed since the optimiser last added a group (the defaults
  are read only then: ``Optimizer.add_param_group``, which its constructor calls for each
  group, is wrapped for the run to keep each optimiser's);
- a key of a group named for the rate but not ``lr``: ``g["learning_rate"]``, ``g["LR"]``;
- a copy of the groups, ``optimizer.state_dict()["param_groups"][0]["lr"] = x`` (each call
  returns new dicts: ``Optimizer.state_dict`` is wrapped to keep the groups of its latest
  result, with their rates then, per optimiser).

Such a value that no group holds, where the groups' own values of that setting have not moved
since it was first seen (where they move, a schedule of the script's own moves them, and the
value is its bookkeeping: a base rate it multiplies, a rate logged a step late), makes the
finding: at once where it has changed since it was first seen (the script runs a schedule
there) or is a copy's changed rate; at the run's end for one that stayed as it was for 20
steps or more (a rate set once that the optimiser never took, or a default changed for a group
added later: by then it has been, and the default counts from it). A value that mirrors a
group's (``optimizer.current_lr = g["lr"]`` for the log) is none, and so is a copy loaded back
(``Optimizer.load_state_dict``, which the doctor wraps, lets its copies go). Only torch's own optimisers
are judged: a class of the script's may read an attribute or key of its own.
"""

from __future__ import annotations

import linecache
import math
import re
import sys
import weakref
from collections.abc import Callable
from types import FrameType
from typing import Any

import torch

from treeqa.health import sites
from treeqa.health.findings import Finding
from treeqa.health.wrap import Wrappers, note_function_results

RATE_NAME = re.compile(r"^(lr|learning_?rate|lr_?rate|l_r|learningrate)$", re.I)
"""Names that mean the learning rate (an attribute's, or a group's key other than ``lr``)."""
STEADY = 20
"""Steps a rate set once, never taken, stands before it is said."""


class LrWrites:
    """``report(finding)``: where findings go (once per code)."""

    def __init__(self, report: Any):
        self.report = report
        self.said = False
        # each optimiser's defaults["lr"] when it last added a group (its constructor adds each)
        self.built: weakref.WeakKeyDictionary[torch.optim.Optimizer, Any] = (
            weakref.WeakKeyDictionary()
        )
        # each optimiser's latest state_dict()'s groups, with their rates then
        self.copies: weakref.WeakKeyDictionary[
            torch.optim.Optimizer, list[tuple[dict[str, Any], Any]]
        ] = weakref.WeakKeyDictionary()
        # per optimiser: each place's first value and the step it was seen at; the groups'
        # rates first seen; whether they have moved since
        self.seen: weakref.WeakKeyDictionary[torch.optim.Optimizer, dict[str, Any]] = (
            weakref.WeakKeyDictionary()
        )
        self.files: list[str] = []  # the script's files on the stack at the first judged step
        self.pending: Finding | None = None  # a value never taken, said at the run's end
        # told of each group an optimiser adds, after it is added (``group_rates.py``)
        self.added: Callable[[torch.optim.Optimizer], None] | None = None

    def install(self, wrappers: Wrappers) -> None:
        optimizer = torch.optim.Optimizer
        wrappers.add(note_function_results(optimizer, "add_param_group", self._built))
        wrappers.add(note_function_results(optimizer, "state_dict", self._copied))

    def _built(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any], _: Any) -> None:
        if args and isinstance(args[0], torch.optim.Optimizer):
            self.built[args[0]] = getattr(args[0], "defaults", {}).get("lr")
            if self.added is not None:
                self.added(args[0])

    def _copied(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any], sd: Any) -> None:
        if self.said or not args or not isinstance(sd, dict):
            return
        groups = sd.get("param_groups")
        if isinstance(groups, list):
            kept = [(g, g.get("lr")) for g in groups if isinstance(g, dict)]
            self.copies[args[0]] = kept

    def loaded(self, optimizer: torch.optim.Optimizer) -> None:
        """A state loaded into ``optimizer`` (the doctor's wrapper of ``load_state_dict``): a
        copy edited and loaded back took effect."""
        self.copies.pop(optimizer, None)

    def note(self, step: int, optimizer: torch.optim.Optimizer) -> None:
        """After the clock's sampled step ``step`` (and at the run's end, while it lives)."""
        if self.said or not type(optimizer).__module__.startswith("torch.optim"):
            return
        seen = self.seen.get(optimizer)
        if seen is None:
            seen = self.seen[optimizer] = {"groups": {}, "moved": set()}
            self.files = self.files or user_files()
        self.pending = None
        for place, value, written, setting in self._places(optimizer):
            held = [float(g[setting]) for g in optimizer.param_groups if _number(g.get(setting))]
            if not held or not _number(value):
                continue
            if seen["groups"].setdefault(setting, held) != held:
                seen["moved"].add(setting)  # (a schedule moves the groups: the script's own)
            if setting in seen["moved"] or any(math.isclose(value, v, rel_tol=1e-6) for v in held):
                continue  # a mirror of what the groups hold, or a rate of the script's own
            first = seen.setdefault(place, (value, step))
            changed = value != first[0]
            if not (changed or written or step - first[1] >= STEADY):
                continue
            found = _finding(optimizer, place, setting, float(value), held, first[1], changed)
            found.where = written_at(found.evidence.pop("pattern"), self.files)
            if changed or written:
                self.said = True
                self.report(found)
                return
            # A default changed may be for a group added later; a value set once, for a
            # schedule by hand that moves the groups later: both wait for the run's end.
            self.pending = self.pending or found

    def finish(self, step: int, optimizer: torch.optim.Optimizer | None) -> None:
        """The run ended at the clock's step ``step`` (its optimiser, where it lives): a value
        that stayed as it was, never taken, is said as the last reading left it."""
        if optimizer is not None:
            self.note(step, optimizer)
        if self.pending is not None and not self.said:
            self.said = True
            self.report(self.pending)

    def _places(self, optimizer: torch.optim.Optimizer) -> list[tuple[str, Any, bool, str]]:
        """``(place, value, whether it shows a write (a copy's changed rate), the group key meant)``
        of each setting written outside the groups: attributes named for the rate or for a key
        of the optimiser's defaults (``weight_decay``, ``momentum``), the default rate, keys
        named for the rate, a copy's rate."""
        found: list[tuple[str, Any, bool, str]] = []
        defaults = optimizer.defaults if isinstance(optimizer.defaults, dict) else {}
        for name, value in vars(optimizer).items():
            if RATE_NAME.match(name):
                found.append((f"attribute {name}", value, False, "lr"))
            elif name in defaults and name != "params":
                found.append((f"attribute {name}", value, False, name))
        built, now = self.built.get(optimizer), defaults.get("lr")
        if _number(built) and _number(now) and now != built:
            found.append(("defaults", now, False, "lr"))  # (judged at the end)
        for group in optimizer.param_groups:
            for key, value in group.items():
                if key != "lr" and isinstance(key, str) and RATE_NAME.match(key):
                    found.append((f"key {key}", value, False, "lr"))
        for group, then in self.copies.get(optimizer, ()):
            if group.get("lr") != then:
                found.append(("copy", group.get("lr"), True, "lr"))
        return found


def _number(value: Any) -> bool:
    return type(value) is float or type(value) is int


def _finding(
    optimizer: torch.optim.Optimizer,
    place: str,
    setting: str,
    value: float,
    held: list[float],
    since: int,
    changed: bool,
) -> Finding:
    name = type(optimizer).__name__
    kind, _, key = place.partition(" ")
    assign = r"\s*(?:[-+*/]|\*\*|//)?=(?!=)"  # = or an augmented assignment
    if kind == "attribute":
        written = f"optimizer.{key}"
        pattern = rf"\.{key}{assign}|setattr\([^,]+,\s*['\"]{key}['\"]"
    elif kind == "key":
        written = f'a param group\'s "{key}"'
        pattern = rf"\[\s*['\"]{key}['\"]\s*\]{assign}|\b{key}\s*="
    elif kind == "defaults":
        written = 'optimizer.defaults["lr"]'
        pattern = r"defaults\s*\[\s*['\"]lr['\"]\s*\]" + assign
    else:
        written = "a copy of the param groups, from optimizer.state_dict() (new dicts each call)"
        pattern = r"state_dict\(\)\s*\[\s*['\"]param_groups['\"]\s*\]"
    shown = ", ".join(f"{v:g}" for v in sorted(set(held)))
    what = "a learning rate" if setting == "lr" else f"a {setting}"
    if kind == "defaults":
        when = "changed since its groups were made"
    elif kind == "copy":
        when = ""
    else:
        when = f"changed since step {since}" if changed else "never taken"
    return Finding(
        "lr-not-applied",
        "warning",
        f"{what} of {value:g} is written to {written}{f' ({when})' if when else ''}, which "
        f'{name} never reads: it steps with each param group\'s "{setting}" ({shown} now), '
        "so the schedule the script writes does not happen",
        evidence={
            "place": place,
            "setting": setting,
            "written": value,
            "groups": held,
            "pattern": pattern,
        },
    )


def user_files() -> list[str]:
    """The script's files on the stack, innermost first."""
    frame: FrameType | None = sys._getframe(1)
    files: list[str] = []
    while frame is not None:
        name = frame.f_code.co_filename
        if sites.users(name) and name not in files:
            files.append(name)
        frame = frame.f_back
    return files


def written_at(pattern: str, files: list[str]) -> str:
    """The first line matching ``pattern`` in the script's ``files`` (the line that writes the
    rate, read from the source: the write itself was not seen), else the script's line on the
    stack."""
    found = re.compile(pattern)
    for name in files:
        for number, line in enumerate(linecache.getlines(name), 1):
            code = line.split("#", 1)[0]
            if found.search(code):
                return f"{name}:{number}"
    return sites.user_site()
