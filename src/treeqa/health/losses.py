"""Look at what goes into the loss functions of ``torch.nn.functional`` (the nn losses call them).

The functions are wrapped for the run. On sampled steps: the input of ``cross_entropy``,
``nll_loss`` and ``kl_div`` is checked for probabilities (non-negative rows summing to 1, i.e. softmax output
where logits belong) and, where it comes from a log_softmax, for one over the wrong dim (the
batch); that of ``nll_loss`` for values above 0 (logits where log-probabilities
belong), that of ``binary_cross_entropy_with_logits`` for a sigmoid's output, and the shapes of
the elementwise regression losses for a broadcast (prediction [N, 1] against target [N]). The
first cross-entropy of the run (``nll_loss`` over a ``log_softmax`` across the classes counts) is
compared with log(C), and a token loss over the model's own
vocabulary has its targets looked at for its Embedding's padding id (``padding-in-loss``), and
``ctc_loss``'s targets for the blank or an index out of range (``ctc-targets-invalid``).
On every step the targets of ``cross_entropy`` and ``nll_loss`` are handed to the loaders'
check (``loader-not-shuffled``), which reads them only while a loader that does not shuffle
is in use.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any, TypeGuard

import torch
from torch import nn
from torch.nn import functional as F

from treeqa.health import (
    bounded_logits,
    checks,
    class_weights,
    leaks,
    loss_inputs,
    loss_levels,
    processes,
    ranges,
    sites,
    squashed,
    target_scales,
    twice,
)
from treeqa.health.findings import Finding
from treeqa.health.priors import LabelCounts, TargetMoments
from treeqa.health.resumes import Resumes
from treeqa.health.wrap import Wrappers, note_function_calls, note_function_results

KL_FIX = (
    "pass log_softmax(student_logits / T, dim=-1) as kl_div's input (the target stays "
    "probabilities, or log-probabilities with log_target=True)"
)
CLASSIFICATION = ("cross_entropy", "nll_loss", "binary_cross_entropy_with_logits", "kl_div")
LOG_PROBABILITIES_LAST = ("ctc_loss",)
"""Losses of log-probabilities [T, N, C] (or [T, C]) over the classes of the last dimension."""
BINARY = ("binary_cross_entropy",)
"""Losses of probabilities against targets in [0, 1] (the one of logits is in
``CLASSIFICATION``)."""
ELEMENTWISE = ("mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss")
"""Losses of an input against a target of the same shape (torch broadcasts, with a warning)."""
VOCABULARY = 50
"""The fewest ids an Embedding needs for its padding id to be looked for in loss targets."""
INFEASIBLE_SHARE, INFEASIBLE_STEPS = 0.5, 3
"""Sampled steps in a row on which at least this share of a ``ctc_loss`` batch has targets too
long for its input, zeroed by ``zero_infinity=True``: more than the few it is there for."""
ZEROED_BACKWARDS = 5
"""Backwards, each with a term of the loss times the integer 0, for ``loss-term-zeroed``."""
IN_BATCH_CALLS = 3
"""Cross-entropies over in-batch similarities on sampled steps, each with one target for every
row, for ``in-batch-targets-constant`` (every such call of the run)."""
PADDED_SHARE = 0.1
"""Targets that hold ``ignore_index`` yet have the padding id as this share or more of them,
more than the ignored, still have their padding in the loss."""
MARGIN_ROWS, MARGIN_SHARE = 8, 0.8
"""A first cross-entropy far above log(C) whose target logits sit below their rows' mean on
this share of this many rows or more is a margin softmax's, by design, not ``loss-at-init``."""
MARGIN_Z_ROWS, MARGIN_Z = 32, -0.5
"""Or, over this many rows or more, whose target logits sit this many of their rows' standard
deviations below the rows' means, on average: a small margin against a wide spread of cosines
(CosFace at s=16, m=0.2: -1.0 to -1.3 on 64 rows, below the mean on 80-91% of them); a plain
head's average is within about 0.15 of 0 there."""


