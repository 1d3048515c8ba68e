"""Graphs kept past their step: ``retain_graph=True`` on every step's last backward
(``retain-graph-every-step``), and gc scans between steps for tensors whose graphs reach back
to earlier steps, named by what holds them (``graph-retained``,
``loss-accumulated-with-graph``; ``graphs.py`` walks and names).

Each step's loss autograd-node number is noted where a scan or a step lookup needs it, so that a
node found in a scan maps back to the steps whose graphs may hold it.
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Callable

import torch

from treeqa.health import graphs, sites
from treeqa.health.findings import Finding

EARLY_SCANS = (8, 32)
"""A run's own steps after which a scan always runs (a fixed cost that catches leaks early)."""


class Retention:
    """``add``: where findings go; ``every``: steps between sampled steps; ``scan_budget``:
    share of wall time the gc walks may take; ``source_files``: the script's files (the
    monitor's list, which grows), searched for where a holder is assigned."""

    def __init__(
        self,
        add: Callable[[Finding], None],
        every: int,
        scan_budget: float,
        source_files: list[str],
    ) -> None:
        self.add, self.every, self.scan_budget = add, every, scan_budget
        self.source_files = source_files
        self.step = 0  # the step of the scan running
        self.first = 0  # steps before the first one watched (a run resumed from a checkpoint)
        self._seq: list[int] = []  # sequence number of each step's loss (graphs-from-step map)
        self._floor: int | None = None  # the last node number before the first step
        self._seq_step: list[int] = []
        self._retain_steps = 0
        self._retain_site = ""
        self._backward_retained: bool | None = None
        self._retained_seq = -1  # the loss node number of the last step that retained its graph
        self._retain_reused = False  # a later backward ran through a retained graph
        self._scan_marker: int | None = None  # the loss node number at the previous scan
        self._last_scan_end, self._last_scan_cost = 0.0, 0.0

    def begin_step(self) -> None:
        if self._floor is None:  # graphs made before the first step are not earlier steps'
            self._floor = graphs.next_sequence_nr()

    def note_backward(self, retain_graph: bool) -> None:
        if not retain_graph and self._retain_steps and self._backward_retained is None:
            # A backward after the step that kept its graph, before the next step's: the graph
            # was kept for it (a second optimiser's loss over the same forward, stepped after
            # the first), and it frees it.
            self._retain_reused = True
        self._backward_retained = retain_graph
        if retain_graph and not self._retain_site:
            self._retain_site = sites.user_site(3)

    def note_loss(self, s: int, loss: torch.Tensor) -> None:
        """Step s's loss, after its backward."""
        # Reading grad_fn after backward costs ~30 us (a fresh Python object for the node,
        # on cold caches): note it only where a scan or a step lookup needs it.
        if loss.requires_grad and self._notes_graph(s):
            fn = loss.grad_fn
            if fn is not None:
                self._seq.append(fn._sequence_nr())
                self._seq_step.append(s)

    def end_step(self, loss: torch.Tensor | None) -> None:
        # A step whose backward kept no graph, with no streak open, changes nothing there.
        if self._backward_retained or self._retain_steps:
            self._check_retain(loss)

    def _check_retain(self, loss: torch.Tensor | None) -> None:
        """``retain-graph-every-step`` after three steps in a row, unless the backward of the
        second or third ran through the graph the step before kept: then it was kept for that
        backward (truncated backpropagation through time over a few steps), and whether the
        carried state grows is ``graph-retained``'s to say. At most two graph walks a streak."""
        retained, self._backward_retained = self._backward_retained, None
        self._retain_steps = self._retain_steps + 1 if retained else 0
        if not retained:
            self._retain_reused = False
            return
        if self._retain_steps > 3:
            return
        if self._retain_steps > 1 and loss is not None:
            first = graphs.oldest_node(loss, floor=-1 if self._floor is None else self._floor)
            self._retain_reused |= first is not None and first <= self._retained_seq
        self._retained_seq = -1 if loss is None else graphs.sequence_nr(loss)
        if self._retain_steps == 3 and not self._retain_reused:
            self.add(
                Finding(
                    "retain-graph-every-step",
                    "warning",
                    "the last backward of every step passes retain_graph=True, so each step's graph "
                    "outlives its backward; if it silenced 'backward through the graph a second "
                    "time', a state carries its graph from step to step",
                    where=self._retain_site,
                    evidence={"steps": 3},
                )
            )

    def _scans(self, s: int) -> bool:
        """A graph scan may run after step s (the early ones always, later ones on budget)."""
        return s - self.first in EARLY_SCANS or s % (4 * self.every) == 0

    def _notes_graph(self, s: int) -> bool:
        """Step s's loss node number is kept: sampled steps and scans (``_scans``: a step whose
        number is a multiple of ``4 * every`` is one of ``every`` too)."""
        return s - self.first <= 3 or s % self.every == 0 or s - self.first in EARLY_SCANS

    def _step_of(self, seq: int) -> tuple[int, int]:
        """The steps (first, last) whose graphs may hold node number ``seq``."""
        i = bisect.bisect_left(self._seq, seq)
        last = self._seq_step[i] if i < len(self._seq_step) else self.step
        first = self._seq_step[i - 1] + 1 if i > 0 else self.first + 1
        return min(first, last), last

    def maybe_scan(self, s: int, loss: torch.Tensor | None) -> None:
        """After step s's other checks (and any profiler window): a gc scan for graphs held
        across steps, when one is due and within the time budget."""
        if not self._scans(s):
            return
        self.step = s
        now = time.perf_counter()
        # The early scans always run (a fixed cost that catches leaks early); later ones keep
        # within the time budget.
        if (
            s - self.first > 32
            and now - self._last_scan_end < self._last_scan_cost / self.scan_budget
        ):
            return
        # Nodes numbered <= marker were made at or before the previous scan; the first scan
        # only notes where its interval starts.
        marker, self._scan_marker = self._scan_marker, (self._seq[-1] if self._seq else None)
        if marker is None:
            return
        found = graphs.scan(marker, -1 if self._floor is None else self._floor, loss)
        self._last_scan_end = time.perf_counter()
        self._last_scan_cost = self._last_scan_end - now
        for finding in graphs.findings(found, s, self._step_of, self._where):
            self.add(finding)

    def _where(self, holder: str) -> str:
        named = "'" in holder  # a global or local variable, not an attribute
        attr = holder.split("'")[1] if named else holder.rstrip("[]").rpartition(".")[2]
        # (the function of a variable: "list 'hidden' in <module>()")
        scope = holder.rpartition(" in ")[2].removesuffix("()") if named else ""
        site = sites.assignment_site(self.source_files, attr, not named, scope) if attr else ""
        return f"{holder} ({site})" if site else holder
