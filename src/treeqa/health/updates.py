"""What each optimiser step of ``treeqa doctor``'s clock is given: gradients of this step only,
gradients at all, a model in train mode, a learning rate.

``Updates`` is driven by the ``Doctor`` (which sees the optimiser, the models it trains and
every backward) and reports to the monitor:

- ``gradients-not-zeroed`` and ``zero-grad-per-micro-batch``: on sampled steps, probes
  (``probes.py``) on a parameter of the models trained, one the optimiser holds outside
  them, and one of each other optimiser note whether each backward found their gradients
  cleared: never (nothing zeroes them), or always, two or more times a step (``zero_grad``
  inside an accumulation loop throws the earlier micro-batches away). Also on sampled steps,
  the clock's gradients are noted and looked at again at its next step: ones that no backward
  wrote and nothing cleared in between (a teacher trained first, then run under ``no_grad``
  and zeroed no more) are stepped again, moving what they belong to.
- ``step-without-gradients``: the clock stepped after a backward while none of its parameters
  that require gradients had one (a stale optimiser, zero_grad between backward and step), or,
  with no other optimiser stepping, while it held no parameter, only frozen ones, or those of
  models run under ``no_grad`` only (a teacher's, not the student's): said at the run's end.
- ``not-in-optimiser`` and ``module-not-registered``: parameters that get gradients and that
  nothing steps, from the clock's 10th step on (``orphans.py``).
- ``frozen-in-train-mode``: a model nothing trains ran without gradients in train mode on
  sampled steps (a teacher left as loaded: ``teachers.py``).
- ``train-in-eval-mode``: the models the clock trains ran their forwards with gradients in
  eval mode, after steps in train mode or after an evaluation before their first step, in a
  script that never went back to train mode after an evaluation (one that does knows to: a
  later eval-mode phase is on purpose).
- ``eval-in-train-mode``: a model the clock trains ran ``EVAL_FORWARDS`` forwards in a row
  without gradients and in train mode (no forward with gradients, no step between them): an
  evaluation without ``model.eval()``, with dropout on and batch norm updating its running
  statistics from the evaluation data. One or two such forwards a step (pseudo-labels in
  semi-supervised training), Monte Carlo dropout (one input run again and again, or its
  copies batched into one forward, with no batch norm's statistics moving) and a batch-norm
  recalibration (``momentum=None``) are not it.
- ``evaluation-with-gradients``: a model the clock trains ran ``EVAL_FORWARDS`` forwards or
  more in a row in eval mode with gradients on, then one in train mode (or the script ended),
  with no backward or ``torch.autograd.grad`` (``gradients_taken``) since the first: an
  evaluation outside ``torch.no_grad()``, whose graphs are recorded for nothing. Training in
  eval mode (frozen batch norm, several views a step) takes its gradients before going on.
- ``fp16-without-loss-scaling``: on sampled steps the forwards of the models trained ran under
  float16 autocast, and no loss was scaled (by an enabled ``GradScaler``, or multiplied by a
  constant of ``scalers.HAND_SCALE`` or more before its backward): gradients under float16's
  smallest step flush to zero.
- ``lr-*`` and ``maximize``: the learning rates (``rates.py``).

Per step this costs a few attribute reads; the hooks are on sampled steps only.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch
from torch import nn

from treeqa.health import checks, graphs, sites, slips
from treeqa.health.averaged import AveragedNorms
from treeqa.health.findings import Finding
from treeqa.health.hand import HandUpdates
from treeqa.health.orphans import ORPHAN_STEP, Orphans
from treeqa.health.penalties import DetachedPenalties
from treeqa.health.probes import Probe
from treeqa.health.processes import local_part
from treeqa.health.profile import in_backward
from treeqa.health.rates import LearningRates
from treeqa.health.returned import ReturnedLosses
from treeqa.health.scalers import LossScalers
from treeqa.health.symmetry import IdenticalUnits
from treeqa.health.teachers import FrozenInTrainMode
from treeqa.health.thrown import FORWARDS as LOST_FORWARDS
from treeqa.health.thrown import ThrownLosses
from treeqa.health.wrap import Watched, Wrappers, note_calls_of, note_function_calls

EMPTY_STEPS = 20
"""Steps in a row with a backward and no gradient on the optimiser's parameters (a conditional
head with an optimiser of its own gets one within a few)."""
ZERO_STEPS_SAMPLED, ZERO_LOOKED_AT = 3, 8
"""Sampled steps in a row after a backward on which the gradients of the optimiser's first and
last ``ZERO_LOOKED_AT`` parameters with one were all zero: ``step-without-gradients``, zeroed
in place between backward and step (a head is last, and trains)."""
EVAL_STEPS = 20
"""Steps in a row trained in eval mode (after train mode) before it is reported."""
EVAL_FORWARDS = 5
"""Forwards in a row without gradients in train mode that read as an evaluation (MixMatch
guesses labels with 2 a step)."""
LOSS_FLOORS = 4096
"""Forwards with a training loss in a run whose autograd number is kept (to count those a
backward left out)."""
FP16_STEPS = 3
"""Sampled steps under float16 autocast with no loss scaler before it is reported."""
STALE_STEPS = 3
"""Sampled steps in a row on which the clock stepped gradients left from its step before."""
FROZEN_STEPS = 3
"""Sampled steps in a row whose optimiser step decayed frozen parameters."""


class Updates:
    """``add``: where findings go (``HealthMonitor.add``)."""

    def __init__(self, add: Callable[[Finding], None], scalers: LossScalers | None = None):
        """``scalers``: the loss scalers in use (the monitor's)."""
        self.add = add
        self.scalers = scalers if scalers is not None else LossScalers()
        self.reported: set[str] = set()
        # Parameters hooked from a sampled step's first forward to their optimiser's step:
        # "model" (the clock's models': its last and "first"), "outside" (the clock's
        # optimiser's, outside them); and each other optimiser's, from one of its steps to the
        # next (weak: a finished run's).
        self.probes: dict[str, Probe] = {}
        self.ran = False  # a model the clock trains ran a forward this step, with or without
        self.teachers = FrozenInTrainMode(lambda model: _mode_dependent([model], True))
        self.averages = AveragedNorms()
        self.returned = ReturnedLosses()
        self.penalties = DetachedPenalties(self._report)
        self.other_probes: weakref.WeakKeyDictionary[torch.optim.Optimizer, Probe] = (
            weakref.WeakKeyDictionary()
        )
        # The armed probes on FSDP's parameters, told of each backward (``backward_called``).
        self.reading: list[Probe] = []
        # Other optimisers whose probe is armed at their next step (a sampled step's).
        self.others_due: weakref.WeakSet[torch.optim.Optimizer] = weakref.WeakSet()
        self.wrappers = Wrappers()
        # The models the clock trains, whose train()/eval() calls are noted: a mode change
        # counts as one more event, as does an evaluation (``seq`` orders them).
        self.watched = Watched()
        self.seq = self.train_call = self.eval_call = self.evaluation_seq = 0
        self.eval_site = ""  # where the last eval() of a trained model was called
        # Every optimiser that stepped in the run (the doctor adds them; weak: finished runs').
        self.optimizers: weakref.WeakSet[torch.optim.Optimizer] = weakref.WeakSet()
        self.orphans = Orphans(self._report, self._held, self.optimizers, self.reported)
        # Told of each torch.autograd.grad call's outputs and inputs (the doctor's steps made
        # by hand).
        self.on_grad: Callable[[Any, Any], None] | None = None
        # An all-frozen optimiser's streak of steps without gradients while no other optimiser
        # had stepped, with the optimiser: said at the run's end if none other stepped by then
        # (a second optimiser over the layers that train may step once in many clock steps,
        # accumulating gradients over as many micro-batches).
        self.frozen_streak: tuple[Finding, weakref.ref[torch.optim.Optimizer]] | None = None
        self.first = 1
        self.rates = LearningRates(self._report, self._alone, self._run_losses)
        self.zero_losses = 0
        # the losses of every step from a given one on (the monitor's series: the doctor's)
        self.losses_since: Callable[[int], Sequence[float]] | None = None
        self.reset(0)

    def install(self) -> None:
        self.rates.install(self.wrappers)
        self.averages.install(self.wrappers)
        self.wrappers.add(note_calls_of(nn.Module, "train", self._mode_called, self.watched))
        self.wrappers.add(note_function_calls(torch.autograd, "grad", self._grad_called))

    def _grad_called(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        if in_backward():
            return  # called by a backward (a Function's): a part of the script's, as in doctor
        self.gradients_taken()
        if self.sampled:
            self.penalties.grad_called(args, kwargs)
        if self.returned.pending:
            self.returned.backward(kwargs.get("outputs", args[0] if args else None))
        if self.on_grad is not None:
            outputs = kwargs.get("outputs", args[0] if args else None)
            self.on_grad(outputs, kwargs.get("inputs", args[1] if len(args) > 1 else None))

    def watch_modes(self, roots: list[nn.Module]) -> None:
        """The models the clock trains, whose ``train()``/``eval()`` calls count from now on."""
        self.watched.ids.clear()
        self.watched.ids.update(id(m) for m in roots)

    def _mode_called(self, module: nn.Module, mode: bool = True) -> None:
        self.seq += 1
        if mode:
            self.train_call = self.seq
        else:
            self.eval_call, self.eval_site = self.seq, sites.user_site()

    def evaluation(self) -> None:
        """A model the clock trains runs a forward in eval mode without gradients."""
        self.evaluated = True
        self.seq += 1
        self.evaluation_seq = self.seq

    def uninstall(self) -> None:
        self.penalties.stop()
        self.wrappers.undo()

    def reset(self, step: int, same_models: bool = False) -> None:
        """A new clock (a new run in the script): judge its steps afresh from ``step`` on.
        ``same_models``: it trains the models the last clock trained (an optimiser re-created
        each epoch): their train/eval mode history carries on."""
        self.rates.reset(step)
        self._judge_zero_losses()
        self.remove_hooks()
        self.probes.clear()
        self.other_probes.clear()
        self.outside: list[nn.Parameter] | None = None  # the clock's, outside its models
        self.backwards = 0  # backward calls since the clock's last step
        self.empty = 0  # steps in a row stepped after a backward with no gradients
        self.with_grad: torch.Tensor | None = None  # a parameter of the clock's with a gradient
        self.zero_steps_sampled = 0  # sampled steps in a row with only zero gradients
        # sampled steps with a loss of exactly 0 and zero gradients, from the clock's first;
        # -1 once one had a loss or a gradient
        self.zero_losses = 0
        self.orphans.reset()
        # ``units-identical``, read afresh at a new clock (a head made for a new phase)
        self.symmetry = IdenticalUnits(self._report)
        # (parameter, its gradient, the gradient's version) of the clock's parameters with a
        # gradient at the end of a sampled step, looked at again at its next step
        self.stepped_grads: list[tuple[nn.Parameter, weakref.ref[torch.Tensor], int]] = []
        self.stale = 0  # sampled steps in a row whose next step stepped gradients left over
        self.decayed = 0  # sampled steps in a row whose step decayed frozen parameters
        # this step's forwards with gradients: 1 train mode, 2 eval mode, 4 float16 autocast
        self.mode = 0
        self.sampled = False  # this step is sampled
        self.fp16 = 0  # sampled steps whose forwards ran under float16 autocast, unscaled
        # forwards in a row without gradients in train mode (-1: Monte Carlo sampling, not
        # judged until the next forward with gradients or step) and the last one's input
        self.no_grad_run = 0
        self._no_grad_input: weakref.ref[torch.Tensor] | None = None
        # forwards in a row in eval mode with gradients on and no backward between them
        self.eval_grad_run, self.eval_grad_site = 0, ""
        # forwards in a row in train mode with gradients on and no backward between them; from
        # the second, the autograd number before it and before the latest (``unused_graphs``)
        self.train_grad_run, self.train_grad_site = 0, ""
        self.run_floor = self.latest_floor = -1
        # of those, the ones a training loss followed, and the latest such (its number there);
        # from the second, their autograd numbers before them (``LOSS_FLOORS`` at most), and
        # the number before the first forward after 3 of them
        self.loss_forwards = self.loss_at = 0
        self.loss_floors: list[int] = []
        self.lost_floor = -1
        self.thrown = ThrownLosses()  # backwards in a row that left out forwards with a loss
        if not same_models:  # (the first reset, from __init__, never has the same models)
            self.train_steps, self.eval_steps, self.eval_since = 0, 0, 0
            self.phase_seq = 0  # the mode calls' count when the eval-mode phase began
            # steps before any forward was seen (the clock's first): in the mode of the next
            self.unseen = 0
            self.evaluated = False  # an evaluation of a model the clock trains since its last step
            self.train_after_eval = False  # a step in train mode followed an evaluation
            # the models were evaluated before their first step and trained in eval mode after
            self.evaluated_first = False
            # this eval-mode phase began with an eval() that an evaluation followed
            self.for_evaluation = False
        self.first = step + 1
        self.reported -= {"lr-collapsed"}

    # ------------------------------------------------------------------ from the doctor's hooks

    def forward(self, module: nn.Module, args: tuple[Any, ...] = ()) -> None:
        """A model the clock trains starts a forward; ``args``: its positional inputs."""
        self.ran = True
        if torch.is_grad_enabled():
            self.mode |= 1 if module.training else 2
            if not module.training:
                self.eval_grad_run += 1
                if self.eval_grad_run == EVAL_FORWARDS:  # the evaluation's line
                    self.eval_grad_site = sites.user_site()
            elif self.eval_grad_run:  # back to training with no backward since: an evaluation
                self._evaluated_with_gradients()
            if module.training:
                self._train_forward()
            if self.sampled and self.mode & 4 == 0 and _float16_autocast():
                self.mode |= 4
            self.no_grad_run, self._no_grad_input = 0, None
        elif module.training:
            first = next((a for a in args if isinstance(a, torch.Tensor)), None)
            last = self._no_grad_input() if self._no_grad_input is not None else None
            # Monte Carlo dropout: samples of one input, run again and again or as copies in one
            # batch (read only when the run would be named: a few host reads), where no batch
            # norm's running statistics move with them
            if first is not None and first is last and not _norms_move(module):
                self.no_grad_run = -1
            if self.no_grad_run < 0:
                return
            self.no_grad_run += 1
            self._no_grad_input = weakref.ref(first) if first is not None else None
            if self.no_grad_run == EVAL_FORWARDS and not _recalibrating(module):
                if first is not None and _copies(first) and not _norms_move(module):
                    self.no_grad_run = -1
                    return
                self._report(
                    slips.eval_in_train_mode(self.no_grad_run, _mode_dependent([module], True))
                )

    def forward_done(self, module: nn.Module, output: Any) -> None:
        """A model the clock trains returned ``output``: on a sampled step, float16 out of
        float32 weights is autocast entered inside its forward (``@autocast()`` on it)."""
        if self.sampled and torch.is_grad_enabled():
            if self.mode & 4 == 0 and _float16_out_of_float32(module, output):
                self.mode |= 4
            if module.training:
                self.returned.forward_done(output)

    def _train_forward(self) -> None:
        """A forward in train mode with gradients on: from the second in a row with no backward
        between, the autograd numbering is read before it (~5 us), so that the backward that
        ends the run can tell whether its graph reaches the forwards before the latest."""
        self.train_grad_run += 1
        if self.train_grad_run < 2:  # a new run (after a backward, or a step)
            self.loss_forwards = self.loss_at = 0
            return
        self.latest_floor = graphs.next_sequence_nr()
        if self.train_grad_run == 2:
            self.run_floor = self.latest_floor
            self.loss_floors, self.lost_floor = [], -1
        if self.lost_floor < 0 and self.loss_forwards >= LOST_FORWARDS:
            self.lost_floor = self.latest_floor  # the first forward after 3 with a loss
        if self.train_grad_run == EVAL_FORWARDS:
            self.train_grad_site = sites.user_site(2)

    def loss_computed(self) -> None:
        """A wrapped loss computed with gradients (a training loss), after the run's latest
        forward."""
        if self.train_grad_run != self.loss_at:
            self.loss_at = self.train_grad_run
            self.loss_forwards += 1
            if self.train_grad_run > 1 and len(self.loss_floors) < LOSS_FLOORS:
                self.loss_floors.append(self.latest_floor)

    def unused_graphs(self, loss: torch.Tensor, roots: list[nn.Module]) -> None:
        """A backward of ``loss`` ends a run of forwards in train mode with gradients on: where
        its graph reaches none of those before the latest, no backward used them. Where it
        reaches none of the first ``thrown.FORWARDS`` that a training loss followed (nor what
        came between them), their losses were thrown away (``thrown.py``: a backward after the
        loop over batches, or in a few in a row, a validation with its loss); else
        ``EVAL_FORWARDS`` or more were an evaluation outside ``no_grad`` and ``model.eval()``,
        or actions chosen with gradients on. A policy gradient's episode, a decoder called once
        a token, reach them all; a loss over two forwards reaches the one before the latest
        too, and is not judged."""
        before = self.train_grad_run - 1
        if before < LOST_FORWARDS:  # (a step of one forward: no call more)
            if self.thrown.thrown:
                self._validated(roots)
            return
        lossy = self.lost_floor >= 0  # a forward after 3 a training loss followed
        if not (lossy or before >= EVAL_FORWARDS) or self.run_floor < 0 or self.latest_floor < 0:
            self._validated(roots)
            return
        if "evaluation-with-gradients" in self.reported and self.thrown.said:
            return  # both said: no more walks of the graph
        until = self.lost_floor if lossy else self.latest_floor
        oldest = graphs.oldest_node(loss, floor=self.run_floor, until=until)
        if oldest is None or oldest <= until:  # it reaches them
            self._validated(roots)
        elif lossy:
            # the forwards with a loss that it left out: all but those from the one where its
            # graph starts (the loss it backpropagates follows that one)
            reached = 1 + sum(floor >= oldest for floor in self.loss_floors)
            lost = max(self.loss_forwards - reached, LOST_FORWARDS)
            self._report(self.thrown.threw(before, lost, self.train_grad_site))
        else:
            self._validated(roots)
            self._unused_in_train_mode(before, roots)

    def _validated(self, roots: Iterable[nn.Module]) -> None:
        """A backward threw no losses away, or the run ended: the few before it in a row that
        did were a validation with its loss, outside ``no_grad`` and ``model.eval()``."""
        if not self.thrown.thrown:
            return
        kept = self.thrown.kept()
        if kept is not None and kept[0] >= EVAL_FORWARDS:
            self._unused_in_train_mode(kept[0], roots, kept[1])

    def _unused_in_train_mode(
        self, forwards: int, roots: Iterable[nn.Module], where: str | None = None
    ) -> None:
        """``forwards`` in train mode with gradients on whose graphs no backward used; ``where``:
        the fifth's line (the current run's by default)."""
        found = slips.evaluation_with_gradients(forwards, _mode_dependent(roots, True))
        found.where = self.train_grad_site if where is None else where
        self._report(found, at_step=False)

    def _evaluated_with_gradients(self, at_step: bool = True) -> None:
        if self.eval_grad_run >= EVAL_FORWARDS:
            found = slips.evaluation_with_gradients(self.eval_grad_run)
            found.where = self.eval_grad_site
            self._report(found, at_step)
        self.eval_grad_run = 0

    def gradients_taken(self) -> None:
        """A backward (or ``torch.autograd.grad``) runs: the forwards before it needed their
        gradients (an adversarial attack made in eval mode, a saliency map), and training goes
        on between the no-grad forwards before and after it (a GAN's generator making fakes
        for each of the critic's steps), which an evaluation does not."""
        self.eval_grad_run = self.train_grad_run = 0
        self.no_grad_run, self._no_grad_input = 0, None

    def begin_step(self, sampled: bool) -> None:
        """The step's compute starts: on a sampled step, hook the probe parameters (another
        optimiser's from its next step: see ``other_step``)."""
        self.sampled = sampled
        if self.penalties.mode is not None:  # (a step of updates by hand has no backward)
            self.penalties.stop()
        if self.returned.pending:  # the sampled step before's, used by its backwards or not
            self.returned.step_ended()
        if sampled:
            for probe in self.probes.values():
                probe.arm()
            self.others_due = weakref.WeakSet(self.other_probes.keys())
            self._note_reading()

    def remove_hooks(self) -> None:
        for probe in (*self.probes.values(), *self.other_probes.values()):
            probe.disarm()
        self.reading = []

    def _note_reading(self) -> None:
        """After probes were armed or finished: the armed ones on FSDP's parameters."""
        probes = (*self.probes.values(), *self.other_probes.values())
        self.reading = [probe for probe in probes if probe.armed and probe.at_backward]

    def backward_called(self) -> None:
        """A backward is about to run, and probes on FSDP's parameters are armed, which no
        hook of theirs tells of it."""
        for probe in self.reading:
            probe.backward_called()

    def backward_returned(self) -> None:
        """That backward has returned."""
        for probe in self.reading:
            probe.backward_returned()

    def other_step(self, optimizer: torch.optim.Optimizer) -> None:
        """An optimiser other than the clock stepped (a GAN's other half): judge its probe's
        window, and probe the last of its parameters with a gradient. The window runs from
        one of its steps to the next, the first of those after a sampled step of the clock:
        every backward it steps on is in it, whether it steps on every clock step or on every
        k-th (accumulating over k of them)."""
        if self.frozen_streak is not None and self.frozen_streak[1]() is not optimizer:
            self.frozen_streak = None  # it trains what the all-frozen clock's backward reaches
        probe = self.other_probes.get(optimizer)
        self._restart_windows(probe)
        if probe is not None:
            for found in probe.finish():
                self._report(found)
        held = (p for g in reversed(optimizer.param_groups) for p in reversed(g["params"]))
        last = _first_with_grad(held)
        if last is not None and (probe is None or last is not probe.param):
            n = sum(len(g["params"]) for g in optimizer.param_groups)
            whose = f"another optimiser's parameters ({type(optimizer).__name__}, {n} tensors)"
            self.other_probes[optimizer] = probe = Probe(last, whose)
        if probe is not None and optimizer in self.others_due:
            probe.arm()
            self.others_due.discard(optimizer)
            self._note_reading()
        elif self.reading:  # (its probe may have finished)
            self._note_reading()

    def _restart_windows(self, *stepping: Probe | None) -> None:
        """An optimiser stepped (``stepping``: its probes, which finish): the other armed
        probes, the clock's and the other optimisers', start their windows again, the
        backwards so far having been its step's (block-coordinate descent: two optimisers
        over halves of one model stepping in turn, ``model.zero_grad()`` before each
        backward)."""
        for probe in (*self.probes.values(), *self.other_probes.values()):
            if probe.armed and not any(probe is done for done in stepping):
                probe.restart()

    def _choose_probes(
        self, optimizer: torch.optim.Optimizer, params: list[tuple[str, nn.Parameter]]
    ) -> None:
        """The parameters with a gradient now, for the next sampled step: the last of the
        models', their first (a zero_grad of the head alone leaves the rest adding up), and
        the last of those the optimiser holds outside them."""
        last = _first_with_grad(p for _, p in reversed(params))
        name, first = next(((n, p) for n, p in params if p.grad is not None), ("", None))
        for key, param, whose in (
            ("model", last, ""),
            ("first", None if first is last else first, f"part of the model ({name}, ...)"),
            (
                "outside",
                _first_with_grad(reversed(self._outside(optimizer, params))),
                # (a model of raw tensors has nothing else: they are the model)
                "a parameter outside the model" if params else "",
            ),
        ):
            probe = self.probes.get(key)
            if param is None:
                self.probes.pop(key, None)
            elif probe is None or probe.param is not param:
                self.probes[key] = Probe(param, whose, isinstance(optimizer, HandUpdates))

    def _outside(
        self, optimizer: torch.optim.Optimizer, params: list[tuple[str, nn.Parameter]]
    ) -> list[nn.Parameter]:
        if self.outside is None:  # once per clock
            inside = {id(p) for _, p in params}
            held = (p for g in optimizer.param_groups for p in g["params"])
            self.outside = [p for p in held if id(p) not in inside]
        return self.outside

    # ------------------------------------------------------------------ at the clock's step

    def end_step(
        self,
        step: int,
        sampled: bool,
        optimizer: torch.optim.Optimizer,
        roots: list[nn.Module],
        params: list[tuple[str, nn.Parameter]],
        graph: bool = False,
        loss: torch.Tensor | None = None,
    ) -> None:
        """After the clock's optimiser step ``step`` (``sampled``: the monitor sampled it);
        ``roots``: the models it trains, ``params`` their trained parameters; ``graph``: a
        backward of the step ran through an autograd graph, ``loss`` the step's loss."""
        if self.penalties.mode is not None:
            self.penalties.stop()
        said = set()
        by_hand = isinstance(optimizer, HandUpdates)
        held_back = None
        if self.other_probes:
            self._restart_windows(*self.probes.values())
        for key, probe in self.probes.items():
            for found in probe.finish():
                # Part of the model uncleared while its last layer was cleared: the whole
                # model's finding, when said, covers it.
                covered = ("model", found.code) in said or (
                    held_back is not None and found.code == held_back.code
                )
                if key == "first" and covered:
                    continue
                if key == "model" and found.code == "zero-grad-per-micro-batch":
                    held_back = found  # judged with the first layer's (below)
                    continue
                self._report(found)
                said.add((key, found.code))
        if held_back is not None:
            # The first layer's gradient carried over between this step's backwards while the
            # last layer's read as cleared before each: the last one's was exactly zero by
            # chance (a hinge loss's bias gradient, its terms cancelling), not zeroed.
            first = self.probes.get("first")
            if first is None or first.last_discarded is not False:
                self._report(held_back)
        if self.reading:
            self._note_reading()
        if sampled:
            self._choose_probes(optimizer, params)
        # A backward through a graph while the models this optimiser trains ran no forward
        # with gradients: frozen for now, on purpose, beside another optimiser that trains (a
        # backbone warmed up under no_grad beside a head with its own optimiser). Alone, it
        # is judged at the run's end (built over a teacher run under no_grad, not the student).
        # (A forward with gradients in eval mode counts: a frozen model in eval mode that a
        # prompt's gradients run through.)
        # Its models ran no forward with gradients: under no_grad, or not at all (replaced
        # by a new model, loaded from a checkpoint, which this optimiser does not hold).
        idle = graph and bool(roots) and not self.mode & 3
        stale, no_grad = not roots or (idle and not self.ran), idle and self.ran
        self.ran = False
        frozen = idle and not self._alone(optimizer)
        # Updates by hand are seen after the update, the gradients maybe cleared by then.
        if self.backwards and not frozen and not by_hand:
            self._note_gradients(optimizer, graph, step, no_grad, stale)
        if self.stepped_grads and not by_hand:
            self._note_stale(params)
        self.stepped_grads = []
        if sampled and not by_hand:
            # (FSDP2's backward adds into a DTensor gradient's part, not the DTensor)
            self.stepped_grads = [
                (p, weakref.ref(p.grad), local_part(p.grad)._version)
                for group in optimizer.param_groups
                for p in group["params"]
                if p.grad is not None
            ]
            if self.backwards and not frozen:
                self._note_zero_gradients([p.grad for p, *_ in self.stepped_grads], loss)
            self._note_frozen_decayed(optimizer, roots)
            self.symmetry.note(step - self.first + 1, optimizer, params)
            if self.teachers.models or self.teachers.seen:  # (no held set built for none)
                self.teachers.end_sampled_step(self._held(optimizer))
            self.teachers.frozen_norms(roots)
        if self.rates.unclocked and step == self.first:
            self.rates.adopt_cycles(optimizer)
        if step - self.first + 1 == ORPHAN_STEP:
            self.orphans.at_orphan_step(step, optimizer, roots, loss, by_hand)
        elif step - self.first + 1 > ORPHAN_STEP and sampled and not by_hand:
            self.orphans.later(step, optimizer, roots)
        self.backwards = 0
        self.no_grad_run, self._no_grad_input = 0, None
        self.eval_grad_run = self.train_grad_run = 0
        if self.mode & 4 and sampled:
            self._note_float16()
        self._note_mode(step, roots)
        self.rates.note(step, sampled, optimizer)

    def _note_gradients(
        self,
        optimizer: torch.optim.Optimizer,
        graph: bool,
        step: int,
        no_grad: bool = False,
        stale: bool = False,
    ) -> None:
        # The parameter that had a gradient last time first: a frozen backbone given to the
        # optimiser is not walked again on every step.
        if self.with_grad is not None and self.with_grad.grad is not None:
            self.empty = 0
            return
        wanted = held = False
        for group in optimizer.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    self.empty, self.with_grad = 0, p
                    return
                wanted |= p.requires_grad
                held = True
        # All frozen (staged unfreezing): no step is expected to change them, while another
        # optimiser trains. With none, a backward through a graph trains nothing that steps.
        if not wanted and not (graph and self._alone(optimizer)):
            return
        self.empty += 1
        if self.empty == EMPTY_STEPS:
            found = slips.step_without_gradients(
                self.empty,
                stale=stale,
                streak=EMPTY_STEPS,
                frozen=not wanted,
                no_grad=no_grad,
                empty=not held,
            )
            if found is not None and (not wanted or no_grad):  # judged at the run's end
                found.where, found.step = sites.user_site(), step
                self.frozen_streak = self.frozen_streak or (found, weakref.ref(optimizer))
                return
            self._report(found)

    def _note_zero_gradients(
        self, stepped: list[torch.Tensor | None], loss: torch.Tensor | None = None
    ) -> None:
        """A sampled step after a backward, ``stepped`` the gradients its optimiser's
        parameters had: those of the first and last ``ZERO_LOOKED_AT`` (dense, plain tensors)
        are all zero (one host read), on ``ZERO_STEPS_SAMPLED`` sampled steps in a row: they
        were zeroed in place after the backward, and each step applies none of them. Not where
        the step's ``loss`` is exactly zero, or the probes' parameters were brought zeros by
        the backward itself: it gave those zeros (a cross-entropy saturated by logits that grew
        without bound, which ``activation-growth`` names; a policy's head at zero before its
        first reward, every advantage 0)."""
        grads = [g for g in stepped if type(g) is torch.Tensor and g.layout == torch.strided]
        if not grads:
            return
        looked = grads[:ZERO_LOOKED_AT] + grads[ZERO_LOOKED_AT:][-ZERO_LOOKED_AT:]
        brought = [p.brought for p in self.probes.values() if p.brought is not None]
        with torch.no_grad():
            flags = torch.stack([*(g.any() for g in looked), *(b > 0 for b in brought)]).tolist()
            if any(flags[: len(looked)]):
                self.zero_steps_sampled, self.zero_losses = 0, -1
                return
            if isinstance(loss, torch.Tensor) and loss.numel() == 1 and float(loss) == 0.0:
                self.zero_steps_sampled = 0
                self.zero_losses += self.zero_losses >= 0
                return
            if brought and not any(flags[len(looked) :]):
                self.zero_steps_sampled, self.zero_losses = 0, -1
                return
        self.zero_losses = -1
        self.zero_steps_sampled += 1
        if self.zero_steps_sampled == ZERO_STEPS_SAMPLED:
            self._report(
                slips.step_without_gradients(
                    self.zero_steps_sampled, False, ZERO_STEPS_SAMPLED, zeros=True
                )
            )

    def _judge_zero_losses(self) -> None:
        """The clock's run ended: a loss of exactly 0 with zero gradients on every sampled step
        of it, ``ZERO_STEPS_SAMPLED`` or more (a loss that saturated later had other values)."""
        if self.zero_losses < ZERO_STEPS_SAMPLED:
            return
        # Every step's, not the sampled ones' alone: labelled batches that come once in as
        # many steps as the sampling interval, each between two sampled steps, train.
        if all(v == 0 or v != v for v in self._run_losses()):
            self._report(slips.loss_zero(self.zero_losses), at_step=False)

    def _run_losses(self) -> Sequence[float]:
        """The loss of every step of the clock's run so far (the monitor's series)."""
        return self.losses_since(self.first) if self.losses_since is not None else []

    def _note_stale(self, params: list[tuple[str, nn.Parameter]]) -> None:
        """The clock's step after a sampled one, after a backward: the gradients noted then
        that are still there, the same tensors unchanged (no backward wrote them, no zero_grad
        cleared them), were stepped again. ``params``: the trained models' (for their names)."""
        if not self.backwards:  # (a wrapper stepping its inner optimiser: no backward between)
            return
        stale = [
            p
            for p, grad, version in self.stepped_grads
            if p.grad is not None and p.grad is grad() and local_part(p.grad)._version == version
        ]
        self.stale = self.stale + 1 if stale else 0
        if self.stale == STALE_STEPS:
            names = {id(p): name for name, p in params}
            said = [names.get(id(p), f"a {list(p.shape)} parameter") for p in stale]
            self._report(slips.gradients_stepped_again(said, sum(p.numel() for p in stale)))

    def _note_frozen_decayed(
        self, optimizer: torch.optim.Optimizer, roots: list[nn.Module]
    ) -> None:
        """A sampled step of the clock: the frozen parameters (``requires_grad=False``) that it
        stepped all the same. An optimiser skips a parameter whose ``.grad`` is None, not one
        that is frozen: one frozen after it had a gradient, its gradient zeroed in place
        (``zero_grad(set_to_none=False)``) rather than cleared, is still stepped, and weight
        decay then shrinks it on every step whatever its gradient."""
        decayed = [
            (p, group)
            for group in optimizer.param_groups
            if group.get("weight_decay") and group.get("lr") != 0
            for p in group["params"]
            if not p.requires_grad and p.grad is not None
        ]
        self.decayed = self.decayed + 1 if decayed else 0
        if self.decayed == FROZEN_STEPS:
            names = {id(p): name for root in roots for name, p in root.named_parameters()}
            said = [names.get(id(p), f"a {list(p.shape)} parameter") for p, _ in decayed]
            decay = max(float(group["weight_decay"]) for _, group in decayed)
            values = sum(p.numel() for p, _ in decayed)
            self._report(
                slips.frozen_weights_decayed(said, values, decay, type(optimizer).__name__)
            )

    def _alone(self, optimizer: torch.optim.Optimizer) -> bool:
        """No optimiser but ``optimizer`` has stepped in the run."""
        return all(o is optimizer for o in self.optimizers)

    def _held(self, optimizer: torch.optim.Optimizer) -> set[int]:
        """Ids of the parameters of the clock's optimiser and of every other that stepped."""
        return {
            id(p)
            for opt in (optimizer, *self.optimizers)
            for group in opt.param_groups
            for p in group["params"]
        }

    def _note_float16(self) -> None:
        # The loss is scaled before its backward, so by the step it has been seen.
        if not self.scalers.scaled():
            self.fp16 += 1
            if self.fp16 == FP16_STEPS:
                self._report(slips.fp16_without_loss_scaling(self.fp16))

    def _note_mode(self, step: int, roots: list[nn.Module]) -> None:
        mode, self.mode = self.mode, 0
        if not mode:  # no forward with gradients seen (the clock's first step): nothing to judge
            self.unseen += not (self.train_steps or self.eval_steps)
            return
        evaluated, self.evaluated = self.evaluated, False
        unseen, self.unseen = self.unseen, 0
        if mode & 1:
            self.train_steps += 1 + unseen  # its first steps ran in train mode too
            self.eval_steps = 0
            self.train_after_eval |= evaluated
        elif mode & 2:
            self.evaluated_first |= evaluated and not self.train_steps
            if not self.eval_steps:  # the phase starts: was its eval() for an evaluation?
                self.eval_since, self.phase_seq = step - unseen, self.seq  # (its first steps)
                last_call_eval = self.eval_call > self.train_call
                self.for_evaluation = last_call_eval and self.evaluation_seq > self.eval_call
            self.eval_steps += 1 + unseen
            # model.train() called in this phase, and an eval() after it before the forwards:
            # train mode asked for and undone each time (an attack helper's eval(), say).
            undone = self.phase_seq < self.train_call < self.eval_call
            # A script that went back to train mode after an evaluation knows to: a later
            # eval-mode phase is on purpose, unless the eval() that began it was for an
            # evaluation too (a second evaluation path that forgets train()).
            judged = (self.train_steps or self.evaluated_first) and (
                not self.train_after_eval or self.for_evaluation
            )
            # A dropout or batch norm layer put back in train mode under a model in eval mode
            # (batch norm frozen by model.eval(), dropout turned on again) is a mode set layer
            # by layer, on purpose: model.eval() for an evaluation leaves none of them so.
            due = (self.eval_steps == EVAL_STEPS and judged) or (
                undone and self.eval_steps >= EVAL_STEPS
            )
            due = due and "train-in-eval-mode" not in self.reported  # (a walk of the modules)
            if due and not _mode_dependent(roots, True):
                found = slips.train_in_eval_mode(
                    self.train_steps,
                    self.eval_steps,
                    self.eval_since,
                    _mode_dependent(roots),
                    evaluated_first=self.evaluated_first,
                    undone=undone,
                )
                if found is not None and self.eval_call > self.train_call and self.eval_site:
                    found.where = self.eval_site  # the eval() never undone
                self._report(found)

    def finish(self, step: int, roots: Sequence[nn.Module] = ()) -> None:
        self._evaluated_with_gradients(at_step=False)  # the script's last evaluation
        self._validated(roots)
        # The script's last forwards ran in train mode with gradients, no backward after them:
        # a final evaluation with neither model.eval() nor no_grad, unless a loss followed them
        # in a loop that throws its losses away (the last epoch's batches after its backward).
        lost = self.thrown.said and self.loss_forwards >= LOST_FORWARDS
        if self.train_grad_run >= EVAL_FORWARDS and not lost:
            self._unused_in_train_mode(self.train_grad_run, roots)
        if self.frozen_streak is not None:  # no other optimiser stepped after it
            self._report(self.frozen_streak[0], at_step=False)
            self.frozen_streak = None
        self.rates.finish(step)
        self._judge_zero_losses()
        self.orphans.finish()
        self._report(self.teachers.finish(), at_step=False)
        self._report(self.averages.finish(), at_step=False)
        self.returned.step_ended()
        self._report(self.returned.finish(), at_step=False)

    def _report(self, found: Finding | None, at_step: bool = True) -> None:
        """``at_step``: called from the optimiser's step, whose line in the script is where."""
        if found is not None and found.code not in self.reported:
            self.reported.add(found.code)
            found.where = found.where or (sites.user_site() if at_step else "")
            self.add(found)


def _float16_autocast() -> bool:
    """Float16 autocast is on (on a GPU, or on the CPU, where it runs too)."""
    return any(
        torch.is_autocast_enabled(device) and torch.get_autocast_dtype(device) is torch.float16
        for device in ("cuda", "cpu")
    )


def _float16_out_of_float32(module: nn.Module, output: Any) -> bool:
    """The first tensor of ``output`` is float16 while ``module``'s weights are float32: mixed
    precision (a model cast to float16 as a whole trains without a loss scaler's help, and is
    not this)."""
    if isinstance(output, dict):
        output = next(iter(output.values()), None)
    elif isinstance(output, tuple | list):
        output = output[0] if output else None
    if not isinstance(output, torch.Tensor) or output.dtype is not torch.float16:
        return False
    weight = next(module.parameters(), None)
    return weight is not None and weight.dtype is torch.float32


def _first_with_grad(params: Iterable[nn.Parameter]) -> nn.Parameter | None:
    """The first of ``params`` with a gradient, one of more than one value if any has one: a
    one-value bias's gradient can be exactly zero by chance (a hinge loss's terms cancel,
    +1 for each fake, -1 for each real), which a probe reads as cleared."""
    first = None
    for p in params:
        if p.grad is not None:
            if p.numel() > 1:
                return p
            first = first if first is not None else p
    return first


def _copies(x: torch.Tensor) -> bool:
    """``x``'s rows are copies of fewer rows, each repeated in a run
    (``repeat_interleave(T, 0)``) or the whole batch tiled (``repeat(T, 1)``): samples of
    one input batched into one forward. A few host reads."""
    n = x.shape[0] if x.dim() else 0
    if n < 2 or checks.untraceable(x) or not checks.dense(x):
        return False
    rows = x.detach().reshape(n, -1)
    same = (rows == rows[0]).all(1)  # [n]: rows equal to the first
    if not bool(same[1:].any()):
        return False
    run = int(same.int().cumprod(0).sum())  # copies of the first row in a run
    period = int(same[1:].int().argmax()) + 1  # where the first row comes again
    if 1 < run <= n and n % run == 0:  # (every row one: a single input's copies)
        runs = rows.view(n // run, run, -1)
        return bool((runs == runs[:, :1]).all())
    if 1 < period < n and n % period == 0:
        tiles = rows.view(n // period, period, -1)
        return bool((tiles == tiles[:1]).all())
    return False


def _norms_move(model: nn.Module) -> bool:
    """Batch norm in train mode whose running statistics a forward moves."""
    return any(
        isinstance(m, nn.modules.batchnorm._BatchNorm)
        and m.training
        and m.track_running_stats
        and m.momentum is not None
        for m in model.modules()
    )


def _recalibrating(model: nn.Module) -> bool:
    """Batch norm with ``momentum=None`` (a cumulative average): its statistics are being
    recomputed on purpose, in train mode without gradients (``swa_utils.update_bn``)."""
    return any(
        isinstance(m, nn.modules.batchnorm._BatchNorm) and m.momentum is None
        for m in model.modules()
    )


def _mode_dependent(roots: Iterable[nn.Module], training: bool = False) -> list[str]:
    """Layers in eval mode (``training``: in train mode) that compute differently in the
    other: dropout with p > 0 (a layer's own, or an RNN's between its layers, or attention's
    on its weights) and batch or instance norm that keeps running statistics."""
    names = []
    for i, root in enumerate(roots):
        for name, m in root.named_modules():
            if m.training != training:
                continue
            kind = type(m).__name__
            if isinstance(m, nn.modules.dropout._DropoutNd) and m.p > 0:
                what = kind
            elif isinstance(m, nn.modules.batchnorm._NormBase) and m.track_running_stats:
                what = kind
            elif isinstance(m, nn.RNNBase) and m.dropout > 0 and m.num_layers > 1:
                what = f"{kind} with dropout={m.dropout:g} between its layers"
            elif isinstance(m, nn.MultiheadAttention) and m.dropout > 0:
                what = f"{kind} with dropout={m.dropout:g} on its weights"
            else:
                continue
            label = name or type(root).__name__
            names.append(f"{(f'model{i}.' if i else '') + label} ({what})")
    return names