class LossInputCheck:
    """``active()``: look at this call (a sampled step, not eval); ``at_init()``: no step done
    yet; ``targets``: given the target of every ``cross_entropy`` and ``nll_loss`` call, the loss
    it made, its ``ignore_index`` and its input (the loaders' ``note_target``, which returns at
    once unless it needs it; more in ``.targets``); ``.backwards``: given the autograd node of
    each sampled step's backward loss, constant factors walked back
    (``loss_inputs.unscaled``)."""

    def __init__(
        self,
        add: Callable[[Finding], None],
        active: Callable[[], bool],
        at_init: Callable[[], bool],
        targets: Callable[[Any, torch.Tensor, Any, Any], None] | None = None,
    ):
        self.add, self.active, self.at_init = add, active, at_init
        self.targets = [] if targets is None else [targets]  # (a check may add its own)
        # told of each training loss's target on a sampled step (``pairing.py``)
        self.trained_targets: list[Callable[[Any, Any], None]] = []
        # told of what each loss scores, on a sampled step: (its input, "F.<name>")
        self.fed: list[Callable[[Any, str], None]] = []
        # told of each loss computed with gradients, on every step (``thrown.py``)
        self.graded: Callable[[], None] | None = None
        self.paddings: dict[int, int] = {}  # see watch
        self.first_seen = False
        self.multi_hot_said = False  # multi-hot-into-cross-entropy, said once
        # cross-entropies over in-batch similarities: calls, those with one target (the same
        # each time), that target, the rows (see _in_batch_targets)
        self.in_batch: tuple[int, int, int | None, int] = (0, 0, None, 0)
        self.in_batch_site = ""  # the first such call's line
        # backwards so far, each with a term times the integer 0 (``note_zeroed``), until
        # one without
        self.zeroed, self.zeroed_open = 0, True
        # A margin softmax (CosFace, ArcFace) at the first cross-entropy: its loss is above
        # log(C) by design, its level no sign of learning nothing (no loss-at-chance)
        self.margin = False
        self.loaded = False  # a model loaded trained weights: its first loss is no init's
        self.resumes: Resumes | None = None  # the doctor's: checkpoints and modules loaded
        # told of each module a load_state_dict loaded, or torch.load returned, and its line
        self.modules_loaded: list[Callable[[nn.Module, str], None]] = []
        # (id, classes, autograd node, scale) of the last mean cross-entropy with gradients on
        # a sampled step: the monitor tells whether it is the step's loss (``loss-at-chance``,
        # ``loss-diverged``); ``backward`` whether the loss a backward is given stands for it,
        # and the factor that loss is the mean's value times (1/k under accumulation over k;
        # a sum's: the targets it adds up, divided by what the loss is divided by).
        self.cross_entropy: tuple[int, int, Any, float] | None = None
        # every such cross-entropy of the sampled step: its node -> (classes, scale), for a
        # loss that adds several up (``_sum_of_cross_entropies``)
        self.cross_entropies: dict[Any, tuple[int, float]] = {}
        # a log-likelihood the loss minimises (``log-likelihood-minimised``), held until the
        # step's optimiser is known: one that maximises is right to (``take_minimised``)
        self.minimised: Finding | None = None
        self.minimised_said = False
        # the factor of each backward loss of the sampled step over its cross-entropy's mean
        # (NaN: no cross-entropy): the factor of their sum, where a step accumulates
        self.factors: list[float] = []
        # (id, function, autograd node, scale) of the last regression loss (``ELEMENTWISE``)
        # with gradients on a sampled step, one value: the same for ``loss-diverged`` under
        # maximize.
        self.regression: tuple[int, str, Any, float] | None = None
        # sampled steps in a row whose loss was the mean cross-entropy times the number of
        # processes (-1 once said: ``loss-times-processes``)
        self.times_processes = 0
        # Rows whose per-example cross-entropy was computed without gradients on this sampled
        # step (the monitor clears it at the step's end): a mean cross-entropy with gradients
        # over fewer rows trains on examples picked by their loss (hard-example mining), whose
        # level says nothing of the model's.
        self.scored = 0
        # (infeasible, samples) of ctc_loss calls with zero_infinity=True on the sampled steps
        # in a row where half the batch or more was infeasible
        self.infeasible: list[tuple[int, int]] = []
        self.labels = LabelCounts()  # the training cross-entropies' targets, by class count
        # the class counts of the noted cross-entropy's targets (``LabelCounts.batch``)
        self.batch_labels: torch.Tensor | None = None
        self.moments = TargetMoments()  # the training mean squared errors' targets
        # the noted regression loss's target sums (``TargetMoments.batch``), micro-batches added
        self.batch_moments: tuple[tuple[int, ...], int, torch.Tensor] | None = None
        self.ranges = ranges.OutputRanges(add)  # ``targets-outside-output-range``
        self.scales = target_scales.TargetScales(add)  # ``targets-not-scaled``
        self.bounded = bounded_logits.BoundedLogits(add)  # ``logits-bounded``
        self.leaks = leaks.FeatureLeaks(add)  # ``target-in-features``: given inputs by the doctor
        self.backwards: list[Callable[[Any], None]] = [self.leaks.backward]
        self.twice = twice.AveragedTwice(add)  # ``loss-averaged-twice``
        self.weights = class_weights.ClassWeights(add)  # ``class-weights-by-frequency``
        self.wrappers = Wrappers()

    def watch(self, modules: Iterable[nn.Module]) -> None:
        """The watched models' modules: for ``padding-in-loss``, the padding ids of their
        Embeddings that a Linear layer predicts over (an output head of the same size), by
        vocabulary size. At least ``VOCABULARY`` ids: not a categorical feature's few values,
        whose count a classifier's classes may share; and a head, so that pointer logits over
        positions are not taken for tokens when a batch is as long as a vocabulary."""
        modules = list(modules)
        heads = {m.out_features for m in modules if isinstance(m, nn.Linear)}
        self.paddings = {
            m.num_embeddings: m.padding_idx
            for m in modules
            if isinstance(m, nn.Embedding)
            and m.padding_idx is not None
            and m.num_embeddings >= VOCABULARY
            and m.num_embeddings in heads
        }

    def install(self) -> None:
        for fname in (*CLASSIFICATION, *BINARY, *LOG_PROBABILITIES_LAST, *ELEMENTWISE):
            self.wrappers.add(note_function_results(F, fname, self._called))
        self.wrappers.add(
            note_function_results(
                nn.Module, "load_state_dict", self._load_returned, before=self._loaded
            )
        )
        # A whole model saved with torch.save(model) comes back trained without a
        # load_state_dict call (torch.jit.load likewise), alone or in a checkpoint dict.
        self.wrappers.add(note_function_results(torch, "load", self._torch_loaded))
        self.wrappers.add(note_function_results(torch.jit, "load", self._torch_loaded))
        self.wrappers.add(note_function_calls(torch, "save", self._torch_saving))
        try:  # (a dependency of treeqa, and of the transformers Trainer's checkpoints)
            import safetensors.torch
        except ImportError:
            pass
        else:
            self.wrappers.add(
                note_function_results(safetensors.torch, "load_file", self._safetensors_loaded)
            )
            # (transformers' from_pretrained reads its weights through safe_open, imported
            # from safetensors when the script imports transformers, after this)
            self.wrappers.add(note_function_calls(safetensors, "safe_open", self._opened))

    def _loaded(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """``module.load_state_dict(state_dict)``."""
        self.loaded = True
        if self.resumes is not None and args:
            self.resumes.module_loaded(
                args[0],
                args[1] if len(args) > 1 else kwargs.get("state_dict"),
                args[2] if len(args) > 2 else kwargs.get("strict", True),
            )

    def _load_returned(
        self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any], result: Any
    ) -> None:
        """``module.load_state_dict(state_dict)`` has loaded it."""
        if args and self.modules_loaded:
            where = sites.user_site()
            for note in self.modules_loaded:
                note(args[0], where)

    def _torch_loaded(
        self, fname: str, args: tuple[Any, ...], kwargs: dict[str, Any], result: Any
    ) -> None:
        values = result.values() if isinstance(result, dict) else (result,)
        modules = [v for v in values if isinstance(v, nn.Module)]
        if modules:
            self.loaded = True
            where = sites.user_site()
            for note in self.modules_loaded:
                for module in modules:
                    note(module, where)
        if self.resumes is not None:
            self.resumes.checkpoint(result, args[0] if args else kwargs.get("f"))

    def _torch_saving(self, fname: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """``torch.save(obj, f)``, before it writes."""
        if self.resumes is not None:
            self.resumes.saved_to(
                args[0] if args else kwargs.get("obj"),
                args[1] if len(args) > 1 else kwargs.get("f"),
            )

    def _safetensors_loaded(
        self, fname: str, args: tuple[Any, ...], kwargs: dict[str, Any], result: Any
    ) -> None:
        """safetensors' ``load_file(filename)``: a dict of weights, as ``torch.load``'s."""
        if self.resumes is not None:
            self.resumes.checkpoint(result, args[0] if args else kwargs.get("filename"))

    def _opened(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """safetensors' ``safe_open(filename, ...)``: a file of weights read tensor by tensor."""
        if self.resumes is not None:
            self.resumes.opened(args[0] if args else kwargs.get("filename"))

    def backward(self, loss: torch.Tensor) -> None:
        """A backward of ``loss`` on a sampled step: where it is the noted cross-entropy (or
        regression loss) divided by a constant of 1 or more (the accumulation steps, as
        accelerate and the transformers ``Trainer`` hand it on), or multiplied by one up to the
        number of processes, it stands for that loss as the step's loss, its value that loss's
        times the factor (``_standing_for``); a mean times the processes is
        ``loss-times-processes``."""
        node, scale = loss_inputs.unscaled(loss)
        for note in self.backwards:
            note(node)
        self.twice.backward(loss.grad_fn, node, scale)
        if self.minimised is None and node is not None:  # judged at the step (``maximize``)
            form = loss_inputs.minimised_log_likelihood(node)
            if form is not None:
                self.minimised = _minimised(form, sites.user_site(2))
        summed = self._sum_of_cross_entropies(loss, node, scale)
        self.cross_entropy = summed or _standing_for(self.cross_entropy, loss, node, scale)
        if (self.cross_entropy is None or self.cross_entropy[0] != id(loss)) and node is not None:
            self._cross_entropy_by_hand(loss, node, scale)
            self._soft_cross_entropy(loss)
        self.regression = _standing_for(self.regression, loss, node, scale)
        if self.cross_entropy is not None and self.cross_entropy[0] == id(loss):
            self._times_processes(self.cross_entropy[3])
            self.factors.append(self.cross_entropy[3])
        else:
            self.factors.append(math.nan)

    def note_zeroed(self, loss: torch.Tensor) -> None:
        """A backward of ``loss`` (every one, while ``zeroed_open``): counted if a term of it
        is multiplied by the integer 0; the first without such a term ends the count (the
        finding needs every backward of the run: a lazy regulariser weighted
        ``int(step % 16 == 8)`` trains on its steps, which sampling may miss)."""
        node, _ = loss_inputs.unscaled(loss)
        if node is None or not loss_inputs.zeroed_terms(node):
            self.zeroed_open = False
            return
        self.zeroed += 1

    def take_run_end(self) -> list[Finding]:
        """The run ended: ``loss-term-zeroed`` where every backward's loss (5 or more) had a
        term multiplied by the integer 0; ``in-batch-targets-constant`` where every
        cross-entropy over in-batch similarities on sampled steps (3 or more) had one and
        the same target for every row (a class that most batches hold alone, over as many
        classes as a batch has rows, had other targets some of the time); and
        ``class-weights-by-frequency`` where the weights judged are still the latest."""
        found = []
        if self.zeroed_open and self.zeroed >= ZEROED_BACKWARDS:
            found.append(loss_inputs.loss_term_zeroed(self.zeroed))
        weighted = self.weights.take_run_end()
        if weighted is not None:
            found.append(weighted)
        calls, constant, value, rows = self.in_batch
        if calls >= IN_BATCH_CALLS and constant == calls and value is not None:
            found.append(loss_inputs.in_batch_targets_constant(rows, value, calls))
            found[-1].where = self.in_batch_site
        return found

    def take_minimised(self, optimizer: torch.optim.Optimizer) -> Finding | None:
        """The step's ``log-likelihood-minimised``, if any, unless ``optimizer`` maximises
        (``maximize=True`` climbs the log-likelihood it is given, as it should); once."""
        found, self.minimised = self.minimised, None
        if found is None or self.minimised_said:
            return None
        if any(group.get("maximize") is True for group in optimizer.param_groups):
            return None
        self.minimised_said = True
        return found

    def _cross_entropy_by_hand(self, loss: torch.Tensor, node: Any, scale: float) -> None:
        """``loss`` (``node``: its node, ``scale`` walked back) is a mean cross-entropy written
        by hand (``loss_inputs.cross_entropy_by_hand``): it stands as the step's, its targets
        counted as a cross-entropy's are."""
        found = loss_inputs.cross_entropy_by_hand(node)
        if found is None or scale > processes.world_size():
            return
        classes, target = found
        self.cross_entropy = (id(loss), classes, None, scale)
        self.labels.add(target, classes, None, 0.0)
        self.batch_labels = self.labels.batch(target, classes, None)

    def _soft_cross_entropy(self, loss: torch.Tensor) -> None:
        """``softmax-over-wrong-dim`` for a cross-entropy against soft targets written by hand
        (``loss_inputs.soft_cross_entropies``) whose log-softmax normalises over another dim
        than the one its targets sum to 1 over, their classes: ``-q * log_softmax(x, dim=0)``
        of targets whose rows over dim 1 are distributions. Targets that sum to 1 over no dim
        (weighted, or of more than one label) are not judged, nor ones that do over every dim
        (an identity's: in-batch contrastive targets)."""
        for shape, dim, targets, divided in loss_inputs.soft_cross_entropies(loss.grad_fn):
            if not divided:
                self._multi_hot(targets, dim, "a cross-entropy by hand, -q * log_softmax(x)", True)
            classes = loss_inputs.summing_to_one(targets)
            if not classes or dim in classes:
                continue
            over = classes[0]
            others = "examples" if dim == 0 else "positions"
            self.add(
                Finding(
                    "softmax-over-wrong-dim",
                    "error",
                    f"a cross-entropy written by hand, -q * log_softmax(x, dim={dim}), "
                    f"normalises over dim {dim} of a {shape} tensor (size {shape[dim]}), while "
                    f"its targets q are distributions over dim {over} (size {shape[over]}), the "
                    f"classes: each class's scores are normalised against the other {others}, "
                    "not the other classes",
                    where=sites.user_site(2),
                    evidence={"function": "by hand", "shape": shape, "dim": dim, "classes": over},
                )
            )
            return

    def _multi_hot(
        self, targets: torch.Tensor, dim: int, function: str, binary: bool = False
    ) -> None:
        """``multi-hot-into-cross-entropy`` for soft targets over the classes' ``dim``; once."""
        if self.multi_hot_said:
            return
        found = loss_inputs.multi_hot(targets, dim, function, binary)
        if found is not None:
            self.multi_hot_said = True
            found.where = sites.user_site()
            self.add(found)

    def _sum_of_cross_entropies(
        self, loss: torch.Tensor, node: Any, scale: float
    ) -> tuple[int, int, Any, float] | None:
        """``cross_entropy`` for a loss that adds up two or more of the step's cross-entropies
        over the same classes, each times a constant of at most 1 (CLIP's symmetric loss,
        ``(ce(logits, i) + ce(logits.T, i)) / 2``): a mean of cross-entropies over C classes,
        at chance where each is; its factor the terms' summed. None for any other loss. The
        nodes are let go here: held on, they would keep the graph's saved tensors."""
        noted, self.cross_entropies = self.cross_entropies, {}
        if len(noted) < 2 or type(node).__name__ != "AddBackward0":
            return None
        terms = loss_inputs.summed_terms(node)
        if not terms or any(n not in noted or k > 1 for n, k in terms):
            return None
        classes = {noted[n][0] for n, _ in terms}
        if len(classes) != 1 or scale > processes.world_size():
            return None
        return (id(loss), classes.pop(), None, scale * sum(noted[n][1] * k for n, k in terms))

    def _times_processes(self, factor: float) -> None:
        """The loss a backward of a sampled step is given is this process's mean cross-entropy
        times the number of processes (``factor``: what it is that mean times), on
        ``TIMES_PROCESSES_STEPS`` such steps in a row. DDP and FSDP average the processes'
        gradients, so each step takes that many times the mean's: the factor that is right for
        a sum over the targets divided by every process's count is wrong for a mean of one's own
        (the transformers ``Trainer`` multiplies any loss of a model that takes loss keyword
        arguments, BERT's mean among them)."""
        world = processes.world_size()
        if world < 2 or self.times_processes < 0:
            return
        if abs(factor / world - 1) > 0.01:
            self.times_processes = 0
            return
        self.times_processes += 1
        if self.times_processes < TIMES_PROCESSES_STEPS:
            return
        self.times_processes = -1  # said once
        self.add(
            Finding(
                "loss-times-processes",
                "warning",
                f"the loss given to backward is this process's mean cross-entropy times "
                f"{world}, the number of processes, on {TIMES_PROCESSES_STEPS} sampled steps "
                f"in a row: DDP averages the processes' gradients, so each step takes {world}x "
                "the gradient of the mean over the whole batch (and a loss logged from it reads "
                f"{world}x); the factor is right only for a sum over the targets divided by "
                "the targets of every process",
                evidence={"processes": world, "factor": round(factor, 4)},
            )
        )

    def uninstall(self) -> None:
        self.wrappers.undo()

    def _called(
        self, fname: str, args: tuple[Any, ...], kwargs: dict[str, Any], result: torch.Tensor
    ) -> None:
        """``F.<fname>(input, *args, **kwargs)`` returned ``result``."""
        if self.graded is not None and isinstance(result, torch.Tensor) and result.requires_grad:
            self.graded()  # (not a torch.fx trace's proxy)
        input = args[0] if args else kwargs.get("input", kwargs.get("log_probs"))  # ctc's name
        if fname in ("cross_entropy", "nll_loss"):
            target = args[1] if len(args) > 1 else kwargs.get("target")
            ignore = kwargs.get("ignore_index", args[4] if len(args) > 4 else -100)
            for note in self.targets:
                note(target, result, ignore, input)
            if isinstance(input, torch.Tensor) and result.requires_grad:
                self._count_labels(input, target, args[2:], kwargs)
        if (
            fname == "mse_loss"
            and not self.moments.enough
            and _mean_of_same_shape(input, result, args[1:], kwargs)
        ):
            target = args[1] if len(args) > 1 else kwargs.get("target")
            if not (checks.untraceable(input) or checks.untraceable(target)):  # vmap, compile
                self.moments.add(target)
        if (
            isinstance(input, torch.Tensor)
            and not checks.untraceable(input)  # a host sync inside a compiled graph or vmap
            and self.active()
        ):
            rest = {k: v for k, v in kwargs.items() if k != "input"}
            self._inspect(fname, input, result, args[1:], rest)
            if result.numel() == 1 and twice.mean_reduced(fname, args, kwargs):
                self.twice.loss(fname, input, result, sites.user_site())
            if result.requires_grad and (not self.weights.done or self.weights.pending):
                self._class_weights(fname, input, args, kwargs)
            for told in self.fed:
                told(input, f"F.{fname}")
            if result.requires_grad and fname in (*leaks.TARGETED, *ELEMENTWISE, "kl_div"):
                target = args[1] if len(args) > 1 else kwargs.get("target")
                if fname != "kl_div":  # (a distribution, no column of the inputs)
                    self.leaks.target(fname, input, target, result)
                for told in self.trained_targets:
                    told(target, input)

    def _class_weights(
        self, fname: str, input: torch.Tensor, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> None:
        """A sampled training loss's class weights, for ``class-weights-by-frequency``."""
        target = args[1] if len(args) > 1 else kwargs.get("target")
        if fname in ("cross_entropy", "nll_loss") and input.dim() >= 2:
            weight, ignore, _ = _label_options(args[2:], kwargs)
            if isinstance(weight, torch.Tensor) and self.weights.done:
                self.weights.seen(weight)
            elif isinstance(weight, torch.Tensor):
                where = sites.user_site()
                self.weights.weighted(weight, target, ignore, int(input.shape[1]), where)
        elif fname == "binary_cross_entropy_with_logits":
            pos_weight = kwargs.get("pos_weight", args[6] if len(args) > 6 else None)
            if isinstance(pos_weight, torch.Tensor) and self.weights.done:
                self.weights.seen(pos_weight)
            elif isinstance(pos_weight, torch.Tensor):
                self.weights.pos_weighted(pos_weight, target, sites.user_site())

    def _note_moments(self, target: Any) -> None:
        """A sampled step's mean squared error's target, for the level of predicting the
        targets' mean on its batch (``TargetMoments``); micro-batches of one step add up."""
        if checks.untraceable(target):  # a vmapped target: its values go with the transform
            return
        batch, last = self.moments.batch(target), self.batch_moments
        if batch is not None and last is not None and last[0] == batch[0]:
            batch = (batch[0], last[1] + batch[1], last[2] + batch[2])
        self.batch_moments = batch

    def _count_labels(
        self, input: torch.Tensor, target: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> None:
        """A training cross-entropy's class indices, for the labels' own frequencies
        (``priors``). ``args`` follow the target."""
        weight, ignore, smoothing = _label_options(args, kwargs)
        if weight is None and input.dim() and not checks.untraceable(input):
            classes = int(input.shape[1 if input.dim() >= 2 else 0])
            self.labels.add(target, classes, ignore, smoothing)

    def _inspect(
        self,
        fname: str,
        input: torch.Tensor,
        result: torch.Tensor,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> None:
        kwargs = kwargs or {}
        target = args[0] if args else kwargs.get("target")
        if fname in ELEMENTWISE:
            if result.requires_grad and result.numel() == 1:
                self.regression = (id(result), fname, result.grad_fn, 1.0)
                if fname == "mse_loss" and _mean_of_same_shape(input, result, args, kwargs):
                    self._note_moments(target)
            if isinstance(target, torch.Tensor):
                found = loss_inputs.loss_broadcast(fname, input.shape, target.shape)
                if found is not None:
                    found.where = sites.user_site(2)
                    self.add(found)
            if result.requires_grad:
                self.ranges.note(fname, input, target, kwargs)
                self.scales.note(fname, input, target, kwargs)
            return
        if fname in (*BINARY, "nll_loss", "kl_div", "cross_entropy") and result.requires_grad:
            found = squashed.squashed_twice(fname, input)
            if found is not None:
                found.where = sites.user_site(2)
                self.add(found)
        if fname in (*BINARY, "binary_cross_entropy_with_logits"):
            weight = args[1] if len(args) > 1 else kwargs.get("weight")
            reduction = args[4] if len(args) > 4 else kwargs.get("reduction", "mean")
            if reduction != "none":  # (a loss per element may be masked after: ignored labels)
                self._binary_targets(fname, target, weight)
        if fname in BINARY:
            return
        if fname == "binary_cross_entropy_with_logits":
            # A softmax's column too (``probs[:, 1]`` of a two-class head): probabilities.
            node = loss_inputs.producer(input, ("SigmoidBackward0", "SoftmaxBackward0"))
            if node is not None:
                made = "sigmoid" if type(node).__name__ == "SigmoidBackward0" else "softmax"
                self.add(
                    Finding(
                        "probabilities-into-cross-entropy",
                        "error",
                        f"{fname} received a {made}'s output (probabilities), not logits",
                        where=sites.user_site(2),
                        evidence={"function": fname, "produced_by": made},
                        fix=f"drop the final {made} and pass logits to BCEWithLogitsLoss "
                        "(or keep it and use BCELoss)",
                    )
                )
            return
        if fname == "kl_div":  # its input is log-probabilities, as nll_loss's
            if loss_inputs.looks_like_probabilities(input):
                self.add(
                    Finding(
                        "probabilities-into-cross-entropy",
                        "error",
                        f"{fname} received probabilities (non-negative rows summing to 1), not "
                        "log-probabilities: the divergence it computes is meaningless and can "
                        "go below zero",
                        where=sites.user_site(2),
                        evidence={"function": fname},
                        fix=KL_FIX,
                    )
                )
                return
            # Judged where the target is a discrete distribution (its rows sum to 1), whose
            # log-probabilities are <= 0: a flow's log-density, fitted on a grid against a
            # density's values, may be above 0 with nothing wrong.
            log_target = args[4] if len(args) > 4 else kwargs.get("log_target", False)
            discrete = isinstance(target, torch.Tensor) and bool(
                loss_inputs.summing_to_one(target.detach().exp() if log_target else target)
            )
            top = loss_inputs.above_zero(input) if discrete else None
            if top is not None:
                self.add(
                    Finding(
                        "logits-into-nll-loss",
                        "error",
                        f"kl_div received values up to {top:.3g} as its input, not "
                        "log-probabilities (<= 0): raw (or temperature-scaled) logits without "
                        "log_softmax, so the divergence it computes is no divergence and falls "
                        "without bound",
                        where=sites.user_site(2),
                        evidence={"function": fname, "max": round(top, 4)},
                        fix=KL_FIX,
                    )
                )
            return
        if fname in LOG_PROBABILITIES_LAST:
            self._log_probabilities_last(fname, input)
            self._ctc_targets(input, args, kwargs)
            source = loss_inputs.normalised_over(input)
            if source is not None and input.dim() >= 2:
                classes = int(input.shape[-1])
                found = loss_inputs.softmax_over_wrong_dim(fname, *source, classes, last=True)
                if found is not None:
                    found.where = sites.user_site(2)
                    self.add(found)
            return
        classes = int(input.shape[1 if input.dim() >= 2 else 0]) if input.dim() else 0
        source = loss_inputs.normalised_over(input)
        # nll_loss over a log_softmax across the classes is a cross-entropy too.
        ce_like = fname == "cross_entropy" or (
            fname == "nll_loss" and source is not None and source[0][source[1]] == classes
        )
        summed = _summed_over(args, kwargs) if ce_like and result.numel() == 1 else None
        if fname == "cross_entropy":
            self._squashed_logits(input, classes)
            if result.requires_grad:
                self.bounded.note(input)
            self._in_batch_targets(input, target)
            if result.requires_grad and _soft_targets(target, input):
                self._multi_hot(target, 1 if input.dim() >= 2 else 0, "cross_entropy")
        rows = int(input.shape[0]) if input.dim() >= 2 else 0
        if ce_like and not result.requires_grad and result.dim() >= 1:
            self.scored = max(self.scored, rows)  # reduction="none" under no_grad
        if (
            summed
            and result.requires_grad
            and rows >= self.scored
            and not _floor_near_chance(args, kwargs, classes)
        ):
            # The result is the mean cross-entropy times the targets it adds up.
            self.cross_entropy = (id(result), classes, result.grad_fn, float(summed))
            self.cross_entropies[result.grad_fn] = (classes, float(summed))
            weight, ignore, _ = _label_options(args[1:], kwargs)
            counted = self.labels.batch(target, classes, ignore) if weight is None else None
            # Summed over the step's cross-entropies over these classes: micro-batches
            # accumulated, or a loss that adds them up, stand at their counts' level.
            last = self.batch_labels
            same = last is not None and counted is not None and last.shape == counted.shape
            self.batch_labels = last + counted if same else counted  # type: ignore[operator]
        if classes in self.paddings:
            self._padding_in_loss(fname, self.paddings[classes], classes, args, kwargs)
        if source is not None:
            found = loss_inputs.softmax_over_wrong_dim(fname, *source, classes)
            if found is not None:
                found.where = sites.user_site(2)
                self.add(found)
        probabilities = loss_inputs.looks_like_probabilities(input)
        if fname == "nll_loss" and not probabilities:
            top = loss_inputs.above_zero(input)
            if top is not None:
                self.add(
                    Finding(
                        "logits-into-nll-loss",
                        "error",
                        f"nll_loss received values up to {top:.3g}, not log-probabilities "
                        "(<= 0): raw logits without log_softmax, so the loss falls without bound",
                        where=sites.user_site(2),
                        evidence={"function": fname, "max": round(top, 4), "classes": classes},
                    )
                )
        if probabilities:
            expected = "logits" if fname == "cross_entropy" else "log-probabilities"
            self.add(
                Finding(
                    "probabilities-into-cross-entropy",
                    "error",
                    f"{fname} received probabilities (non-negative rows summing to 1 over {classes} classes), not {expected}",
                    where=sites.user_site(2),
                    evidence={
                        "function": fname,
                        "classes": classes,
                        "min": round(float(input.detach().min()), 6),
                    },
                )
            )
        if (
            summed
            and not self.first_seen
            and not self.loaded  # fine-tuning: a high first loss is the new task's, not init's
            and self.at_init()
        ):
            self.first_seen = True
            self.margin = _margin_by_design(input, target)
            first = float(result.detach()) / summed
            if _soft_targets(target, input) and input.dim() >= 2 and summed == 1:  # a mean:
                # log(C) times a row's mass
                first /= max(float(target.detach().sum(1).mean()), 1e-12)
            found = loss_levels.loss_at_init(first, classes)
            # A scaled cosine head (NormFace: s x cos, no margin) starts above log(C) by its
            # scale, as a margin softmax does, and no small initialisation changes that.
            if found is not None and not self.margin and not loss_inputs.cosine_logits(input):
                found.where = sites.user_site(2)
                self.add(found)

    def _in_batch_targets(self, input: torch.Tensor, target: Any) -> None:
        """A cross-entropy (on a sampled step) over in-batch similarities [B, B] (B >= 8):
        counted, and whether its targets are all the one class every such call had so far
        (``in-batch-targets-constant`` is judged when the run ends)."""
        rows = int(input.shape[0]) if input.dim() == 2 else 0
        if rows < 8 or input.shape[1] != rows or not isinstance(target, torch.Tensor):
            return
        if target.shape != (rows,) or target.is_floating_point():
            return
        if not loss_inputs.in_batch_matrix(input):
            return
        calls, constant, value, _ = self.in_batch
        one = int(target[0]) if bool(target.min() == target.max()) else None
        same = one is not None and (value is None or one == value)
        self.in_batch = (calls + 1, constant + same, one if value is None else value, rows)
        if not self.in_batch_site:
            self.in_batch_site = sites.user_site(3)

    def _binary_targets(self, fname: str, target: Any, weight: Any = None) -> None:
        """``targets-out-of-range``: a binary cross-entropy's targets outside [0, 1] (a mask
        stored as 0/255, labels of -1/+1). ``-t log p - (1 - t) log(1 - p)`` is then unbounded
        below: the loss goes negative and falls for ever. Targets a ``weight`` of 0 leaves out
        (a segmentation's void pixels, labels marked unknown) do not count. One host sync."""
        if (
            not isinstance(target, torch.Tensor)
            or not target.is_floating_point()
            or target.numel() == 0
            or checks.untraceable(target)
        ):
            return
        values = target.detach().float()
        if isinstance(weight, torch.Tensor):
            try:
                counted = torch.broadcast_to(weight.detach(), values.shape) != 0
            except RuntimeError:  # (torch raises on such a weight itself)
                return
            values = torch.where(counted, values, 0.5)
        low, high = torch.stack(torch.aminmax(values)).tolist()
        if low >= -1e-6 and high <= 1 + 1e-6:
            return
        self.add(
            Finding(
                "targets-out-of-range",
                "error",
                f"{fname} received targets from {low:.4g} to {high:.4g}, not probabilities in "
                "[0, 1]: its loss is then unbounded below, and falls below zero for ever as the "
                "outputs go to 0 or 1",
                where=sites.user_site(2),
                evidence={"function": fname, "min": round(low, 4), "max": round(high, 4)},
            )
        )

    def _log_probabilities_last(self, fname: str, input: torch.Tensor) -> None:
        """CTC's input: log_softmax over the classes, the last dimension; a softmax's output
        or raw logits there are the mistakes nll_loss's input is checked for."""
        fix = f"apply log_softmax(logits, dim=-1) before {fname} (CTCLoss takes log-probabilities)"
        if loss_inputs.looks_like_probabilities(input, dim=-1):
            classes = int(input.shape[-1])
            message = (
                f"{fname} received probabilities (non-negative rows summing to 1 over "
                f"{classes} classes), not log-probabilities"
            )
            self.add(
                Finding(
                    "probabilities-into-cross-entropy",
                    "error",
                    message,
                    where=sites.user_site(3),
                    evidence={"function": fname, "classes": classes},
                    fix=fix,
                )
            )
        elif (top := loss_inputs.above_zero(input)) is not None:
            self.add(
                Finding(
                    "logits-into-nll-loss",
                    "error",
                    f"{fname} received values up to {top:.3g}, not log-probabilities (<= 0): raw "
                    "logits without log_softmax, so the loss falls without bound",
                    where=sites.user_site(3),
                    evidence={"function": fname, "max": round(top, 4)},
                    fix=fix,
                )
            )

    def _ctc_targets(
        self, input: torch.Tensor, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> None:
        """``args`` follow the log-probabilities: (targets, input_lengths, target_lengths,
        blank, ...), as ``nn.CTCLoss`` passes them."""
        targets = args[0] if args else kwargs.get("targets")
        lengths = args[2] if len(args) > 2 else kwargs.get("target_lengths")
        blank = args[3] if len(args) > 3 else kwargs.get("blank", 0)
        if lengths is None or not isinstance(blank, int):
            return
        found = loss_inputs.ctc_targets_invalid(targets, lengths, blank, int(input.shape[-1]))
        if found is not None:
            found.where = sites.user_site()
            self.add(found)
        if kwargs.get("zero_infinity", args[5] if len(args) > 5 else False) is True:
            frames = args[1] if len(args) > 1 else kwargs.get("input_lengths")
            self._ctc_infeasible(loss_inputs.ctc_infeasible(targets, frames, lengths))

    def _ctc_infeasible(self, counts: tuple[int, int] | None) -> None:
        """``zero_infinity=True`` zeroes the loss of a target too long for its input, as it is
        there to for a few; ``INFEASIBLE_STEPS`` sampled steps in a row with
        ``INFEASIBLE_SHARE`` of the batch or more so, and the model learns from few samples or
        none, without a word."""
        if counts is None or counts[0] < INFEASIBLE_SHARE * counts[1]:
            self.infeasible = []
            return
        self.infeasible.append(counts)
        if len(self.infeasible) < INFEASIBLE_STEPS:
            return
        dropped, samples = (sum(c) for c in zip(*self.infeasible, strict=True))
        self.add(
            Finding(
                "ctc-targets-invalid",
                "error",
                f"{dropped} of {samples} ctc_loss targets on the last {len(self.infeasible)} "
                "sampled steps are longer than their input allows (a frame per label, one more "
                "for each repeated label), and zero_infinity=True sets their loss and gradient "
                "to 0: the model learns from few samples or none (input_lengths counted before "
                "the model downsamples, or an output too short for the targets?)",
                where=sites.user_site(4),
                evidence={"infeasible": dropped, "samples": samples},
                fix="give input_lengths the model's output frames (after any striding or "
                "pooling), and keep the output at least as long as a target plus its repeats",
            )
        )

    def _padding_in_loss(
        self, fname: str, pad: int, classes: int, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> None:
        """A token loss over the model's own vocabulary (``classes`` = an Embedding's size)
        whose targets hold that Embedding's ``padding_idx`` while ``ignore_index`` is another
        id: padded positions are trained to predict padding, and count in the mean. ``args``
        follow the input: (target, weight, size_average, ignore_index, reduce, reduction).
        Padding left out otherwise is fine: a class weight of 0 for it, or per-token losses
        (``reduction="none"``), which the script masks itself; and targets that hold
        ``ignore_index`` (padding masked with it: a padding id left is a real token's, one
        shared with end-of-text). One host sync."""
        target = args[0] if args else kwargs.get("target")
        ignore = kwargs.get("ignore_index", args[3] if len(args) > 3 else -100)
        weight = kwargs.get("weight", args[1] if len(args) > 1 else None)
        reduction = kwargs.get("reduction", args[5] if len(args) > 5 else "mean")
        if not isinstance(target, torch.Tensor) or target.is_floating_point() or ignore == pad:
            return
        if reduction == "none" or kwargs.get("reduce", args[4] if len(args) > 4 else None) is False:
            return
        if isinstance(weight, torch.Tensor) and 0 <= pad < weight.numel() and weight[pad] == 0:
            return
        if not target.numel():
            return
        # Targets masked with ignore_index already: the padded positions are left out, and
        # the padding id that remains is a real token's (a pad id shared with end-of-text) -
        # unless it is a tenth of the targets or more and outnumbers the ignored ones (the
        # transformers causal-LM loss shifts its labels with one ignore_index a row, padding
        # left in them: 38% of a batch's targets).
        share, ignored = (
            float(v)
            for v in torch.stack(
                [(target == pad).float().mean(), (target == ignore).float().mean()]
            )
        )
        if share == 0 or (ignored > 0 and (share < PADDED_SHARE or ignored >= share)):
            return
        self.add(
            Finding(
                "padding-in-loss",
                "warning",
                f"{fname}'s targets are the model's vocabulary ({classes} ids) and {share:.0%} of "
                f"them are the Embedding's padding id {pad}, which ignore_index ({ignore}) does "
                "not leave out: padded positions are trained to predict padding and count in "
                "the loss's mean",
                where=sites.user_site(3),
                evidence={"function": fname, "padding_idx": pad, "share": round(share, 4)},
            )
        )

    def _squashed_logits(self, input: torch.Tensor, classes: int) -> None:
        """``cross_entropy``'s logits come out of a sigmoid (each squashed into (0, 1):
        probabilities of their own) or a ReLU (none below 0). Read from the graph through
        views (no host sync)."""
        node = loss_inputs.producer(input, ("SigmoidBackward0", "ReluBackward0"))
        if node is None:
            return
        if type(node).__name__ == "SigmoidBackward0":
            self.add(
                Finding(
                    "probabilities-into-cross-entropy",
                    "error",
                    f"cross_entropy received a sigmoid's output over {classes} classes: each "
                    "logit is squashed into (0, 1), so the softmax inside the loss sees nearly "
                    "equal scores and the loss cannot fall far below log(C)",
                    where=sites.user_site(3),
                    evidence={"function": "cross_entropy", "produced_by": "sigmoid"},
                    fix="drop the final sigmoid: cross_entropy takes raw logits (a sigmoid per "
                    "class belongs with BCEWithLogitsLoss, for multi-label targets)",
                )
            )
            return
        self.add(
            Finding(
                "relu-into-cross-entropy",
                "warning",
                f"cross_entropy received a ReLU's output over {classes} classes: no logit can go "
                "below 0, and a wrong class's logit pushed to 0 gets no gradient",
                where=sites.user_site(3),
                evidence={"function": "cross_entropy", "produced_by": "relu"},
            )
        )


def _soft_targets(target: Any, input: torch.Tensor) -> TypeGuard[torch.Tensor]:
    """Whether ``target`` is class probabilities for ``input`` (its shape, floating)."""
    return (
        isinstance(target, torch.Tensor)
        and target.is_floating_point()
        and target.shape == input.shape
    )


def _margin_by_design(input: torch.Tensor, target: Any) -> bool:
    """The target's logit is below the mean of its row on 80% of 8 rows or more, or on 32
    rows or more half a row's standard deviation below it on average: a margin softmax
    (CosFace, ArcFace) takes a margin off the target's scaled cosine, so its first loss is far
    above log(C) by design (about s x m at init), while an output layer that starts too
    confident has large logits no lower at the target than elsewhere (below the mean on about
    half the rows). Class-index targets of an [N, C] input; one host sync, once."""
    if (
        not isinstance(target, torch.Tensor)
        or target.dtype not in (torch.int64, torch.int32)
        or input.dim() != 2
        or target.shape != input.shape[:1]
    ):
        return False
    with torch.no_grad():
        logits = input.detach().float()
        valid = (target >= 0) & (target < logits.shape[1])  # ignore_index left out
        at_target = logits.gather(1, target.clamp(0, logits.shape[1] - 1).long()[:, None])
        mean, spread = logits.mean(1), logits.std(1, unbiased=False).clamp_min(1e-12)
        below = (at_target.squeeze(1) < mean)[valid]
        z = ((at_target.squeeze(1) - mean) / spread)[valid]
        if below.numel() >= MARGIN_ROWS and float(below.float().mean()) >= MARGIN_SHARE:
            return True
        return z.numel() >= MARGIN_Z_ROWS and float(z.mean()) <= MARGIN_Z


def _floor_near_chance(args: tuple[Any, ...], kwargs: dict[str, Any], classes: int) -> bool:
    """The targets' own entropy, the least a cross-entropy against them can reach, is
    ``loss_levels.CHANCE_FLOOR`` x log(C) or more: soft targets near uniform (a teacher's
    probabilities at a high temperature) or heavy label smoothing, so a loss near log(C) is
    the targets' level, not a model that ignores its input. ``args`` follow the input:
    (target, weight, size_average, ignore_index, reduce, reduction, label_smoothing). One
    host sync for probability targets; none for class indices."""
    if classes < 2:
        return False
    target = args[0] if args else kwargs.get("target")
    smoothing = _label_options(args[1:], kwargs)[2]
    smoothing = float(smoothing) if isinstance(smoothing, (int, float)) else 0.0
    bound = loss_levels.CHANCE_FLOOR * math.log(classes)
    if isinstance(target, torch.Tensor) and target.is_floating_point():
        if target.dim() < 2 or target.shape[1] != classes:
            return False
        with torch.no_grad():
            t = target.detach().float() * (1 - smoothing) + smoothing / classes
            return float(-(t * t.clamp_min(1e-12).log()).sum(1).mean()) >= bound
    if not 0 < smoothing <= 1:
        return False
    top, rest = 1 - smoothing + smoothing / classes, smoothing / classes
    entropy = -top * math.log(top) - (classes - 1) * rest * math.log(rest)
    return entropy >= bound


def _mean_of_same_shape(
    input: Any, result: torch.Tensor, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> bool:
    """An ``mse_loss`` with gradients whose one value is the mean over a target of its input's
    shape (no broadcast, no weights). ``args`` follow the input: (target, size_average,
    reduce, reduction)."""
    target = args[0] if args else kwargs.get("target")
    reduction = kwargs.get("reduction", args[3] if len(args) > 3 else "mean")
    legacy = any(kwargs.get(k) is not None for k in ("size_average", "reduce", "weight"))
    return (
        result.requires_grad
        and reduction == "mean"
        and not legacy
        and len(args) <= 4
        and isinstance(input, torch.Tensor)
        and isinstance(target, torch.Tensor)
        and input.shape == target.shape
    )


def _label_options(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, Any, Any]:
    """(weight, ignore_index, label_smoothing) of a ``cross_entropy`` or ``nll_loss`` call;
    ``args`` follow the target: (weight, size_average, ignore_index, reduce, reduction,
    label_smoothing)."""
    weight = kwargs.get("weight", args[0] if args else None)
    ignore = kwargs.get("ignore_index", args[2] if len(args) > 2 else -100)
    return weight, ignore, kwargs.get("label_smoothing", args[5] if len(args) > 5 else 0.0)


TIMES_PROCESSES_STEPS = 3
"""``loss-times-processes``: sampled steps in a row whose loss was a mean cross-entropy times
the number of processes."""


def _summed_over(args: tuple[Any, ...], kwargs: dict[str, Any]) -> int | None:
    """How many targets the one value a cross-entropy returns adds up: 1 for a mean over them
    (``reduction="mean"``, the default), whose first value compares with log(C); for a sum
    (``reduction="sum"``: a causal language model's over its tokens, which the transformers
    ``Trainer`` then divides by the tokens of the step's batches), the targets not
    ``ignore_index`` (one host sync for class indices); None where neither (an evaluation's
    running total under the legacy flags, no target counted). ``args`` follow the input:
    (target, weight, size_average, ignore_index, reduce, reduction, ...)."""
    reduction = kwargs.get("reduction", args[5] if len(args) > 5 else "mean")
    size_average = kwargs.get("size_average", args[2] if len(args) > 2 else None)
    reduce = kwargs.get("reduce", args[4] if len(args) > 4 else None)
    if size_average is not None or reduce is not None:  # legacy flags: read as they say
        return 1 if size_average is not False and reduce is not False else None
    if reduction == "mean":
        return 1
    target = args[0] if args else kwargs.get("target")
    if reduction != "sum" or not isinstance(target, torch.Tensor):
        return None
    if target.is_floating_point():  # class probabilities: their mass (one host sync), a
        # target a row, none where a row is masked by zeros
        return max(1, round(float(target.detach().sum()))) if target.dim() >= 2 else None
    ignore = _label_options(args[1:], kwargs)[1]
    counted = int((target != ignore).sum())  # one host sync
    return counted or None


def _minimised(form: str, where: str) -> Finding:
    return Finding(
        "log-likelihood-minimised",
        "error",
        f"the loss adds {form}, a log-likelihood, with no minus: minimising it drives the "
        "probabilities it reads to 0, and it falls without bound (a minus sign left out?)",
        where=where,
        evidence={"form": form},
    )


def _standing_for(
    noted: tuple[int, Any, Any, float] | None, loss: torch.Tensor, node: Any, scale: float
) -> tuple[int, Any, Any, float] | None:
    """``noted`` (a loss's id, what it is, its autograd node, its factor) with the id of
    ``loss`` and the factor times ``scale`` where ``loss`` is it times ``scale`` (``node``:
    ``loss``'s node with those steps walked back), at most 1, or at most the number of
    processes (the transformers ``Trainer`` multiplies a loss by them, for DDP's mean of the
    gradients): a loss scaler's factor is above it, and changes from step to step (a
    ``GradScaler``'s halves on an overflow), while the run's other steps are read as scaled
    alike. The id alone does not tell: the transformers ``Trainer`` drops the loss once it has
    divided it, and the quotient accelerate's backward makes of that may take its id. None
    where the noted loss cannot be the step's loss any more. The node is let go either way:
    held longer, it would keep the graph's saved tensors."""
    if noted is None or noted[2] is None:
        return noted
    if node is noted[2]:
        return (
            (id(loss), noted[1], None, noted[3] * scale)
            if scale <= processes.world_size()
            else None
        )
    if noted[0] == id(loss):  # freed, its id taken by another loss
        return None
    return (noted[0], noted[1], None, noted[3])
